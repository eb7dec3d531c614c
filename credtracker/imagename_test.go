package credtracker

import (
	"testing"

	"github.com/distribution/reference"
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
		// distribution/reference keeps a host's case; only index.docker.io is folded.
		{image: "Docker.IO/team/app", wantRepo: "Docker.IO/team/app"},
		{image: "docker.io/team/app", wantRepo: "docker.io/team/app"},
		{image: "LOCALHOST/x:1", wantRepo: "LOCALHOST/x", wantSuffix: ":1"},
		{image: "a_b.example/app", wantRepo: "a_b.example/app"},
		{image: "team/app:v1", wantRepo: "docker.io/team/app", wantSuffix: ":v1"},
		{image: "registry.example/team-a/app:v1", wantRepo: "registry.example/team-a/app", wantSuffix: ":v1"},
		{image: "Registry.Example:5000/team-a/app", wantRepo: "Registry.Example:5000/team-a/app"},
		{image: "localhost/app", wantRepo: "localhost/app"},
		{image: "localhost:5000/a/b/c:tag", wantRepo: "localhost:5000/a/b/c", wantSuffix: ":tag"},
		{image: "127.0.0.1:5000/app@" + testDigest, wantRepo: "127.0.0.1:5000/app", wantSuffix: "@" + testDigest},
		{image: "r.example/app:v1@" + testDigest, wantRepo: "r.example/app", wantSuffix: "@" + testDigest},
		{image: "", wantErr: true},
		{image: "UPPER/app", wantRepo: "UPPER/app"}, // an upper-case first component is a host
		{image: "app:", wantErr: true},
		{image: "app:bad tag", wantErr: true},
		{image: "app@sha256:short", wantErr: true},
		{image: "r.example/", wantErr: true},
		{image: "r ex.ample/app", wantErr: true},
		// Issue 11: names the old parser accepted and the kubelet rejects.
		{image: "registry.io/myorg/", wantErr: true},
		{image: "a//b", wantErr: true},
		{image: "/abc", wantErr: true},
		{image: "host:5000/a//b:1", wantErr: true},
		{image: "host:5000/a___b:1", wantErr: true},
		{image: "UPPER/Case", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			repo, suffix, err := splitImage(tt.image)
			if tt.wantErr {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrInvalidImageName)
				_, werr := reference.ParseNormalizedNamed(tt.image)
				assert.Error(t, werr, "distribution/reference accepts %q", tt.image)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantRepo, repo)
			assert.Equal(t, tt.wantSuffix, suffix)
		})
	}
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

// FuzzRepositoryName checks the tracker's wrappers against
// distribution/reference (imageref's own differential fuzz covers the
// grammar): the same repository name, a suffix that is the reference's tag
// or digest, and a name that is its own normal form.
func FuzzRepositoryName(f *testing.F) {
	for _, s := range []string{"alpine", "alpine:3.19", "registry.example:5000/team/app@" + testDigest,
		"r.example/app:v1@" + testDigest, "LOCALHOST/x:1", "a//b", "Docker.IO/team/app"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, image string) {
		repo, suffix, err := splitImage(image)
		want, werr := reference.ParseNormalizedNamed(image)
		if (err == nil) != (werr == nil) {
			t.Fatalf("splitImage(%q): %v, distribution/reference: %v", image, err, werr)
		}
		if err != nil {
			return
		}
		if repo != want.Name() {
			t.Fatalf("RepositoryName(%q) = %q, distribution/reference says %q", image, repo, want.Name())
		}
		wantSuffix := ""
		if d, ok := want.(reference.Digested); ok {
			wantSuffix = "@" + d.Digest().String()
		} else if tg, ok := want.(reference.Tagged); ok {
			wantSuffix = ":" + tg.Tag()
		}
		if suffix != wantSuffix {
			t.Fatalf("splitImage(%q) suffix %q, want %q", image, suffix, wantSuffix)
		}
		if again, err := RepositoryName(repo); err != nil || again != repo {
			t.Fatalf("RepositoryName is not idempotent on %q: %q, %v", repo, again, err)
		}
	})
}
