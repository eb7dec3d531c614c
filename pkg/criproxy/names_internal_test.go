package criproxy

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/criruntime"
	"github.com/pullguard/pullguard/pkg/imageref"
)

// imageNames reads pkg/imageref's corpus: the names of the kubelet's and
// distribution/reference's own tests, valid and not, one quoted name a
// line.
func imageNames(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("../imageref/testdata/names.txt")
	require.NoError(t, err)
	var names []string
	for line := range strings.Lines(string(data)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			n, err := strconv.Unquote(line)
			require.NoError(t, err, line)
			names = append(names, n)
		}
	}
	require.NotEmpty(t, names)
	return names
}

// TestCallKeysOfEveryName: the call keys (normalizedKey) read names with
// the tracker's grammar. Every name of the corpus the grammar reads keys
// the entry of the name containerd stores it under (so a window opened by
// one spelling is found by the other), and, wherever go-containerregistry
// (which keyed the calls before) reads the name too, the key it gave: the
// keys keep their meaning. An image ID keeps its own key, as before.
func TestCallKeysOfEveryName(t *testing.T) {
	var read, both int
	for _, name := range imageNames(t) {
		ref, err := imageref.Parse(name)
		if err != nil {
			assert.Equal(t, name, normalizedKey(name), "a name the grammar rejects keys itself")
			continue
		}
		if criruntime.IsImageID(name) {
			assert.Equal(t, name, normalizedKey(name), "an image ID keys itself")
			continue
		}
		read++
		key := normalizedKey(name)
		assert.Equal(t, ref.DockerRef(), key, "%q", name)
		assert.Equal(t, key, normalizedKey(key), "%q: its normalized spelling keys alike", name)
		if old, err := criruntime.NormalizeImage(name); err == nil {
			both++
			assert.Equal(t, old, key, "%q: the key go-containerregistry gave it", name)
		}
	}
	t.Logf("%d names read by the grammar, %d of them by go-containerregistry too", read, both)
	assert.Positive(t, both)
}

// TestSpellingsShareAWindowAndAProof: the kubelet sends a pod's image as
// the pod spec spells it, and two containers (or two pods of one tenant)
// may spell one image two ways. A window a presence check opened under
// one spelling is the window of that pod's pull under the other, and a
// proof a pull left under one answers a presence check under the other,
// both ways. Names that one grammar folds together and the other does not
// (go-containerregistry's, which keyed the calls before, or
// distribution/reference's, the tracker's) and that containerd resolves to
// different images share neither: a pod's window or proof for one image
// never serves another.
func TestSpellingsShareAWindowAndAProof(t *testing.T) {
	const (
		hex    = "3e3cbd12d0f4a3a52d8fe4b9eb2c9a4f79d7b1f25bbdb53e3b51bd56b2efcab3"
		digest = "sha256:" + hex
		id     = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	)
	for _, tc := range []struct {
		name  string
		a, b  string
		share bool
	}{
		{name: "Docker Hub's short name and containerd's", a: "alpine", b: "docker.io/library/alpine:latest", share: true},
		{name: "the kubelet's default tag", a: "alpine:latest", b: "docker.io/library/alpine", share: true},
		{name: "the legacy Docker Hub host", a: "index.docker.io/library/alpine:3.19", b: "alpine:3.19", share: true},
		{name: "the library namespace", a: "library/alpine:3.19", b: "docker.io/library/alpine:3.19", share: true},
		{name: "a user's Docker Hub repository", a: "team-a/app:v1", b: "docker.io/team-a/app:v1", share: true},
		{name: "a tag beside a digest", a: "alpine:3.19@" + digest, b: "docker.io/library/alpine@" + digest, share: true},
		{name: "a registry with a port", a: "localhost:5000/app", b: "localhost:5000/app:latest", share: true},
		{name: "a registry host go-containerregistry rejects (upper case, no dot)", a: "Registry/app", b: "Registry/app:latest", share: true},

		{name: "an image ID is not the tag of docker.io/library/sha256 the grammar reads in it", a: id, b: "docker.io/library/sha256:" + strings.TrimPrefix(id, "sha256:")},
		{name: "a bare image ID is not tag latest of docker.io/library/<hex> (go-containerregistry folded them)", a: hex, b: "docker.io/library/" + hex + ":latest"},
		{name: "a name with a component that starts with '-' (go-containerregistry folded them)", a: "registry.example/-a", b: "registry.example/-a:latest"},
		{name: "a name with an empty component (go-containerregistry folded them)", a: "a//b", b: "docker.io/a//b:latest"},
		{name: "another registry", a: "registry-1.docker.io/library/alpine", b: "alpine"},
		{name: "another tag", a: "alpine:3.19", b: "alpine:3.20"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			cred := credential.Credential{Registry: "registry.example", Auth: credential.AuthConfig{RegistryToken: "t"}, Hash: credential.Hash{1}}
			for _, dir := range [][2]string{{tc.a, tc.b}, {tc.b, tc.a}} {
				first, second := dir[0], dir[1]

				p := newPodCalls(DefaultAnswerWindow, maxWindows)
				p.hid(first, "pod", now, "sha256:1", nil)
				open, _, _ := p.take(second, "pod", now)
				assert.Equal(t, tc.share, open, "a window opened for %q, a pull of %q", first, second)

				p = newPodCalls(DefaultAnswerWindow, maxWindows)
				p.proved(first, "pod", "uid", "sha256:1", cred)
				got, held, ok := p.proofOf(second, "pod", "sha256:1")
				assert.Equal(t, tc.share, held, "a pull of %q proved, a presence check of %q", first, second)
				assert.Equal(t, tc.share, ok)
				if tc.share {
					assert.Equal(t, cred.Hash, got.Hash, "the proof's credential")
				}
			}
		})
	}
}
