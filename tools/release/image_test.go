package main

import (
	"archive/tar"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeFakeImages writes the images of fakeBuild's binary for both
// architectures, and SHA256SUMS, into a new directory.
func writeFakeImages(t *testing.T) (string, v1.ImageIndex, stamp, string) {
	t.Helper()
	s, bin := fakeBuild(t)
	dist := t.TempDir()
	idx, err := writeImages(dist, map[string]string{"amd64": bin, "arm64": bin}, []string{"amd64", "arm64"}, s)
	require.NoError(t, err)
	require.NoError(t, writeSums(dist))
	return dist, idx, s, bin
}

// TestImagesAreReproducible: two builds of the images of one binary and
// stamp are byte-identical, the docker-archives and the OCI archive.
func TestImagesAreReproducible(t *testing.T) {
	first, idx1, _, _ := writeFakeImages(t)
	second, idx2, _, _ := writeFakeImages(t)
	sums := readSums(t, first)
	assert.Len(t, sums, 3, "two docker-archives and an OCI archive")
	assert.Equal(t, sums, readSums(t, second))
	d1, err := idx1.Digest()
	require.NoError(t, err)
	d2, err := idx2.Digest()
	require.NoError(t, err)
	assert.Equal(t, d1, d2)
}

// TestDockerArchive reads each architecture's docker-archive as `docker
// load` would: its tag, its config and its one layer holding the binary
// alone.
func TestDockerArchive(t *testing.T) {
	dist, _, s, bin := writeFakeImages(t)
	want, err := os.ReadFile(bin)
	require.NoError(t, err)
	tag, err := name.NewTag("ghcr.io/pullguard/pullguard:v1.2.3")
	require.NoError(t, err)
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			path := filepath.Join(dist, "pullguard-v1.2.3-image-linux-"+arch+".tar")
			img, err := tarball.ImageFromPath(path, &tag)
			require.NoError(t, err, "the archive is tagged %s", tag)
			checkImage(t, img, arch, s, want)
		})
	}
}

// TestOCIArchive reads the OCI archive as a layout: one index, named by
// the tag, of both architectures' images, each with its platform.
func TestOCIArchive(t *testing.T) {
	dist, idx, s, bin := writeFakeImages(t)
	want, err := os.ReadFile(bin)
	require.NoError(t, err)
	dir := t.TempDir()
	untar(t, filepath.Join(dist, "pullguard-v1.2.3-image-oci.tar"), dir)
	lp, err := layout.FromPath(dir)
	require.NoError(t, err)
	top, err := lp.ImageIndex()
	require.NoError(t, err)
	topManifest, err := top.IndexManifest()
	require.NoError(t, err)
	require.Len(t, topManifest.Manifests, 1, "index.json names one index")
	desc := topManifest.Manifests[0]
	assert.Equal(t, types.OCIImageIndex, desc.MediaType)
	assert.Equal(t, "v1.2.3", desc.Annotations["org.opencontainers.image.ref.name"])
	assert.Equal(t, "ghcr.io/pullguard/pullguard:v1.2.3", desc.Annotations["io.containerd.image.name"])
	wantDigest, err := idx.Digest()
	require.NoError(t, err)
	assert.Equal(t, wantDigest, desc.Digest, "the layout holds the index that is pushed")

	multi, err := top.ImageIndex(desc.Digest)
	require.NoError(t, err)
	im, err := multi.IndexManifest()
	require.NoError(t, err)
	assert.Equal(t, imageAnnotations(s), im.Annotations)
	require.Len(t, im.Manifests, 2)
	for i, arch := range []string{"amd64", "arm64"} {
		m := im.Manifests[i]
		require.NotNil(t, m.Platform)
		assert.Equal(t, imagePlatform(arch), *m.Platform)
		assert.Equal(t, types.OCIManifestSchema1, m.MediaType)
		img, err := multi.Image(m.Digest)
		require.NoError(t, err)
		checkImage(t, img, arch, s, want)
		mf, err := img.Manifest()
		require.NoError(t, err)
		assert.Equal(t, imageAnnotations(s), mf.Annotations)
	}
}

// checkImage: the config (entrypoint, user, platform, labels, the
// commit's date) and the one layer, holding exactly the binary at
// /usr/bin/pullguard, root's, mode 0755, with the commit's date.
func checkImage(t *testing.T, img v1.Image, arch string, s stamp, bin []byte) {
	t.Helper()
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/bin/pullguard"}, cf.Config.Entrypoint)
	assert.Empty(t, cf.Config.Cmd)
	assert.Equal(t, "0", cf.Config.User)
	assert.Equal(t, "linux", cf.OS)
	assert.Equal(t, arch, cf.Architecture)
	assert.Equal(t, map[string]string{"amd64": "", "arm64": "v8"}[arch], cf.Variant)
	assert.Equal(t, s.date, cf.Created.UTC())
	assert.Equal(t, s.version, cf.Config.Labels["org.opencontainers.image.version"])
	assert.Equal(t, s.commit, cf.Config.Labels["org.opencontainers.image.revision"])
	assert.Equal(t, s.buildDate(), cf.Config.Labels["org.opencontainers.image.created"])
	layers, err := img.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	require.Len(t, cf.RootFS.DiffIDs, 1)
	rc, err := layers[0].Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		names = append(names, h.Name)
		assert.Equal(t, byte(tar.TypeReg), h.Typeflag)
		assert.Equal(t, int64(0o755), h.Mode)
		assert.Equal(t, 0, h.Uid)
		assert.Equal(t, 0, h.Gid)
		assert.Equal(t, s.date, h.ModTime.UTC())
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		assert.Equal(t, bin, data)
	}
	assert.Equal(t, []string{"usr/bin/pullguard"}, names, "the layer holds the binary and nothing else")
}

