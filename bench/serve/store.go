//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criproxy"
	"github.com/pullguard/pullguard/pkg/podworkers"
)

// tenant is a namespace whose pull secret pulled every image: its
// credential (made up for the benchmark; never printed).
type tenant struct {
	namespace string
	auth      *runtimeapi.AuthConfig
}

func tenants(n int) []tenant {
	out := make([]tenant, n)
	for k := range out {
		out[k] = tenant{
			namespace: fmt.Sprintf("tenant-%d", k),
			auth:      &runtimeapi.AuthConfig{Username: fmt.Sprintf("tenant-%d", k), Password: fmt.Sprintf("bench-secret-%d", k)},
		}
	}
	return out
}

// populate writes, under root/credtracker (serve's layout for --root-dir
// root), what serve itself records after every tenant pulled every image
// through it with its own credential: one record per image, one credential
// entry per tenant, filed as serve files a CRI credential (a secret entry
// in the pod's namespace named by the hash; pkg/criproxy recordSource),
// hashed with the store's own key. It writes through the tracker's API,
// one durable transaction per credential record, as serve's pulls would.
func populate(ctx context.Context, root string, rt *fakeRuntime, ts []tenant) error {
	inv := credtracker.ImageInventoryFunc(func(context.Context) ([]credtracker.Image, error) {
		out := make([]credtracker.Image, len(rt.images))
		for i, img := range rt.images {
			out[i] = credtracker.Image{Ref: img.Id, Names: append(append([]string(nil), img.RepoTags...), img.RepoDigests...)}
		}
		return out, nil
	})
	tr, err := credtracker.New(ctx, credtracker.Config{Dir: filepath.Join(root, podworkers.TrackerDir)}, inv)
	if err != nil {
		return err
	}
	creds := make([]credential.Credential, len(ts))
	for k, t := range ts {
		a := credential.AuthConfig{Username: t.auth.Username, Password: t.auth.Password}
		h := tr.Hasher().Hash(registryHost, a)
		creds[k] = credential.Credential{Registry: registryHost, Auth: a, Hash: h,
			Source: credential.Source{Kind: credential.SourceSecret, Namespace: t.namespace, Name: criproxy.SourceNamePrefix + h.String()}}
	}
	for i, img := range rt.images {
		for _, c := range creds {
			if err := tr.RecordImagePulled(imageName(i), img.Id, c); err != nil {
				tr.Close()
				return err
			}
		}
	}
	if st := tr.Status(); st.Records != len(rt.images) {
		tr.Close()
		return fmt.Errorf("the store holds %d image records, want %d", st.Records, len(rt.images))
	}
	return tr.Close()
}

// copyTree copies the directory src to dst (which must not exist).
func copyTree(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp -a %s %s: %v: %s", src, dst, err, out)
	}
	return nil
}

// dirSize is the total size of the regular files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	return n
}

// fileSize is the size of the file at path, 0 if it cannot be read.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
