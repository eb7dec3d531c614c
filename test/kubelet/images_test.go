package kubelet

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// sandboxImage is the name containerd's CRI uses for pod sandboxes; it is
// imported, never pulled.
const sandboxImage = "pullguard.invalid/e2e/pause:1"

// buildPause compiles the static wait-for-SIGTERM binary.
func buildPause(out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./testdata/pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./testdata/pause: %w\n%s", err, b)
	}
	return nil
}

// layer makes an image layer of the given files (path -> content, mode).
func layer(files map[string][]byte, mode int64) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for p, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: mode, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

// image is the pause binary as its entrypoint plus a layer that makes the
// digest depend on seed, so that each test image is distinct.
func image(pause []byte, seed string) (v1.Image, error) {
	bin, err := layer(map[string][]byte{"pause": pause}, 0o755)
	if err != nil {
		return nil, err
	}
	layers := []v1.Layer{bin}
	if seed != "" {
		data, err := layer(map[string][]byte{"seed": []byte(seed)}, 0o644)
		if err != nil {
			return nil, err
		}
		layers = append(layers, data)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	cfg.Config.Entrypoint = []string{"/pause"}
	return mutate.ConfigFile(img, cfg)
}

// runAs returns img with its config's USER set to user, as a Dockerfile's
// USER line sets it.
func runAs(img v1.Image, user string) (v1.Image, error) {
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Config.User = user
	return mutate.ConfigFile(img, cfg)
}

// importSandbox writes the sandbox image as a tarball and imports it into
// containerd's k8s.io namespace, unpacked for the native snapshotter.
func importSandbox(ctx context.Context, dir string, ctrd *containerd, pause []byte) error {
	img, err := image(pause, "")
	if err != nil {
		return err
	}
	ref, err := name.ParseReference(sandboxImage)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "sandbox.tar")
	if err := tarball.WriteToFile(path, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(ctrd.bin, "ctr"), "-a", ctrd.socket, "-n", "k8s.io", "images", "import", "--snapshotter", "native", path)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", path, err, b)
	}
	return nil
}

// push writes img to the registry as repo:tag with the admin's credentials
// and returns the reference pods use.
func push(ctx context.Context, reg *registry, img v1.Image, repo, tag string) (string, error) {
	ref, err := name.ParseReference(reg.addr+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		return "", err
	}
	auth := &authn.Basic{Username: adminUser, Password: reg.password(adminUser)}
	if err := remote.Write(ref, img, remote.WithAuth(auth), remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref.String(), nil
}
