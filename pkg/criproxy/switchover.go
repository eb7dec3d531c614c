package criproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/durable"
)

// UnrecordedImages says what the first start does with present images
// that no record of the kubelet covers.
type UnrecordedImages string

const (
	// UnrecordedVerify (the default) marks every present image as of
	// unknown origin: under every policy but NeverVerify, each of its names
	// without an imported entry needs one verification (a pull through the
	// proxy, manifest only) before pods may use it. Safe whatever the
	// kubelet did before: a kubelet without the gate keeps no records, so
	// an image a tenant pulled with a secret would otherwise look
	// preloaded.
	UnrecordedVerify UnrecordedImages = "verify"
	// UnrecordedPreloaded treats them as preloaded, as the kubelet does
	// when its gate is turned on. Choose it only when the kubelet's own
	// implementation was on since the node's images were pulled, or the
	// node holds no image pulled with a tenant's credential.
	UnrecordedPreloaded UnrecordedImages = "preloaded"
)

// ParseUnrecordedImages parses the --unrecorded-images value.
func ParseUnrecordedImages(s string) (UnrecordedImages, error) {
	switch u := UnrecordedImages(s); u {
	case UnrecordedVerify, UnrecordedPreloaded:
		return u, nil
	case "":
		return UnrecordedVerify, nil
	}
	return "", fmt.Errorf("unrecorded images %q: want %q or %q", s, UnrecordedVerify, UnrecordedPreloaded)
}

// SwitchOverFile is the file, under the serve root directory, that says
// the first start's import is done.
const SwitchOverFile = "switched-over.json"

// SwitchOverResult says what the first start imported.
type SwitchOverResult struct {
	Time           time.Time `json:"time"`
	KubeletRecords string    `json:"kubeletRecords"`
	Pulled         int       `json:"pulledRecords"`
	Intents        int       `json:"pullIntents"`
	Unreadable     []string  `json:"unreadable,omitempty"`
	Imported       int       `json:"importedNames"`
	UnknownOrigin  int       `json:"unknownOriginImages"`
	Mode           string    `json:"unrecordedImages"`
}

// SwitchOver runs once per root directory (rootDir/SwitchOverFile marks
// it done): it imports the kubelet's own records from kubeletRoot and
// applies mode to the present images. If any record file of the kubelet
// is unreadable, the present images are treated as UnrecordedVerify
// whatever mode says. It returns nil, nil when it had run before.
func SwitchOver(ctx context.Context, imp credtracker.Importer, inv credtracker.ImageInventory, rootDir, kubeletRoot string, mode UnrecordedImages, now time.Time, logger klog.Logger) (*SwitchOverResult, error) {
	marker := filepath.Join(rootDir, SwitchOverFile)
	if _, err := os.Stat(marker); err == nil {
		return nil, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("failed to check %s: %w", marker, err)
	}
	present, err := inv.ListImages(ctx)
	if err != nil {
		return nil, fmt.Errorf("first start: cannot list the runtime's images to import them: %w", err)
	}
	recs, err := ReadKubeletRecords(kubeletRoot)
	if err != nil {
		return nil, fmt.Errorf("first start: %w", err)
	}
	res := &SwitchOverResult{
		Time:           now.UTC(),
		KubeletRecords: filepath.Join(kubeletRoot, KubeletRecordsDir),
		Pulled:         len(recs.Pulled),
		Intents:        len(recs.Intents),
		Unreadable:     recs.Unreadable,
		Mode:           string(mode),
	}
	pulls := recs.Imports(present)
	res.Imported = len(pulls)
	var unknown []string
	if mode != UnrecordedPreloaded || len(recs.Unreadable) > 0 {
		for _, img := range present {
			unknown = append(unknown, img.Ref)
		}
		res.UnknownOrigin = len(unknown)
	}
	for _, u := range recs.Unreadable {
		logger.Error(nil, "A record of the kubelet could not be read; every present image will be verified once", "file", u)
	}
	reason := "present when pullguard serve first started at " + now.UTC().Format(time.RFC3339)
	if err := imp.Import(pulls, unknown, reason); err != nil {
		// Unparsable names were skipped; a store failure is fatal.
		logger.Error(err, "Some of the kubelet's records were not imported")
		if !allNameErrors(err) {
			return nil, fmt.Errorf("first start: %w", err)
		}
	}
	if err := writeMarker(marker, res); err != nil {
		return nil, err
	}
	logger.Info("Switched over from the kubelet's records", "kubeletRecords", res.KubeletRecords, "pulled", res.Pulled, "intents", res.Intents, "importedNames", res.Imported, "unknownOrigin", res.UnknownOrigin, "unreadable", len(res.Unreadable))
	return res, nil
}

// allNameErrors reports whether err only lists skipped names (no store
// failure).
func allNameErrors(err error) bool {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			if !allNameErrors(e) {
				return false
			}
		}
		return true
	}
	return errors.Unwrap(err) == nil
}

// writeMarker writes res as JSON to path durably (internal/durable).
func writeMarker(path string, res *SwitchOverResult) error {
	data, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("failed to encode %s: %w", path, err)
	}
	if err := durable.WriteFile(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("first start: failed to mark the import done: %w", err)
	}
	return nil
}
