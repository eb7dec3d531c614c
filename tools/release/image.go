package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageRepo is the repository the release's image is named and published
// under; deploy/daemonset's manifests name it too (TestManifestsNameTheImage).
const imageRepo = "ghcr.io/pullguard/pullguard"

// imageTag is the image's tag for a version: the version itself, but a
// semver build suffix's "+", which a tag may not hold, becomes "_".
func imageTag(version string) string { return strings.ReplaceAll(version, "+", "_") }

// imageRef is the image's full name for a version.
func imageRef(version string) string { return imageRepo + ":" + imageTag(version) }

// dockerArchiveName is the docker-archive (`docker load`, `ctr images
// import`) of one architecture's image.
func dockerArchiveName(version, arch string) string {
	return fmt.Sprintf("pullguard-%s-image-linux-%s.tar", version, arch)
}

// ociArchiveName is the OCI image layout of every architecture's image, as
// a tar file (skopeo's and podman's oci-archive:, `ctr images import`).
func ociArchiveName(version string) string {
	return fmt.Sprintf("pullguard-%s-image-oci.tar", version)
}

// The OCI annotation and label keys the image carries.
const (
	annVersion  = "org.opencontainers.image.version"
	annRevision = "org.opencontainers.image.revision"
	annCreated  = "org.opencontainers.image.created"
	annSource   = "org.opencontainers.image.source"
	annTitle    = "org.opencontainers.image.title"
	annRefName  = "org.opencontainers.image.ref.name"
)

func imageAnnotations(s stamp) map[string]string {
	return map[string]string{
		annVersion:  s.version,
		annRevision: s.commit,
		annCreated:  s.buildDate(),
		annSource:   homepage,
		annTitle:    "pullguard",
	}
}

// imagePlatform is the OCI platform of a linux architecture; arm64's
// variant is v8, as the OCI image index specification spells it.
func imagePlatform(arch string) v1.Platform {
	p := v1.Platform{OS: "linux", Architecture: arch}
	if arch == "arm64" {
		p.Variant = "v8"
	}
	return p
}

// buildImage is the image of one architecture: one layer holding the
// static binary at binPath (mode 0755, root's, the commit's date as its
// time), run as root with the binary as its entrypoint. Nothing else: no
// shell, no C library, no CA bundle (serve verifies pulls through the
// runtime, which has the node's), no /tmp. Every byte is a function of the
// binary and the stamp.
func buildImage(bin, arch string, s stamp) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	h := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(binPath, "/"),
		Mode:     0o755,
		Size:     int64(len(data)),
		ModTime:  s.date,
		Uname:    "root",
		Gname:    "root",
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(h); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := layerTar.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("image layer for linux/%s: %w", arch, err)
	}
	created := v1.Time{Time: s.date}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "tools/release: " + binPath, Comment: "pullguard " + s.version},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	p := imagePlatform(arch)
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = created
	cf.Author = maintainer
	cf.Config = v1.Config{
		Entrypoint: []string{binPath},
		User:       "0",
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/bin"},
		Labels:     imageAnnotations(s),
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, imageAnnotations(s)).(v1.Image), nil
}

// imageIndex is the index of every architecture's image, in the order
// given, each with its platform.
func imageIndex(images map[string]v1.Image, arches []string, s stamp) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range arches {
		p := imagePlatform(arch)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: images[arch], Descriptor: v1.Descriptor{Platform: &p}})
	}
	return mutate.Annotations(idx, imageAnnotations(s)).(v1.ImageIndex)
}

// writeImages writes, into dist, each architecture's docker-archive
// (tagged imageRef) and the OCI archive of the index of all of them (its
// index.json names the tag in org.opencontainers.image.ref.name), and
// returns the index.
func writeImages(dist string, bins map[string]string, arches []string, s stamp) (v1.ImageIndex, error) {
	tag, err := name.NewTag(imageRef(s.version), name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("image name for %s: %w", s.version, err)
	}
	images := map[string]v1.Image{}
	for _, arch := range arches {
		img, err := buildImage(bins[arch], arch, s)
		if err != nil {
			return nil, err
		}
		images[arch] = img
		if err := tarball.WriteToFile(filepath.Join(dist, dockerArchiveName(s.version, arch)), tag, img); err != nil {
			return nil, fmt.Errorf("docker-archive for linux/%s: %w", arch, err)
		}
	}
	idx := imageIndex(images, arches, s)
	tmp, err := os.MkdirTemp("", "pullguard-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return nil, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{annRefName: tag.TagStr(), "io.containerd.image.name": tag.Name()})); err != nil {
		return nil, fmt.Errorf("OCI layout: %w", err)
	}
	if err := tarDir(tmp, filepath.Join(dist, ociArchiveName(s.version)), s); err != nil {
		return nil, err
	}
	return idx, nil
}

// tarDir writes the files under dir into a tar file at out, in a fixed
// order with fixed owners, modes and times, so that its bytes are those of
// the files alone.
func tarDir(dir, out string, s stamp) error {
	var paths []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		paths = append(paths, path)
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(paths)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, path := range paths {
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: s.date, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		case fi.Mode().IsRegular():
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, fi.Size()
		default:
			return fmt.Errorf("%s: not a file or a directory", path)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			src, err := os.Open(path)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, src)
			src.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// pushImage pushes the index of the release's images (every architecture
// built) to ref, such as 127.0.0.1:5000/pullguard/pullguard:v1.2.3 (a
// registry on a loopback or private address is reached over plain HTTP,
// as go-containerregistry's name package decides). Credentials come from
// the docker config of the user running it, if any.
func pushImage(idx v1.ImageIndex, ref string, opts ...remote.Option) error {
	r, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("-push %q: %w", ref, err)
	}
	if err := remote.WriteIndex(r, idx, opts...); err != nil {
		return fmt.Errorf("push to %s: %w", r, err)
	}
	return nil
}
