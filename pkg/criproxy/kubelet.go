package criproxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1alpha1 "k8s.io/kubelet/config/v1alpha1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/internal/boundedread"
)

// The kubelet's own record directories under its root directory
// (KubeletEnsureSecretPulledImages), and the kinds of their files.
const (
	KubeletRecordsDir = "image_manager"
	kubeletPulledDir  = "pulled"
	kubeletPullingDir = "pulling"
	kubeletAPIVersion = "kubelet.config.k8s.io/v1alpha1"
	// kubeletAPIVersionBeta is what the kubelet writes since v1.35 (the
	// feature's beta). Its records have the same JSON fields as v1alpha1's
	// (TestKubeletRecordsOfBothVersions holds it to that), so both decode
	// into the v1alpha1 types.
	kubeletAPIVersionBeta = "kubelet.config.k8s.io/v1beta1"
	kindImagePulled       = "ImagePulledRecord"
	kindImagePullIntent   = "ImagePullIntent"
	// maxKubeletRecord bounds one record file read from disk.
	maxKubeletRecord = 1 << 20
)

// KubeletRecords is what the kubelet's own implementation left on disk.
type KubeletRecords struct {
	Pulled  []kubeletv1alpha1.ImagePulledRecord
	Intents []kubeletv1alpha1.ImagePullIntent
	// Unreadable names the files that could not be read or decoded.
	Unreadable []string
}

// ReadKubeletRecords reads <kubeletRoot>/image_manager/{pulled,pulling}.
// Missing directories are no records. A file that cannot be read, is too
// large, or is not a record of the expected apiVersion and kind is listed
// in Unreadable (the caller must then assume the worst); only a failure to
// list a directory that exists is an error.
func ReadKubeletRecords(kubeletRoot string) (KubeletRecords, error) {
	var out KubeletRecords
	base := filepath.Join(kubeletRoot, KubeletRecordsDir)
	err := eachFile(filepath.Join(base, kubeletPulledDir), &out.Unreadable, func(path string, data []byte) error {
		var r kubeletv1alpha1.ImagePulledRecord
		if err := decodeKubeletRecord(data, kindImagePulled, &r, &r.TypeMeta); err != nil {
			return err
		}
		if r.ImageRef == "" {
			return errors.New("imageRef is empty")
		}
		out.Pulled = append(out.Pulled, r)
		return nil
	})
	if err != nil {
		return out, err
	}
	err = eachFile(filepath.Join(base, kubeletPullingDir), &out.Unreadable, func(path string, data []byte) error {
		var r kubeletv1alpha1.ImagePullIntent
		if err := decodeKubeletRecord(data, kindImagePullIntent, &r, &r.TypeMeta); err != nil {
			return err
		}
		if r.Image == "" {
			return errors.New("image is empty")
		}
		out.Intents = append(out.Intents, r)
		return nil
	})
	return out, err
}

// decodeKubeletRecord decodes one record file and checks its apiVersion
// and kind. Unknown fields are ignored, as a newer kubelet may add some.
func decodeKubeletRecord(data []byte, kind string, into any, tm *metav1.TypeMeta) error {
	if err := json.Unmarshal(data, into); err != nil {
		return fmt.Errorf("not a JSON %s: %w", kind, err)
	}
	if (tm.APIVersion != kubeletAPIVersion && tm.APIVersion != kubeletAPIVersionBeta) || tm.Kind != kind {
		return fmt.Errorf("apiVersion %q and kind %q, want %s or %s, %s", truncate(tm.APIVersion, 80), truncate(tm.Kind, 80), kubeletAPIVersionBeta, kubeletAPIVersion, kind)
	}
	return nil
}

// eachFile calls fn with every regular file of dir (sorted by name).
// Files that cannot be read or that fn refuses are appended to bad.
func eachFile(dir string, bad *[]string, fn func(path string, data []byte) error) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to list the kubelet's records in %s: %w", dir, err)
	}
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if !e.Type().IsRegular() {
			if !e.IsDir() {
				*bad = append(*bad, path+": not a regular file")
			}
			continue
		}
		data, err := boundedread.ReadFile(path, maxKubeletRecord)
		if err == nil {
			err = fn(path, data)
		}
		if err != nil {
			*bad = append(*bad, path+": "+err.Error())
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Imports turns the kubelet's records into the tracker's imported pulls,
// for the images present now (the others are gone; their records would
// be pruned anyway):
//
//   - each name of a pulled record: node-accessible if the kubelet said
//     nodePodsAccessible, otherwise pulled with a credential pullguard does
//     not know (the kubelet's hashes are plain SHA-256 of another encoding,
//     and the CRI shows no secret coordinates), so every pod verifies once;
//   - each pull intent (a pull the kubelet did not finish recording) whose
//     image is present: pulled with an unknown credential.
func (r KubeletRecords) Imports(present []credtracker.Image) []credtracker.ImportedPull {
	refs := map[string]bool{}
	byName := map[string]string{}
	for _, img := range present {
		refs[img.Ref] = true
		for _, n := range img.Names {
			if norm, ok := dockerRef(n); ok {
				byName[norm] = img.Ref
			}
		}
	}
	var out []credtracker.ImportedPull
	for _, rec := range r.Pulled {
		if !refs[rec.ImageRef] {
			continue
		}
		names := make([]string, 0, len(rec.CredentialMapping))
		for name := range rec.CredentialMapping {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			creds := rec.CredentialMapping[name]
			out = append(out, credtracker.ImportedPull{
				Image:          name,
				ImageRef:       rec.ImageRef,
				NodeAccessible: creds.NodePodsAccessible && len(creds.KubernetesSecrets) == 0 && len(creds.KubernetesServiceAccounts) == 0,
			})
		}
	}
	for _, in := range r.Intents {
		norm, ok := dockerRef(in.Image)
		if !ok {
			continue
		}
		if ref, ok := byName[norm]; ok {
			out = append(out, credtracker.ImportedPull{Image: in.Image, ImageRef: ref})
		}
	}
	return out
}
