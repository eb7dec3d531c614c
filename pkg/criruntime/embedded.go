package criruntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/internal/dirlock"
)

// Embedded is an in-process CRI image service that keeps its images under
// a state directory: <dir>/images.json (the names and what they resolve to)
// and <dir>/content (content-addressed blobs). It is safe for concurrent use;
// one Embedded at a time may own a directory.
//
// Reads (ImageStatus, ListImages) are served from an immutable in-memory
// index without locks or disk access. Writes (a pull that adds a name,
// RemoveImage) are serialized, and each is one atomic, fsynced replacement
// of images.json.
type Embedded struct {
	dir     string
	content *contentStore
	opts    options

	idx atomic.Pointer[imageIndex]
	mu  sync.Mutex // serializes index updates and garbage collection

	leaseMu sync.Mutex
	leases  map[v1.Hash]int // blobs an in-flight pull or load relies on

	lock *dirlock.Lock // dir's lock, held until Close
}

// lockFile in the state directory is held while an Embedded owns it.
const lockFile = "lock"

var _ criapi.ImageManagerService = (*Embedded)(nil)

// NewEmbedded opens (or creates) the image store in dir. Images written by
// an earlier Embedded over the same dir are present again. Only one
// Embedded, in any process, may own dir: a second fails at once with
// ErrStateInUse, naming the holder's process ID, before it touches dir. An
// unreadable image index is renamed aside and the index is rebuilt from
// the content store. A target whose blobs are missing (removed by hand) is
// dropped with a log line, and blobs no image needs (left by a crash
// mid-pull) are removed.
func NewEmbedded(dir string, opts ...Option) (*Embedded, error) {
	if dir == "" {
		return nil, errors.New("embedded image service needs a state directory")
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	o.transport = boundRegistryTransport(o.transport, o.registryTimeout)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create image state directory: %w", err)
	}
	// One owner at a time, before anything in dir is read or cleaned.
	lock, err := dirlock.Acquire(dir, lockFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStateInUse, err)
	}
	e, err := open(dir, o)
	if err != nil {
		_ = lock.Release()
		return nil, err
	}
	e.lock = lock
	return e, nil
}

func open(dir string, o options) (*Embedded, error) {
	content, err := openContentStore(filepath.Join(dir, "content"))
	if err != nil {
		return nil, err
	}
	idx, err := loadImageIndex(dir)
	if err != nil {
		// An unreadable index is set aside, never lost, and the index is
		// rebuilt from the content store: the images come back without
		// names, so every name is pulled (and verified) again.
		idx, err = recoverIndex(dir, content, err, o.logger)
		if err != nil {
			return nil, fmt.Errorf("image state in %s: %w", dir, err)
		}
	}
	e := &Embedded{dir: dir, content: content, opts: o, leases: map[v1.Hash]int{}}
	e.idx.Store(idx)
	if err := e.dropIncomplete(); err != nil {
		return nil, err
	}
	if err := e.collectGarbage(); err != nil {
		return nil, err
	}
	return e, nil
}

// dropIncomplete forgets targets whose blobs are not all in the store.
func (e *Embedded) dropIncomplete() error {
	return e.update(func(idx *imageIndex) bool {
		changed := false
		for top, t := range idx.Targets {
			for _, d := range t.blobs(top) {
				if !e.content.has(d) {
					e.opts.logger.Info("Dropping image with missing content", "target", top, "blob", d)
					delete(idx.Targets, top)
					changed = true
					break
				}
			}
		}
		return changed
	})
}

// update applies fn to a copy of the index and, when fn reports a change,
// persists and publishes the copy. Names whose target is gone are dropped,
// and so are targets no name refers to.
func (e *Embedded) update(fn func(idx *imageIndex) bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	next := e.idx.Load().clone()
	if !fn(next) {
		return nil
	}
	used := map[v1.Hash]bool{}
	for n, top := range next.Names {
		if _, ok := next.Targets[top]; !ok {
			delete(next.Names, n)
			continue
		}
		used[top] = true
	}
	for top, t := range next.Targets {
		if !used[top] && !t.Recovered {
			delete(next.Targets, top)
		}
	}
	next.build()
	if err := next.save(e.dir); err != nil {
		return err
	}
	e.idx.Store(next)
	return nil
}

// collectGarbage removes every blob that no target needs and no in-flight
// pull holds.
func (e *Embedded) collectGarbage() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	refs := e.idx.Load().referenced()
	e.leaseMu.Lock()
	defer e.leaseMu.Unlock()
	var errs []error
	err := e.content.walk(func(d v1.Hash, _ int64) {
		if !refs[d] && e.leases[d] == 0 {
			errs = append(errs, e.content.remove(d))
		}
	})
	return errors.Join(append(errs, err)...)
}

