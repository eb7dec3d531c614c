package main

import (
	"context"
	"fmt"
	"io"
	"sort"

	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/guardedpull"
	"github.com/pullguard/pullguard/pkg/nodeconfig"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

// unrecorded returns the runtime's images that have no record at all:
// under NeverVerifyPreloadedImages they count as preloaded, free to every
// pod. An image with a record is protected under the names it was pulled
// by, and needs verification under any other.
// known holds the image refs that have a record.
func unrecorded(images []credtracker.Image, known map[string]bool) []credtracker.Image {
	var out []credtracker.Image
	for _, img := range images {
		if !known[img.Ref] {
			out = append(out, img)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref < out[j].Ref })
	return out
}

// unrecordedRemedy tells the operator what to do about unrecorded images.
const unrecordedRemedy = "under the policy NeverVerifyPreloadedImages they count as preloaded and any pod may use them without credentials. " +
	"To protect them, run with --image-pull-credentials-verification-policy AlwaysVerify (each pod then proves access once), " +
	"or remove them from the runtime so that they are pulled again under the protection; " +
	"'pullguard records --runtime ENDPOINT' lists them"

// warnUnrecorded warns once, at start-up, when the runtime holds images
// that the records do not know, under a policy that lets every pod use
// them: a new root directory over a runtime full of images.
func warnUnrecorded(ctx context.Context, w io.Writer, n *podworkers.Node, s nodeconfig.Settings) {
	if !s.Gates.EnsureSecretPulledImages || (s.Policy != credtracker.NeverVerifyPreloadedImages && s.Policy != credtracker.NeverVerifyAllowlistedImages && s.Policy != "") {
		return
	}
	images, err := guardedpull.Inventory(n.Runtime).ListImages(ctx)
	if err != nil {
		klog.Background().V(2).Info("Could not list the runtime's images to look for unrecorded ones", "err", err)
		return
	}
	recs := n.Tracker.Records()
	known := make(map[string]bool, len(recs))
	for _, r := range recs {
		known[r.ImageRef] = true
	}
	missing := unrecorded(images, known)
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("%d of the runtime's %d images have no record: %s", len(missing), len(images), unrecordedRemedy)
	klog.Background().Info("Images present without a record", "count", len(missing), "images", len(images))
	fmt.Fprintln(w, "WARNING:", msg+".")
}
