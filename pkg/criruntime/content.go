package criruntime

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/pullguard/pullguard/internal/durable"
)

// maxMetadataBlob bounds manifests, indexes and configs read into memory.
const maxMetadataBlob = 8 << 20

// contentStore is a content-addressed blob store:
// <root>/blobs/sha256/<hex>, written through <root>/ingest. A blob exists
// under its final name only once its bytes hashed to that name and were
// fsynced, so a crash leaves at most a stray ingest file (removed on open).
type contentStore struct {
	root   string
	blobs  string
	ingest string
}

func openContentStore(root string) (*contentStore, error) {
	s := &contentStore{
		root:   root,
		blobs:  filepath.Join(root, "blobs", "sha256"),
		ingest: filepath.Join(root, "ingest"),
	}
	if err := os.RemoveAll(s.ingest); err != nil {
		return nil, fmt.Errorf("failed to clean ingest directory: %w", err)
	}
	for _, dir := range []string{s.blobs, s.ingest} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("failed to create content directory: %w", err)
		}
	}
	return s, nil
}

func (s *contentStore) path(d v1.Hash) string { return filepath.Join(s.blobs, d.Hex) }

// has says whether blob d is in the store.
func (s *contentStore) has(d v1.Hash) bool {
	if d.Algorithm != "sha256" {
		return false
	}
	_, err := os.Stat(s.path(d))
	return err == nil
}

// write stores the bytes of r as blob d, verifying the digest and, when
// size >= 0, the size. A blob already present is not written again.
func (s *contentStore) write(ctx context.Context, d v1.Hash, size int64, r io.Reader) error {
	if d.Algorithm != "sha256" {
		return fmt.Errorf("%w: unsupported digest algorithm %q", ErrUnsupportedManifest, d.Algorithm)
	}
	if s.has(d) {
		return nil
	}
	// Renamed into blobs/ once checked; blobs/ is fsynced by sync, once
	// for all the blobs of a pull.
	w, err := durable.Create(s.path(d), 0o600, durable.TempDir(s.ingest), durable.DeferDirSync())
	if err != nil {
		return fmt.Errorf("failed to create ingest file for %s: %w", d, err)
	}
	defer w.Close() // discards it unless committed
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), ctxReader{ctx: ctx, r: r})
	if err == nil {
		err = checkBlob(d, size, n, h)
	}
	if err != nil {
		return fmt.Errorf("failed to write blob %s: %w", d, err)
	}
	if err := w.Commit(); err != nil {
		return fmt.Errorf("failed to commit blob %s: %w", d, err)
	}
	return nil
}

func checkBlob(d v1.Hash, want, got int64, h hash.Hash) error {
	if want >= 0 && want != got {
		return fmt.Errorf("%w: %s: size %d, want %d", ErrDigestMismatch, d, got, want)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != d.Hex {
		return fmt.Errorf("%w: content hashed to sha256:%s, want %s", ErrDigestMismatch, sum, d)
	}
	return nil
}

// read returns the bytes of a small blob (manifest, index, config) after
// checking them against d.
func (s *contentStore) read(d v1.Hash) ([]byte, error) {
	f, err := os.Open(s.path(d))
	if err != nil {
		return nil, fmt.Errorf("failed to open blob %s: %w", d, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMetadataBlob+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read blob %s: %w", d, err)
	}
	if len(b) > maxMetadataBlob {
		return nil, fmt.Errorf("blob %s is larger than %d bytes", d, maxMetadataBlob)
	}
	h := sha256.New()
	h.Write(b)
	if err := checkBlob(d, -1, int64(len(b)), h); err != nil {
		return nil, fmt.Errorf("blob %s is corrupt: %w", d, err)
	}
	return b, nil
}

// sync makes the directory entries of committed blobs durable.
func (s *contentStore) sync() error { return durable.SyncDir(s.blobs) }

// remove deletes blob d; a missing blob is not an error.
func (s *contentStore) remove(d v1.Hash) error {
	if err := os.Remove(s.path(d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("failed to remove blob %s: %w", d, err)
	}
	return nil
}

// walk calls fn for every blob with its size.
func (s *contentStore) walk(fn func(d v1.Hash, size int64)) error {
	entries, err := os.ReadDir(s.blobs)
	if err != nil {
		return fmt.Errorf("failed to list blobs: %w", err)
	}
	for _, e := range entries {
		d, err := v1.NewHash("sha256:" + e.Name())
		if err != nil {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		fn(d, info.Size())
	}
	return nil
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
