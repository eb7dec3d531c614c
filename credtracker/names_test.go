package credtracker

import (
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestRepositoryName(t *testing.T) {
	tests := []struct {
		image      string
		wantRepo   string
		wantSuffix string
		wantErr    bool
	}{
		{image: "alpine", wantRepo: "docker.io/library/alpine"},
		{image: "alpine:3.19", wantRepo: "docker.io/library/alpine", wantSuffix: ":3.19"},
		{image: "library/alpine", wantRepo: "docker.io/library/alpine"},
		{image: "docker.io/alpine", wantRepo: "docker.io/library/alpine"},
		{image: "docker.io/library/alpine:latest", wantRepo: "docker.io/library/alpine", wantSuffix: ":latest"},
		{image: "index.docker.io/library/alpine", wantRepo: "docker.io/library/alpine"},
		{image: "Docker.IO/team/app", wantRepo: "docker.io/team/app"},
		{image: "team/app:v1", wantRepo: "docker.io/team/app", wantSuffix: ":v1"},
		{image: "registry.example/team-a/app:v1", wantRepo: "registry.example/team-a/app", wantSuffix: ":v1"},
		{image: "Registry.Example:5000/team-a/app", wantRepo: "registry.example:5000/team-a/app"},
		{image: "localhost/app", wantRepo: "localhost/app"},
		{image: "localhost:5000/a/b/c:tag", wantRepo: "localhost:5000/a/b/c", wantSuffix: ":tag"},
		{image: "127.0.0.1:5000/app@" + testDigest, wantRepo: "127.0.0.1:5000/app", wantSuffix: "@" + testDigest},
		{image: "r.example/app:v1@" + testDigest, wantRepo: "r.example/app", wantSuffix: "@" + testDigest},
		{image: "", wantErr: true},
		{image: "UPPER/app", wantErr: true},
		{image: "app:", wantErr: true},
		{image: "app:bad tag", wantErr: true},
		{image: "app@sha256:short", wantErr: true},
		{image: "r.example/", wantErr: true},
		{image: "r ex.ample/app", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			repo, suffix, err := splitImage(tt.image)
			if tt.wantErr {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrInvalidImageName)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantRepo, repo)
			assert.Equal(t, tt.wantSuffix, suffix)
		})
	}
}

// ggcrRepository is the reference the fast parser is checked against.
func ggcrRepository(image string) (string, bool) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return "", false
	}
	reg := strings.ToLower(ref.Context().RegistryStr())
	if reg == dockerHubLegacy {
		reg = dockerHub
	}
	return reg + "/" + ref.Context().RepositoryStr(), true
}

func FuzzRepositoryName(f *testing.F) {
	for _, s := range []string{
		"alpine", "alpine:3", "library/alpine", "docker.io/alpine", "index.docker.io/x/y:z",
		"registry.example:5000/a/b@" + testDigest, "localhost/app", "Registry.Example/app",
		"a:b:c", "a@b@c", "host:5000", "x/y:z/w", "[::1]:5000/app",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, image string) {
		repo, err := RepositoryName(image)
		want, ok := ggcrRepository(image)
		if !ok || err != nil {
			return
		}
		if repo != want {
			t.Fatalf("RepositoryName(%q) = %q, go-containerregistry says %q", image, repo, want)
		}
		again, err := RepositoryName(repo)
		if err != nil || again != repo {
			t.Fatalf("RepositoryName is not idempotent on %q: %q, %v", repo, again, err)
		}
	})
}

func BenchmarkRepositoryName(b *testing.B) {
	for _, image := range []string{"registry.example/team-a/app:v1", "alpine:3.19"} {
		b.Run(image, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = RepositoryName(image)
			}
		})
	}
}
