package registry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	ggcr "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// repoKey is the context key under which the middleware hands the parsed
// repository name to the blob store. go-containerregistry passes the
// request's context to its blob handler; its own repository argument is
// not used because it derives it inconsistently for upload sessions.
type repoKey struct{}

func withRepo(ctx context.Context, repo string) context.Context {
	return context.WithValue(ctx, repoKey{}, repo)
}

func repoFrom(ctx context.Context) string {
	s, _ := ctx.Value(repoKey{}).(string)
	return s
}

// linkedBlobs is an in-memory blob store that, like distribution, serves a
// blob only through a repository it was pushed to. Content is stored once
// per digest.
type linkedBlobs struct {
	mu      sync.RWMutex
	content map[v1.Hash][]byte
	links   map[string]map[v1.Hash]bool // repository -> digests
}

var (
	_ ggcr.BlobHandler       = (*linkedBlobs)(nil)
	_ ggcr.BlobStatHandler   = (*linkedBlobs)(nil)
	_ ggcr.BlobPutHandler    = (*linkedBlobs)(nil)
	_ ggcr.BlobDeleteHandler = (*linkedBlobs)(nil)
)

func newLinkedBlobs() *linkedBlobs {
	return &linkedBlobs{content: make(map[v1.Hash][]byte), links: make(map[string]map[v1.Hash]bool)}
}

// get returns the content of h if the repository in ctx holds it.
func (b *linkedBlobs) get(ctx context.Context, h v1.Hash) ([]byte, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if !b.links[repoFrom(ctx)][h] {
		return nil, ggcr.ErrNotFound
	}
	return b.content[h], nil
}

// Stat implements ggcr.BlobStatHandler.
func (b *linkedBlobs) Stat(ctx context.Context, _ string, h v1.Hash) (int64, error) {
	data, err := b.get(ctx, h)
	if err != nil {
		return 0, err
	}
	return int64(len(data)), nil
}

// Get implements ggcr.BlobHandler.
func (b *linkedBlobs) Get(ctx context.Context, _ string, h v1.Hash) (io.ReadCloser, error) {
	data, err := b.get(ctx, h)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// Put implements ggcr.BlobPutHandler; rc verifies size and digest as it
// is read, and its error is returned wrapped so the handler can tell a
// digest mismatch.
func (b *linkedBlobs) Put(ctx context.Context, _ string, h v1.Hash, rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("failed to read blob %s: %w", h, err)
	}
	repo := repoFrom(ctx)
	if repo == "" {
		return fmt.Errorf("failed to store blob %s: no repository", h)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.content[h]; !ok {
		b.content[h] = data
	}
	if b.links[repo] == nil {
		b.links[repo] = make(map[v1.Hash]bool)
	}
	b.links[repo][h] = true
	return nil
}

// Delete implements ggcr.BlobDeleteHandler: it unlinks the blob from the
// repository, and drops its content once no repository holds it. Deleting
// a blob the repository does not hold succeeds.
func (b *linkedBlobs) Delete(ctx context.Context, _ string, h v1.Hash) error {
	repo := repoFrom(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.links[repo][h] {
		return nil
	}
	delete(b.links[repo], h)
	for _, l := range b.links {
		if l[h] {
			return nil
		}
	}
	delete(b.content, h)
	return nil
}