// lease keeps blobs from garbage collection until release is called. Take
// it before checking whether a blob is present.
type lease struct {
	e    *Embedded
	held []v1.Hash
}

func (e *Embedded) newLease() *lease { return &lease{e: e} }

func (l *lease) add(ds ...v1.Hash) {
	l.e.leaseMu.Lock()
	defer l.e.leaseMu.Unlock()
	for _, d := range ds {
		l.e.leases[d]++
	}
	l.held = append(l.held, ds...)
}

func (l *lease) release() {
	l.e.leaseMu.Lock()
	defer l.e.leaseMu.Unlock()
	for _, d := range l.held {
		if l.e.leases[d]--; l.e.leases[d] <= 0 {
			delete(l.e.leases, d)
		}
	}
	l.held = nil
}

// lookupKey turns an ImageSpec into an index key: an image ID or a name
// already in canonical form as it is (a name the index holds is canonical,
// and normalizing is idempotent), any other name normalized.
func lookupKey(idx *imageIndex, spec *runtimeapi.ImageSpec) (string, error) {
	if spec == nil || spec.Image == "" {
		return "", fmt.Errorf("%w: no image given", ErrInvalidReference)
	}
	if _, ok := idx.Names[spec.Image]; ok || IsImageID(spec.Image) {
		return spec.Image, nil
	}
	return NormalizeImage(spec.Image)
}

// ImageStatus returns the image that spec names (a tag, a digest
// reference, or an image ID), or a response with a nil Image when it is not
// present. With verbose, Info["info"] describes the stored manifests.
func (e *Embedded) ImageStatus(_ context.Context, spec *runtimeapi.ImageSpec, verbose bool) (*runtimeapi.ImageStatusResponse, error) {
	idx := e.idx.Load()
	key, err := lookupKey(idx, spec)
	if err != nil {
		return nil, err
	}
	img := idx.lookup(key)
	if img == nil {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	resp := &runtimeapi.ImageStatusResponse{Image: img.cri()}
	if verbose {
		resp.Info = map[string]string{"info": idx.describe(img)}
	}
	return resp, nil
}

// ListImages returns every image, sorted by ID. A filter with an image
// returns only the image that name or ID resolves to.
func (e *Embedded) ListImages(_ context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	idx := e.idx.Load()
	if filter != nil && filter.Image != nil && filter.Image.Image != "" {
		key, err := lookupKey(idx, filter.Image)
		if err != nil {
			return nil, err
		}
		if img := idx.lookup(key); img != nil {
			return []*runtimeapi.Image{img.cri()}, nil
		}
		return []*runtimeapi.Image{}, nil
	}
	out := make([]*runtimeapi.Image, 0, len(idx.list))
	for _, img := range idx.list {
		out = append(out, img.cri())
	}
	return out, nil
}

// RemoveImage removes the image that spec names (a tag, a digest reference
// or an image ID) together with all of its names, like containerd's CRI
// RemoveImage: removing "team-a/app:v1" also removes "public/app:v1" when
// both resolve to the same image ID. Blobs no other image needs are deleted.
// Removing an image that is not present is not an error.
func (e *Embedded) RemoveImage(_ context.Context, spec *runtimeapi.ImageSpec) error {
	key, err := lookupKey(e.idx.Load(), spec)
	if err != nil {
		return err
	}
	removed := false
	err = e.update(func(idx *imageIndex) bool {
		img := idx.lookup(key)
		if img == nil {
			return false
		}
		for top, t := range idx.Targets {
			if t.Config == img.id {
				delete(idx.Targets, top)
			}
		}
		removed = true
		return true
	})
	if err != nil {
		return fmt.Errorf("failed to remove image %q: %w", spec.Image, err)
	}
	if removed {
		e.opts.logger.V(2).Info("Removed image", "image", spec.Image)
		if err := e.collectGarbage(); err != nil {
			return fmt.Errorf("failed to delete content of image %q: %w", spec.Image, err)
		}
	}
	return nil
}

// ImageFsInfo reports the bytes and blobs in the content store.
func (e *Embedded) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	var used, inodes uint64
	if err := e.content.walk(func(_ v1.Hash, size int64) {
		used += uint64(size)
		inodes++
	}); err != nil {
		return nil, err
	}
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems: []*runtimeapi.FilesystemUsage{{
			Timestamp:  e.opts.clock.Now().UnixNano(),
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: e.content.root},
			UsedBytes:  &runtimeapi.UInt64Value{Value: used},
			InodesUsed: &runtimeapi.UInt64Value{Value: inodes},
		}},
	}, nil
}

// Close releases the state directory for another Embedded, and closes
// its idle registry connections; every write is already durable. The
// service must not be used afterwards.
func (e *Embedded) Close(context.Context) error {
	if c, ok := e.opts.transport.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	return e.lock.Release()
}
