package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubecontainer "k8s.io/kubernetes/pkg/kubelet/container"
	"k8s.io/kubernetes/pkg/kubelet/images/pullmanager"
)

// The kubelet's defaults that size its pull manager (KubeletConfiguration:
// maxPods 110, serializeImagePulls true so maxParallelImagePulls unset).
const (
	kubeletMaxPods          = 110
	kubeletMaxParallelPulls = 0
)

// upstreamRequest is one container's image as the kubelet asks its pull
// manager about it.
type upstreamRequest struct {
	image, ref string
	creds      pullmanager.GetPodCredentials
}

// upstream is the kubelet's pull manager over a kubelet root directory.
type upstream struct {
	root string
	n    int
	pm   *pullmanager.PullManager
	reqs []upstreamRequest
}

// newUpstream writes n pulled records into root/image_manager/pulled, as
// the kubelet stores them, and builds the requests for them.
func newUpstream(root string, n int) (*upstream, error) {
	pulled := filepath.Join(root, "image_manager", "pulled")
	if err := os.MkdirAll(filepath.Join(root, "image_manager", "pulling"), 0o700); err != nil {
		return nil, fmt.Errorf("failed to create the kubelet's pulling directory: %w", err)
	}
	if err := os.MkdirAll(pulled, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create the kubelet's pulled directory: %w", err)
	}
	u := &upstream{root: root, n: n, reqs: make([]upstreamRequest, n)}
	now := metav1.NewTime(time.Now())
	for i := range n {
		b, err := json.Marshal(upstreamRecord(i, now))
		if err != nil {
			return nil, fmt.Errorf("failed to encode the kubelet's record of %s: %w", imageRef(i), err)
		}
		if err := os.WriteFile(filepath.Join(pulled, upstreamFileName(imageRef(i))), b, 0o600); err != nil {
			return nil, fmt.Errorf("failed to write the kubelet's record of %s: %w", imageRef(i), err)
		}
		secrets := []kubeletconfig.ImagePullSecret{upstreamSecret(i)}
		u.reqs[i] = upstreamRequest{image: image(i), ref: imageRef(i), creds: func() ([]kubeletconfig.ImagePullSecret, *kubeletconfig.ImagePullServiceAccount, error) {
			return secrets, nil, nil
		}}
	}
	return u, nil
}

// upstreamRecord is the i-th image's record in the kubelet's on-disk format
// (kubelet.config.k8s.io/v1beta1 ImagePulledRecord, one file per image ref,
// credentials keyed by the image name without tag or digest).
func upstreamRecord(i int, now metav1.Time) *kubeletconfigv1beta1.ImagePulledRecord {
	s := secretOf(i)
	return &kubeletconfigv1beta1.ImagePulledRecord{
		TypeMeta:        metav1.TypeMeta{APIVersion: kubeletconfigv1beta1.SchemeGroupVersion.String(), Kind: "ImagePulledRecord"},
		LastUpdatedTime: now,
		ImageRef:        imageRef(i),
		CredentialMapping: map[string]kubeletconfigv1beta1.ImagePullCredentials{
			repository(i): {KubernetesSecrets: []kubeletconfigv1beta1.ImagePullSecret{{
				UID: s.uid, Namespace: s.namespace, Name: s.name, CredentialHash: s.upstreamHash(),
			}}},
		},
	}
}

func upstreamSecret(i int) kubeletconfig.ImagePullSecret {
	s := secretOf(i)
	return kubeletconfig.ImagePullSecret{UID: s.uid, Namespace: s.namespace, Name: s.name, CredentialHash: s.upstreamHash()}
}

// upstreamFileName is the name of the kubelet's file for a record or an
// intent: "sha256-" and the hex SHA-256 of the image ref (or image).
func upstreamFileName(key string) string {
	return fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(key)))
}

