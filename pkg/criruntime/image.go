package criruntime

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cri returns the image as a fresh CRI Image the caller may modify.
func (img *image) cri() *runtimeapi.Image {
	id := img.id.String()
	out := &runtimeapi.Image{
		Id:          id,
		RepoTags:    slices.Clone(img.repoTags),
		RepoDigests: slices.Clone(img.repoDigests),
		Size:        img.size,
		Spec:        &runtimeapi.ImageSpec{Image: id},
	}
	if out.RepoTags == nil {
		out.RepoTags = []string{}
	}
	if out.RepoDigests == nil {
		out.RepoDigests = []string{}
	}
	uid, username := imageUser(img.user)
	if uid != nil {
		out.Uid = &runtimeapi.Int64Value{Value: *uid}
	}
	out.Username = username
	return out
}

// imageUser splits a config's User ("1000", "1000:1000", "nginx",
// "nginx:web") into a numeric UID or a user name, as containerd reports
// them; the group is dropped.
func imageUser(user string) (*int64, string) {
	user, _, _ = strings.Cut(user, ":")
	if user == "" {
		return nil, ""
	}
	if uid, err := strconv.ParseInt(user, 10, 64); err == nil {
		return &uid, ""
	}
	return nil, user
}

// describe is the verbose ImageStatus information: for every stored target
// of img, what it resolved to.
func (idx *imageIndex) describe(img *image) string {
	type targetInfo struct {
		Digest    v1.Hash `json:"digest"`
		MediaType string  `json:"mediaType"`
		Manifest  v1.Hash `json:"manifest"`
		Layers    int     `json:"layers"`
		Size      uint64  `json:"size"`
	}
	var infos []targetInfo
	for top, t := range idx.Targets {
		if t.Config == img.id {
			infos = append(infos, targetInfo{top, t.MediaType, t.Manifest, len(t.Layers), t.Size})
		}
	}
	slices.SortFunc(infos, func(a, b targetInfo) int { return strings.Compare(a.Digest.String(), b.Digest.String()) })
	b, _ := json.Marshal(map[string]any{"imageID": img.id, "targets": infos})
	return string(b)
}
