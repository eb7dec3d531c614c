package keyring_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/distribution/reference"

	"github.com/pullguard/pullguard/pkg/credential"
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
				if seen[e.Key] {
					t.Fatalf("%s: key of entry %d repeated", name, i)
				}
				seen[e.Key] = true
			}
		}
	})
}

// FuzzMatchImage compares Pattern.Match with refMatch, the kubelet's
// URLsMatchStr on the image's normalized name, and ConfigKey with the
// kubelet's filing of a docker config key.
func FuzzMatchImage(f *testing.F) {
	for _, seed := range [][2]string{
		{"*.kubernetes.io", "prefix.kubernetes.io/app"},
		{"prefix.*.io:1111/foo", "prefix.kubernetes.io:1111/foo/bar"},
		{"https://index.docker.io/v1/", "alpine"},
		{"app*.k8s.io", "app1.k8s.io/x:v1"},
		{"registry.example/team", "registry.example/teammate/app@sha256:" + sha},
		{"[::1]:5000", "[::1]:5000/app"},
		{"[::1]", "[::1]/app"},
		{"**a*b*.*", "xaxxbx.io/a"},
		{"reg[a-c]?.Ex\\ample", "regb1.Example/x"},
		{"docker.io/lib", "alpine"},
		{"user@reg.example:/v2/x?y#z", "reg.example/x"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, glob, image string) {
		checkAgainstRef(t, glob, image)
		key, err := keyring.ConfigKey(glob)
		ref, ok := refConfigKey(glob)
		if (err == nil) != ok || key != ref {
			t.Fatalf("ConfigKey(%q) = %q, %v; the kubelet files it under %q (%v)", glob, key, err, ref, ok)
		}
		if err == nil {
			checkAgainstRef(t, key, image)
		}
	})
}

// FuzzParseImage checks that the keyring accepts exactly the image names
// distribution/reference accepts, that its name and repository are that
// name's, and that its Registry is the name's registry normalized for
// hashing.
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
		if im.Name() != name || im.Repository != repo {
			t.Fatalf("ParseImage(%q) = %q, %q; name %q", image, im.Name(), im.Repository, name)
		}
		if im.Registry != credential.NormalizeRegistry(reg) {
			t.Fatalf("ParseImage(%q).Registry = %q, name %q", image, im.Registry, name)
		}
	})
}
