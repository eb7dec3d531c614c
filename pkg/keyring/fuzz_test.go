package keyring_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/distribution/reference"

	"github.com/pullguard/pullguard/pkg/keyring"
)

func FuzzParseDockerConfig(f *testing.F) {
	f.Add(fixture(f, "config.json"))
	f.Add(fixture(f, "dockercfg"))
	f.Add([]byte(`{"auths":{"r.example":{"auth":"YWxpY2U6cHc"}}}`))
	f.Add([]byte(`{"auths":null,"auths":{"a":{"username":"u"},"a":{}}}`))
	f.Add([]byte(`{"r.example":{"password":"x\q"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for name, parse := range map[string]func([]byte) ([]keyring.ConfigEntry, error){
			"dockerconfigjson": keyring.ParseDockerConfigJSON,
			"dockercfg":        keyring.ParseDockercfg,
		} {
			entries, err := parse(data)
			if err != nil {
				if !errors.Is(err, keyring.ErrInvalidDockerConfig) {
					t.Fatalf("%s: error does not wrap ErrInvalidDockerConfig", name)
				}
				if entries != nil {
					t.Fatalf("%s: entries returned with an error", name)
				}
				// Messages quote at most an entry key (bounded), never data.
				if len(err.Error()) > 512 {
					t.Fatalf("%s: error message of %d bytes", name, len(err.Error()))
				}
				continue
			}
			seen := make(map[string]bool)
			for i, e := range entries {
				if e.Auth.Empty() {
					t.Fatalf("%s: entry %d is empty", name, i)
				}
				if seen[e.Key] {
					t.Fatalf("%s: key of entry %d repeated", name, i)
				}
				seen[e.Key] = true
			}
		}
	})
}

func FuzzMatchImage(f *testing.F) {
	for _, seed := range [][2]string{
		{"*.kubernetes.io", "prefix.kubernetes.io/app"},
		{"prefix.*.io:1111/foo", "prefix.kubernetes.io:1111/foo/bar"},
		{"https://index.docker.io/v1/", "alpine"},
		{"app*.k8s.io", "app1.k8s.io/x:v1"},
		{"registry.example/team", "registry.example/teammate/app@sha256:" + sha},
		{"[::1]:5000", "[::1]:5000/app"},
		{"**a*b*.*", "xaxxbx.io/a"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, image string) {
		got := keyring.MatchImage(pattern, image)
		p, perr := keyring.ParsePattern(pattern)
		im, ierr := keyring.ParseImage(image)
		if (perr != nil || ierr != nil) && got {
			t.Fatalf("MatchImage(%q, %q) is true for invalid input", pattern, image)
		}
		if perr == nil && ierr == nil && got != p.Match(im) {
			t.Fatalf("MatchImage(%q, %q) disagrees with Pattern.Match", pattern, image)
		}
		if ierr != nil {
			return
		}
		// An image's canonical name, and its registry alone, match it.
		if !keyring.MatchImage(im.String(), image) {
			t.Fatalf("canonical %q does not match %q", im.String(), image)
		}
		if !keyring.MatchImage(im.Registry, image) {
			t.Fatalf("registry %q does not match %q", im.Registry, image)
		}
		// Host case never matters.
		if !keyring.MatchImage(strings.ToUpper(im.Registry), image) {
			t.Fatalf("upper-case registry %q does not match %q", im.Registry, image)
		}
		// A valid pattern that is also an image outside Docker Hub (whose
		// names gain an implicit "library/") matches itself.
		if perr == nil {
			if pim, err := keyring.ParseImage(pattern); err == nil && pim.Registry != "docker.io" && !keyring.MatchImage(pattern, pattern) {
				t.Fatalf("pattern %q does not match itself as an image", pattern)
			}
		}
	})
}

// FuzzParseImage checks that the keyring accepts exactly the image names
// distribution/reference accepts, and that its registry and repository are
// that name's, with only the registry's case and Docker Hub's aliases
// folded.
func FuzzParseImage(f *testing.F) {
	for _, seed := range []string{
		"alpine", "alpine:3.20", "myorg/app", "index.docker.io/alpine", "docker.io:5000/x",
		"registry.example:5000/team/app:v1@sha256:" + sha, "localhost:5000", "localhost/app",
		"a.b/c:d:e", "127.0.0.1:5000/app", "Registry.Example/app", "[::1]:5000/app", "/x", "a.b//c", "a//b",
		"LOCALHOST/x:1", "UPPER/Case",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, image string) {
		im, err := keyring.ParseImage(image)
		want, werr := reference.ParseNormalizedNamed(image)
		if (err == nil) != (werr == nil) {
			t.Fatalf("ParseImage(%q): %v, distribution/reference: %v", image, err, werr)
		}
		if err != nil {
			return
		}
		name := want.Name()
		reg, repo, _ := strings.Cut(name, "/")
		if !strings.EqualFold(im.Registry, reg) && im.Registry != "docker.io" {
			t.Fatalf("ParseImage(%q).Registry = %q, name %q", image, im.Registry, name)
		}
		if im.Repository != repo && im.Repository != "library/"+repo {
			t.Fatalf("ParseImage(%q).Repository = %q, name %q", image, im.Repository, name)
		}
	})
}
