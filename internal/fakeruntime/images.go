package fakeruntime

import (
	"context"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/imageref"
)

// Images is a runtime's image store, as containerd keeps it: each image
// once, under its ID, found by its ID or by any of its names (RepoTags,
// RepoDigests) however spelled ("alpine" is
// "docker.io/library/alpine:latest"). It answers every call of a CRI image
// service but PullImage, which the fakes that embed it add. Its zero value
// is an empty store; it is safe for concurrent use.
//
// Images are replaced, never changed: an image a call returned is never
// changed under its caller.
type Images struct {
	mu        sync.Mutex
	byID      map[string]*runtimeapi.Image
	statusErr error
	removeErr error
}

// dockerRef is the name containerd stores name under (pkg/imageref's
// DockerRef), or name itself if the grammar rejects it.
func dockerRef(name string) string {
	if r, err := imageref.Parse(name); err == nil {
		return r.DockerRef()
	}
	return name
}

// isDigestName says whether name is a repository digest (repo@digest).
func isDigestName(name string) bool {
	r, err := imageref.Parse(name)
	return err == nil && r.Digest != ""
}

// Add puts img in the store (a copy), as a side-load does, in place of any
// image of its ID; its names are taken off the other images.
func (s *Images) Add(img *runtimeapi.Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	img = proto.Clone(img).(*runtimeapi.Image)
	for _, n := range append(slices.Clone(img.RepoTags), img.RepoDigests...) {
		s.untag(dockerRef(n), img.Id)
	}
	s.put(img)
}

// Name gives the image id the name (a repo digest for a digest reference,
// else a tag), taken off any other image, as a pull moves a tag; it
// reports whether the store holds id.
func (s *Images) Name(id, name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.name(id, name)
}

// name is Name; s.mu is held.
func (s *Images) name(id, name string) bool {
	old := s.byID[id]
	if old == nil {
		return false
	}
	n := dockerRef(name)
	s.untag(n, id)
	img := proto.Clone(old).(*runtimeapi.Image)
	if isDigestName(n) {
		img.RepoDigests = appendNew(img.RepoDigests, n)
	} else {
		img.RepoTags = appendNew(img.RepoTags, n)
	}
	s.put(img)
	return true
}

// appendNew appends the names not in list yet.
func appendNew(list []string, names ...string) []string {
	for _, n := range names {
		if !slices.ContainsFunc(list, func(m string) bool { return dockerRef(m) == dockerRef(n) }) {
			list = append(list, n)
		}
	}
	return list
}

// untag takes the normalized name n off every image but keep; s.mu is
// held.
func (s *Images) untag(n, keep string) {
	other := func(m string) bool { return dockerRef(m) == n }
	for id, img := range s.byID {
		if id == keep || !slices.ContainsFunc(img.RepoTags, other) && !slices.ContainsFunc(img.RepoDigests, other) {
			continue
		}
		img = proto.Clone(img).(*runtimeapi.Image)
		img.RepoTags = slices.DeleteFunc(img.RepoTags, other)
		img.RepoDigests = slices.DeleteFunc(img.RepoDigests, other)
		s.put(img)
	}
}

// put stores img under its ID; s.mu is held.
func (s *Images) put(img *runtimeapi.Image) {
	if s.byID == nil {
		s.byID = map[string]*runtimeapi.Image{}
	}
	s.byID[img.Id] = img
}

// find is the image with the ID or the name image, nil if none; s.mu is
// held.
func (s *Images) find(image string) *runtimeapi.Image {
	if img, ok := s.byID[image]; ok {
		return img
	}
	n := dockerRef(image)
	for _, img := range s.byID {
		for _, m := range append(slices.Clone(img.RepoTags), img.RepoDigests...) {
			if dockerRef(m) == n {
				return img
			}
		}
	}
	return nil
}

// Find is the image with the ID or the name image, nil if none.
func (s *Images) Find(image string) *runtimeapi.Image {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.find(image)
}

// FailStatus makes ImageStatus fail with err (nil: answer again).
func (s *Images) FailStatus(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statusErr = err
}

// FailRemove makes RemoveImage fail with err, removing nothing (nil:
// remove again).
func (s *Images) FailRemove(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeErr = err
}

func (s *Images) ImageStatus(_ context.Context, spec *runtimeapi.ImageSpec, _ bool) (*runtimeapi.ImageStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.statusErr != nil {
		return nil, s.statusErr
	}
	return &runtimeapi.ImageStatusResponse{Image: s.find(spec.GetImage())}, nil
}

func (s *Images) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*runtimeapi.Image, 0, len(s.byID))
	for _, img := range s.byID {
		out = append(out, img)
	}
	return out, nil
}

// RemoveImage removes the whole image found by its ID or any of its names,
// as containerd's CRI does; an absent image is no error (the CRI's rule).
func (s *Images) RemoveImage(_ context.Context, spec *runtimeapi.ImageSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removeErr != nil {
		return s.removeErr
	}
	if img := s.find(spec.GetImage()); img != nil {
		delete(s.byID, img.Id)
	}
	return nil
}

func (s *Images) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (s *Images) Close(context.Context) error { return nil }

var (
	_ criapi.ImageManagerService = (*Runtime)(nil)
	_ criapi.ImageManagerService = (*ClaimTrusting)(nil)
)