// open builds the pull manager as kuberuntime does with the gate on: the
// file-system accessor (which reads every record once to migrate old
// versions), the in-memory cache in front of it (which lists every record
// again to warm up), the default verification policy.
func (u *upstream) open(ctx context.Context) error {
	logger := logr.Discard()
	fsAccessor, err := pullmanager.NewFSPullRecordsAccessor(logger, u.root)
	if err != nil {
		return fmt.Errorf("failed to set up the kubelet's records accessor: %w", err)
	}
	intentCache := int32(max(2*kubeletMaxPods, 2*kubeletMaxParallelPulls))
	recordCache := int32(5 * kubeletMaxPods)
	cached := pullmanager.NewCachedPullRecordsAccessor(logger, fsAccessor, intentCache, recordCache, kubeletMaxParallelPulls)
	policy, err := pullmanager.NewImagePullCredentialVerificationPolicy(kubeletconfig.NeverVerifyPreloadedImages, nil)
	if err != nil {
		return fmt.Errorf("failed to set up the kubelet's verification policy: %w", err)
	}
	pm, err := pullmanager.NewImagePullManager(ctx, cached, policy, noImages{}, kubeletMaxParallelPulls)
	if err != nil {
		return fmt.Errorf("failed to set up the kubelet's pull manager: %w", err)
	}
	u.pm = pm
	return nil
}

// close drops the pull manager (it has nothing to release) and removes the
// records the writes added, so that the next round starts from the same n.
func (u *upstream) close(written int) error {
	u.pm = nil
	for k := range written {
		p := filepath.Join(u.root, "image_manager", "pulled", upstreamFileName(imageRef(u.n+k)))
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("failed to remove the kubelet's record %s: %w", p, err)
		}
	}
	return nil
}

// decide asks about count requests of s from index from; it returns how
// many answers were not "no pull needed".
func (u *upstream) decide(ctx context.Context, s stream, from, count int) (bad int) {
	for k := from; k < from+count; k++ {
		r := &u.reqs[s[k&(streamLen-1)]]
		if must, err := u.pm.MustAttemptImagePull(ctx, r.image, r.ref, r.creds); must || err != nil {
			bad++
		}
	}
	return bad
}

// harness is decide's loop with the pull manager replaced by a call that
// does nothing: the cost of reading the next request and passing it on.
func (u *upstream) harness(ctx context.Context, s stream, from, count int) (bad int) {
	for k := from; k < from+count; k++ {
		r := &u.reqs[s[k&(streamLen-1)]]
		if !upstreamSink(ctx, r.image, r.ref, r.creds) {
			bad++
		}
	}
	return bad
}

//go:noinline
func upstreamSink(_ context.Context, image, ref string, creds pullmanager.GetPodCredentials) bool {
	return len(image) != 0 && len(ref) != 0 && creds != nil
}

// write records the pull of the (n+k)-th image as the kubelet does around
// a pull: an intent, then the pulled record with the secret that worked.
func (u *upstream) write(ctx context.Context, k int) error {
	i := u.n + k
	if err := u.pm.RecordPullIntent(logr.Discard(), image(i)); err != nil {
		return err
	}
	u.pm.RecordImagePulled(ctx, image(i), imageRef(i), &kubeletconfig.ImagePullCredentials{
		KubernetesSecrets: []kubeletconfig.ImagePullSecret{upstreamSecret(i)},
	})
	return nil
}

// written reports whether the (n+k)-th image is now known with its secret.
func (u *upstream) written(ctx context.Context, k int) bool {
	i := u.n + k
	secrets := []kubeletconfig.ImagePullSecret{upstreamSecret(i)}
	must, err := u.pm.MustAttemptImagePull(ctx, image(i), imageRef(i), func() ([]kubeletconfig.ImagePullSecret, *kubeletconfig.ImagePullServiceAccount, error) {
		return secrets, nil, nil
	})
	return err == nil && !must
}

// refuses reports whether a pod holding another tenant's secret (not the
// one that pulled the i-th image) must pull it: the record was found and
// read, so "no pull needed" above means the credential matched.
func (u *upstream) refuses(ctx context.Context, i int) bool {
	secrets := []kubeletconfig.ImagePullSecret{upstreamSecret(i + 1)}
	must, err := u.pm.MustAttemptImagePull(ctx, image(i), imageRef(i), func() ([]kubeletconfig.ImagePullSecret, *kubeletconfig.ImagePullServiceAccount, error) {
		return secrets, nil, nil
	})
	return err == nil && must
}

// diskBytes is the space the n records take on disk (allocated blocks).
func (u *upstream) diskBytes() (int64, error) {
	return dirBlocks(filepath.Join(u.root, "image_manager", "pulled"))
}

// noImages is the container runtime's image service, which the pull
// manager asks for its images only when leftover intents must be resolved
// at start-up; there are none here.
type noImages struct{ kubecontainer.ImageService }

func (noImages) ListImages(context.Context) ([]kubecontainer.Image, error) { return nil, nil }