// TestPushImage pushes the index to a registry on 127.0.0.1 (plain HTTP,
// as for the fleet's local registry) and reads it back by its tag.
func TestPushImage(t *testing.T) {
	_, idx, _, _ := writeFakeImages(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/pullguard/pullguard:v1.2.3"
	require.NoError(t, pushImage(idx, ref))

	r, err := name.ParseReference(ref)
	require.NoError(t, err)
	got, err := remote.Index(r)
	require.NoError(t, err)
	gotDigest, err := got.Digest()
	require.NoError(t, err)
	wantDigest, err := idx.Digest()
	require.NoError(t, err)
	assert.Equal(t, wantDigest, gotDigest)
	arm, err := remote.Image(r, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
	require.NoError(t, err)
	cf, err := arm.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "arm64", cf.Architecture)

	assert.ErrorContains(t, pushImage(idx, "not a reference!"), `-push "not a reference!"`)
}

func TestImageLabelsAreTheCommitsDate(t *testing.T) {
	s, _ := fakeBuild(t)
	assert.Equal(t, "2026-11-02T10:00:00Z", imageAnnotations(s)["org.opencontainers.image.created"])
}

func TestImageTag(t *testing.T) {
	assert.Equal(t, "ghcr.io/pullguard/pullguard:v1.2.3", imageRef("v1.2.3"))
	assert.Equal(t, "ghcr.io/pullguard/pullguard:v1.3.0-rc.1_build.7", imageRef("v1.3.0-rc.1+build.7"))
	_, err := name.NewTag(imageRef("v1.3.0-rc.1+build.7"), name.StrictValidation)
	assert.NoError(t, err)
}

// TestManifestsNameTheImage: every image deploy/daemonset runs is the
// release's, and the kustomization sets its tag.
func TestManifestsNameTheImage(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy", "daemonset", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	image := regexp.MustCompile(`(?m)^\s*(?:-\s+)?image:\s*"?([^"\s]+)"?\s*$`)
	kname := regexp.MustCompile(`(?m)^\s*-\s+name:\s*(\S+)\s*$`)
	found := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range image.FindAllStringSubmatch(string(data), -1) {
			found++
			ref, err := name.ParseReference(m[1], name.StrictValidation)
			require.NoError(t, err, "%s: image %s", f, m[1])
			assert.Equal(t, imageRepo, ref.Context().Name(), "%s: image %s", f, m[1])
		}
		if filepath.Base(f) == "kustomization.yaml" {
			m := kname.FindStringSubmatch(string(data)[strings.Index(string(data), "images:"):])
			require.NotNil(t, m, "%s: images:", f)
			assert.Equal(t, imageRepo, m[1], "%s: the images entry", f)
		}
	}
	assert.Positive(t, found)
}

// TestImportIntoContainerd imports a docker-archive with ctr when a
// containerd answers on its default socket (as root); the fleet e2e
// imports and runs the image for real.
func TestImportIntoContainerd(t *testing.T) {
	ctr, err := exec.LookPath("ctr")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs ctr and root")
	}
	if _, err := os.Stat("/run/containerd/containerd.sock"); err != nil {
		t.Skip("no containerd at /run/containerd/containerd.sock")
	}
	dist, _, _, _ := writeFakeImages(t)
	const ns = "pullguard-release-test"
	ref := "ghcr.io/pullguard/pullguard:v1.2.3"
	t.Cleanup(func() { _ = exec.Command(ctr, "-n", ns, "images", "rm", ref).Run() })
	for _, f := range []string{"pullguard-v1.2.3-image-linux-amd64.tar", "pullguard-v1.2.3-image-oci.tar"} {
		out, err := exec.Command(ctr, "-n", ns, "images", "import", "--all-platforms", filepath.Join(dist, f)).CombinedOutput()
		require.NoError(t, err, "ctr images import %s: %s", f, out)
		out, err = exec.Command(ctr, "-n", ns, "images", "ls", "-q").CombinedOutput()
		require.NoError(t, err, string(out))
		assert.Contains(t, strings.Fields(string(out)), ref, f)
		require.NoError(t, exec.Command(ctr, "-n", ns, "images", "rm", ref).Run())
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err)
		assert.Equal(t, "root", h.Uname, h.Name)
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(path, 0o755))
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, data, 0o644))
		default:
			t.Fatalf("%s: %s: type %c", archive, h.Name, h.Typeflag)
		}
	}
}
