package nodeinstall

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"github.com/pullguard/pullguard/internal/durable"
)

// The manifest's place under serve's store, and its kind.
const (
	installDir       = "install"
	manifestName     = "install.json"
	backupDir        = "backup"
	manifestKind     = "InstallManifest"
	manifestVersion  = "pullguard.dev/v1alpha1"
	manifestFileMode = 0o600
)

// Manifest is what install wrote, so that uninstall gives the node back:
// each file install created or changed, with the hash of what it wrote
// and, for a file that was there, a copy of the original under the store.
type Manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Store is serve's --root-dir, which uninstall removes unless told to
	// keep the records.
	Store string   `json:"store"`
	Files []Record `json:"files"`
	// Dirs are the directories install created, parents first.
	Dirs []string `json:"dirs,omitempty"`
	// Units are the units install enabled or the package shipped.
	Units []string `json:"units,omitempty"`
}

// Record is one file install wrote.
type Record struct {
	Path string `json:"path"`
	// Original is the SHA-256 of the file before install, "" when install
	// created it; Backup its copy (the node's path).
	Original string      `json:"original,omitempty"`
	Backup   string      `json:"backup,omitempty"`
	Mode     fs.FileMode `json:"mode"`
	// Written is the SHA-256 of what install wrote.
	Written string `json:"written"`
	// Opaque is a file whose bytes are not shown (a binary, a token).
	Opaque bool `json:"opaque,omitempty"`
}

func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// manifestPath is the manifest's path under the store.
func manifestPath(store string) string { return path.Join(store, installDir, manifestName) }

// readManifest reads the manifest of an earlier install; nil when none.
func readManifest(root, store string) (*Manifest, error) {
	p := manifestPath(store)
	data, err := os.ReadFile(hostPath(root, p))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("install manifest: %w", err)
	}
	m := &Manifest{}
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("install manifest %s: %w", p, err)
	}
	if m.Kind != manifestKind {
		return nil, fmt.Errorf("install manifest %s: kind %q, not %s", p, m.Kind, manifestKind)
	}
	return m, nil
}

func writeManifest(root string, m *Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	p := hostPath(root, manifestPath(m.Store))
	if err := os.MkdirAll(path.Dir(p), 0o700); err != nil {
		return fmt.Errorf("install manifest: %w", err)
	}
	return durable.WriteFile(p, append(data, '\n'), manifestFileMode)
}

// record returns the manifest's record of a path.
func (m *Manifest) record(p string) *Record {
	for i := range m.Files {
		if m.Files[i].Path == p {
			return &m.Files[i]
		}
	}
	return nil
}
