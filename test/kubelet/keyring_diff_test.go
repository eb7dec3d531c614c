package kubelet

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	kcp "k8s.io/kubernetes/pkg/credentialprovider"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/util/parsers"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// The kubelet's keyring against pullguard's (pkg/keyring), in process: no
// root, no cluster, no machine lock.
//
// A case is a pod's pull secrets, the node's docker config and the
// credential provider plugins' answers, each a list of docker config
// entries. The kubelet's side is built from the kubelet's own code
// (k8s.io/kubernetes pkg/credentialprovider): one BasicDockerKeyring of the
// secrets (as secretsToTrackedDockerConfigs builds it), one of the node's
// config (as providersDockerKeyring builds it for a look-up), one of the
// plugins' answers (as externalCredentialProviderKeyring builds it), in a
// UnionDockerKeyring, looked up with the name parsers.ParseImageName gives
// (image_manager.go's makeLookupPullCredentialsFunc). pullguard's side is
// keyring.Merge(FromSecrets, NodeKeyring of a real file, LookupAll of
// NewStatic answers). Both must return the same credentials, from the same
// sources, in the same order.
//
// BasicDockerKeyring.Add ranges over a map, so the kubelet files the
// entries of one config in a random order, which only shows when two keys
// of one config file alike ("reg.example" and "https://reg.example/"). The
// kubelet's side adds entries one at a time in file order (for answers, in
// the lexical order of their keys, as keyring.NewStatic takes them): one
// of the orders the kubelet can take, and the one pullguard promises.

// diffEntry is one docker config entry: its key as written and its
// credential. A user name is unique within a case unless shared on
// purpose.
type diffEntry struct {
	key, user, pass string
	asAuth          bool // written as "auth" (base64 user:pass)
}

type keyringCase struct {
	secrets [][]diffEntry
	node    []diffEntry
	plugins [][]diffEntry
}

// cred is a returned credential as both sides can say it.
type cred struct {
	source     string
	user, pass string
}

func (c cred) String() string { return c.source + " " + c.user } // no password: they are test values, but keep the habit

// kubeletLookup builds the kubelet's keyrings of c and looks image up as
// the kubelet's image manager does. ok is false when the kubelet rejects
// the image name.
func kubeletLookup(t testing.TB, c keyringCase, image string) (got []cred, name string, ok bool) {
	repoToPull, _, _, err := parsers.ParseImageName(image)
	if err != nil {
		return nil, "", false
	}
	secrets := &kcp.BasicDockerKeyring{}
	for i, s := range c.secrets {
		src := &kcp.CredentialSource{Secret: &kcp.SecretCoordinates{UID: fmt.Sprintf("uid-%d", i), Namespace: "team-a", Name: fmt.Sprintf("pull-%d", i)}}
		for _, e := range s {
			secrets.Add(src, kcp.DockerConfig{e.key: {Username: e.user, Password: e.pass}})
		}
	}
	node := &kcp.BasicDockerKeyring{}
	for _, e := range c.node {
		node.Add(nil, kcp.DockerConfig{e.key: {Username: e.user, Password: e.pass}})
	}
	plugins := &kcp.BasicDockerKeyring{}
	for _, p := range c.plugins {
		for _, e := range byKey(p) {
			plugins.Add(nil, kcp.DockerConfig{e.key: {Username: e.user, Password: e.pass}})
		}
	}
	found, _ := kcp.UnionDockerKeyring{secrets, node, plugins}.Lookup(repoToPull)
	for _, f := range found {
		src := "node"
		if f.Source != nil && f.Source.Secret != nil {
			src = "secret " + f.Source.Secret.Namespace + "/" + f.Source.Secret.Name + " " + f.Source.Secret.UID
		}
		got = append(got, cred{source: src, user: f.Username, pass: f.Password})
	}
	return got, repoToPull, true
}

func byKey(entries []diffEntry) []diffEntry {
	out := slices.Clone(entries)
	sort.SliceStable(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// pullguardKeyring builds pullguard's keyrings of c.
type pullguardKeyring struct {
	kr   keyring.Keyring
	errs []error // entries the kubelet would skip too
}

func newPullguardKeyring(t testing.TB, h *credential.Hasher, c keyringCase, dir string) pullguardKeyring {
	var secrets []*corev1.Secret
	for i, s := range c.secrets {
		secrets = append(secrets, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: fmt.Sprintf("pull-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: configJSON(s)},
		})
	}
	pk := pullguardKeyring{}
	sk, errs := keyring.FromSecrets(h, secrets)
	pk.errs = append(pk.errs, errs...)
	path := filepath.Join(dir, "config.json")
	require.NoError(t, os.WriteFile(path, configJSON(c.node), 0o600))
	nk, err := keyring.NodeKeyring(h, []string{path})
	if err != nil {
		pk.errs = append(pk.errs, err)
	}
	var answers []*keyring.Static
	for i, p := range c.plugins {
		auths := map[string]credential.AuthConfig{}
		for _, e := range p {
			auths[e.key] = credential.AuthConfig{Username: e.user, Password: e.pass}
		}
		a, err := keyring.NewStatic(h, credential.Source{Kind: credential.SourceNode, Name: fmt.Sprintf("plugin-%d", i)}, auths)
		if err != nil {
			pk.errs = append(pk.errs, err)
		}
		answers = append(answers, a)
	}
	plugins := keyring.Func(func(_ context.Context, image string) ([]credential.Credential, error) {
		im, err := keyring.ParseImage(image)
		if err != nil {
			return nil, err
		}
		return keyring.LookupAll(im, answers...), nil
	})
	pk.kr = keyring.Merge(sk, nk, plugins)
	return pk
}

func (pk pullguardKeyring) lookup(t testing.TB, image string) ([]cred, bool) {
	found, err := pk.kr.Lookup(context.Background(), image)
	if err != nil {
		require.ErrorIs(t, err, keyring.ErrInvalidImage)
		return nil, false
	}
	var got []cred
	for _, f := range found {
		src := "node"
		if f.Source.Kind == credential.SourceSecret {
			src = "secret " + f.Source.Namespace + "/" + f.Source.Name + " " + f.Source.UID
		}
		got = append(got, cred{source: src, user: f.Auth.Username, pass: f.Auth.Password})
	}
	return got, true
}

// configJSON writes entries as a config.json, in their order.
func configJSON(entries []diffEntry) []byte {
	var b bytes.Buffer
	b.WriteString(`{"auths":{`)
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(e.key)
		b.Write(k)
		b.WriteByte(':')
		switch {
		case e.asAuth:
			v, _ := json.Marshal(base64.StdEncoding.EncodeToString([]byte(e.user + ":" + e.pass)))
			fmt.Fprintf(&b, `{"auth":%s}`, v)
		case e.user == "" && e.pass == "":
			b.WriteString(`{}`)
		default:
			u, _ := json.Marshal(e.user)
			p, _ := json.Marshal(e.pass)
			fmt.Fprintf(&b, `{"username":%s,"password":%s}`, u, p)
		}
	}
	b.WriteString(`}}`)
	return b.Bytes()
}

// compareKeyrings looks every image up in both keyrings of c.
func compareKeyrings(t *testing.T, h *credential.Hasher, c keyringCase, images []string, what string) (lookups, matched int) {
	t.Helper()
	pk := newPullguardKeyring(t, h, c, t.TempDir())
	for _, image := range images {
		want, name, kok := kubeletLookup(t, c, image)
		got, pok := pk.lookup(t, image)
		if kok != pok {
			t.Errorf("%s: image %q: the kubelet accepts it: %v, pullguard: %v", what, image, kok, pok)
			continue
		}
		if !kok {
			continue
		}
		im, err := keyring.ParseImage(image)
		require.NoError(t, err)
		if im.Name() != name {
			t.Errorf("image %q: the kubelet looks up %q, pullguard %q", image, name, im.Name())
		}
		lookups++
		if len(want) > 0 {
			matched++
		}
		if !slices.Equal(want, got) {
			t.Errorf("%s: image %q (looked up as %q):\n  kubelet:   %v\n  pullguard: %v\n  case: %s", what, image, name, want, got, describeCase(c))
		}
	}
	return lookups, matched
}

func describeCase(c keyringCase) string {
	var b strings.Builder
	keys := func(es []diffEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, fmt.Sprintf("%q=%s", e.key, e.user))
		}
		return out
	}
	for i, s := range c.secrets {
		fmt.Fprintf(&b, "secret %d %v; ", i, keys(s))
	}
	fmt.Fprintf(&b, "node %v; ", keys(c.node))
	for i, p := range c.plugins {
		fmt.Fprintf(&b, "plugin %d %v; ", i, keys(p))
	}
	return b.String()
}

// Key and image material: case, ports, paths (a prefix, a trailing slash,
// /v1/ and /v2/), globs ('*', '?', classes, escapes, bad patterns),
// schemes, Docker Hub's spellings, IPv6 and localhost.
var (
	diffHosts = []string{
		"reg.example", "Reg.Example", "REG.EXAMPLE", "a.reg.example", "regb.example", "localhost", "LocalHost",
		"127.0.0.1", "[::1]", "docker.io", "index.docker.io", "registry-1.docker.io", "Docker.io", "quay.io", "x",
	}
	diffGlobHosts = []string{
		"*.example", "*.reg.example", "*", "reg*.example", "r?g.example", "reg[a-c].example", "[a-c]eg.example",
		`re\g.example`, "reg[.example", "*.docker.io", "docker.*", "*.0.0.1", "[::1", "*EG.example", "*.*", "",
		"user@reg.example", "[::2]",
	}
	diffPorts   = []string{"", "", "", ":5000", ":443", ":"}
	diffPaths   = []string{"", "", "/", "/team", "/team/", "/teammate", "/team/app", "/library", "/library/alpine", "/lib", "/v1/", "/v2/", "/v2/team", "/v1", "/Team", "/app?x=1", "/%74eam", "/tenant-a"}
	diffSchemes = []string{"", "", "", "", "https://", "http://", "HTTPS://", "ftp://"}
	diffImages  = []string{
		"alpine", "alpine:3.20", "library/alpine", "docker.io/library/alpine", "index.docker.io/library/alpine",
		"registry-1.docker.io/library/alpine", "registry-1.docker.io/alpine", "team/app", "teammate/app",
		"docker.io/team/app", "tenant-a/app", "docker.io/tenant-a/app", "v1/app", "reg.example/team/app:v1",
		"reg.example/teammate/app", "reg.example/team", "reg.example/Team", "Reg.Example/team/app", "REG.EXAMPLE/app",
		"reg.example:5000/team/app", "reg.example:443/app", "a.reg.example/team/app", "regb.example/x",
		"localhost/app", "LocalHost/app", "localhost:5000/app", "127.0.0.1:5000/team/app", "127.0.0.1/app",
		"[::1]:5000/app", "[::1]/app", "[::2]:5000/x", "quay.io/team/app", "x.y/app", "reg.example/v2/team",
		"reg.example/team/app@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"UPPER/Case", "a//b", "https://reg.example/app", "[ab]/x", "[ab]:5000/x", "[::1::2]:5000/x", "[A]/0",
	}
)

func randomKey(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		return derivedKey(r, diffImages[r.IntN(len(diffImages))])
	}
	host := diffHosts[r.IntN(len(diffHosts))]
	if r.IntN(3) == 0 {
		host = diffGlobHosts[r.IntN(len(diffGlobHosts))]
	}
	return diffSchemes[r.IntN(len(diffSchemes))] + host + diffPorts[r.IntN(len(diffPorts))] + diffPaths[r.IntN(len(diffPaths))]
}

// derivedKey is a key made from image's normalized name, so that it
// matches often, then changed in one or two ways: a path cut to a prefix
// (on a segment or not), a trailing slash, a scheme and /v1/ or /v2/, a
// label turned into a glob, the case of the host, a port added or taken
// away, Docker Hub's other spellings.
func derivedKey(r *rand.Rand, image string) string {
	name, _, _, err := parsers.ParseImageName(image)
	if err != nil {
		name = "reg.example/team/app"
	}
	host, path, _ := strings.Cut(name, "/")
	for range 1 + r.IntN(2) {
		switch r.IntN(9) {
		case 0:
			path = path[:r.IntN(len(path)+1)]
		case 1:
			if i := strings.LastIndexByte(path, '/'); i >= 0 {
				path = path[:i+1]
			}
		case 2:
			path = strings.TrimSuffix(path, "/") + "/"
		case 3:
			path = []string{"v1/", "v2/"}[r.IntN(2)] + path
			host = []string{"https://", "http://", ""}[r.IntN(3)] + host
		case 4:
			labels := strings.Split(host, ".")
			i := r.IntN(len(labels))
			labels[i] = []string{"*", "*" + labels[i][min(1, len(labels[i])):], labels[i] + "*", "?" + labels[i]}[r.IntN(4)]
			host = strings.Join(labels, ".")
		case 5:
			host = []string{strings.ToUpper(host), strings.ToLower(host), strings.ToUpper(host[:1]) + host[1:]}[r.IntN(3)]
		case 6:
			if h, _, ok := strings.Cut(host, ":"); ok && !strings.HasPrefix(host, "[") {
				host = h
			} else {
				host += ":5000"
			}
		case 7:
			if host == "docker.io" {
				host = []string{"index.docker.io", "registry-1.docker.io", "https://index.docker.io/v1/", "docker.io/"}[r.IntN(4)]
				if strings.Contains(host, "/") {
					path = ""
				}
			}
		case 8:
			path = ""
		}
	}
	if path == "" {
		return host
	}
	return host + "/" + path
}

// randomCase draws a case: up to 3 secrets, a node config, up to 2
// plugin answers, each of up to 5 entries with keys unique within their
// config (a map's keys), some keys in several configs, some credentials
// shared, some empty.
func randomCase(r *rand.Rand, n int) keyringCase {
	var c keyringCase
	user := 0
	shared := []string{}
	config := func() []diffEntry {
		var out []diffEntry
		seen := map[string]bool{}
		for range r.IntN(6) {
			var k string
			if len(shared) > 0 && r.IntN(4) == 0 {
				k = shared[r.IntN(len(shared))]
			} else {
				k = randomKey(r)
				shared = append(shared, k)
			}
			if seen[k] {
				continue
			}
			seen[k] = true
			user++
			e := diffEntry{key: k, user: fmt.Sprintf("u%d-%d", n, user), pass: fmt.Sprintf("p%d", user), asAuth: r.IntN(3) == 0}
			switch r.IntN(10) {
			case 0:
				e.user, e.pass, e.asAuth = "", "", false // no credential field
			case 1:
				e.user, e.pass = "same", "same-pass" // one account under several keys
			}
			out = append(out, e)
		}
		return out
	}
	for range r.IntN(4) {
		c.secrets = append(c.secrets, config())
	}
	c.node = config()
	for range r.IntN(3) {
		c.plugins = append(c.plugins, config())
	}
	return c
}

// TestKubeletKeyringDifferential compares pullguard's keyrings with the
// kubelet's on generated cases (a fixed seed, so a failure repeats), and
// each generated key as a matchImages entry with the kubelet's
// URLsMatchStr.
func TestKubeletKeyringDifferential(t *testing.T) {
	quietKubeletLog(t)
	require.True(t, utilfeature.DefaultFeatureGate.Enabled(features.KubeletEnsureSecretPulledImages),
		"the kubelet tracks credential sources only with its gate on (its default)")
	h, err := credential.NewHasher(bytes.Repeat([]byte{3}, credential.KeySize))
	require.NoError(t, err)

	t.Run("generated", func(t *testing.T) {
		r := rand.New(rand.NewPCG(33, 2535))
		const cases = 1500
		lookups, matched := 0, 0
		for n := range cases {
			c := randomCase(r, n)
			l, m := compareKeyrings(t, h, c, diffImages, fmt.Sprintf("case %d", n))
			lookups, matched = lookups+l, matched+m
			if t.Failed() {
				break
			}
		}
		t.Logf("%d cases, %d look-ups, %d with credentials", cases, lookups, matched)
		assert.Greater(t, matched, lookups/8, "the generator must make keys match often")
	})

	t.Run("matchImages", func(t *testing.T) {
		r := rand.New(rand.NewPCG(4412, 2133))
		compared, matches := 0, 0
		for range 20000 {
			image := diffImages[r.IntN(len(diffImages))]
			glob := randomKey(r)
			if r.IntN(2) == 0 {
				glob = derivedKey(r, image)
			}
			name, _, _, err := parsers.ParseImageName(image)
			if err != nil {
				continue
			}
			want, _ := kcp.URLsMatchStr(glob, name)
			assert.Equal(t, want, keyring.MatchImage(glob, image), "matchImages %q, image %q", glob, image)
			compared++
			if want {
				matches++
			}
		}
		t.Logf("%d globs compared, %d matches", compared, matches)
		assert.Greater(t, matches, compared/10, "the generator must make globs match often")
	})

	// The cases the issue names, and the Docker Hub fallback, written out.
	named := []struct {
		name string
		c    keyringCase
	}{
		{name: "node key registry-1.docker.io holding a tenant's account", c: keyringCase{
			secrets: [][]diffEntry{{{key: "docker.io", user: "tenant-a", pass: "pw"}}},
			node:    []diffEntry{{key: "registry-1.docker.io", user: "tenant-a", pass: "pw"}},
		}},
		{name: "node key of another case", c: keyringCase{node: []diffEntry{{key: "Node.Example:5000", user: "n", pass: "pw"}}}},
		{name: "Docker Hub fallback across secrets, none when a key matched", c: keyringCase{
			secrets: [][]diffEntry{
				{{key: "docker.io/team", user: "team", pass: "pw"}, {key: "https://index.docker.io/v1/", user: "hub-1", pass: "pw"}},
				{{key: "index.docker.io", user: "hub-2", pass: "pw"}, {key: "index.docker.io/v1/", user: "hub-3", pass: "pw"}},
			},
			node:    []diffEntry{{key: "https://index.docker.io/v1/", user: "hub-node", pass: "pw"}, {key: "docker.io", user: "", pass: ""}},
			plugins: [][]diffEntry{{{key: "index.docker.io", user: "hub-plugin", pass: "pw"}}, {{key: "*.io", user: "io", pass: "pw"}}},
		}},
		{name: "string prefixes, trailing slashes, API versions", c: keyringCase{
			secrets: [][]diffEntry{{{key: "reg.example/team", user: "team", pass: "pw"}, {key: "reg.example/team/", user: "team-slash", pass: "pw"}, {key: "https://reg.example/v2/team", user: "v2", pass: "pw"}}},
			node:    []diffEntry{{key: "http://reg.example/v1/", user: "v1", pass: "pw"}, {key: "reg.example/", user: "slash", pass: "pw"}},
		}},
	}
	for _, tt := range named {
		t.Run(tt.name, func(t *testing.T) {
			compareKeyrings(t, h, tt.c, append(slices.Clone(diffImages), "node.example:5000/app", "Node.Example:5000/app"), tt.name)
		})
	}
}

// quietKubeletLog drops the kubelet's keyring log (an error line for
// every key it skips) for the test.
func quietKubeletLog(t testing.TB) {
	klog.SetLogger(logr.Discard())
	t.Cleanup(klog.ClearLogger)
}

// FuzzKubeletKeyring compares the two keyrings on fuzzed keys and a fuzzed
// image: keys, one a line, are dealt to two secrets, the node and two
// plugin answers in turn.
func FuzzKubeletKeyring(f *testing.F) {
	f.Add("registry-1.docker.io\ndocker.io\nhttps://index.docker.io/v1/", "docker.io/tenant-a/app")
	f.Add("reg.example/team\nreg.example/team/\nhttps://reg.example/v2/team\n*.example", "reg.example/teammate/app:v1")
	f.Add("Node.Example:5000\nnode.example:5000/app", "node.example:5000/app")
	f.Add("[::1]:5000\n[::1]\nlocalhost\nindex.docker.io", "localhost/app")
	f.Add("r?g.example\nreg[a-c].example\nre\\g.example\n*", "regb.example/x")
	h, err := credential.NewHasher(bytes.Repeat([]byte{3}, credential.KeySize))
	require.NoError(f, err)
	quietKubeletLog(f)
	f.Fuzz(func(t *testing.T, keys, image string) {
		var c keyringCase
		c.secrets = make([][]diffEntry, 2)
		c.plugins = make([][]diffEntry, 2)
		seen := map[int]map[string]bool{}
		for i, k := range strings.SplitN(keys, "\n", 12) {
			slot := i % 5
			if seen[slot] == nil {
				seen[slot] = map[string]bool{}
			}
			if seen[slot][k] || !utf8.ValidString(k) { // a JSON key holds valid UTF-8 only

				continue
			}
			seen[slot][k] = true
			e := diffEntry{key: k, user: fmt.Sprintf("u%d", i), pass: "pw"}
			switch slot {
			case 0, 1:
				c.secrets[slot] = append(c.secrets[slot], e)
			case 2:
				c.node = append(c.node, e)
			default:
				c.plugins[slot-3] = append(c.plugins[slot-3], e)
			}
			if name, _, _, err := parsers.ParseImageName(image); err == nil {
				want, _ := kcp.URLsMatchStr(k, name)
				if got := keyring.MatchImage(k, image); got != want {
					t.Fatalf("matchImages %q, image %q: kubelet %v, pullguard %v", k, image, want, got)
				}
			}
		}
		compareKeyrings(t, h, c, []string{image}, "fuzz")
	})
}

// FuzzKubeletDockerConfig compares pullguard's docker config parsers with
// the kubelet's decoding (encoding/json into DockerConfigJSON, or into
// DockerConfig for .dockercfg): the same verdict, and the same entries
// (key, username, password).
func FuzzKubeletDockerConfig(f *testing.F) {
	for _, seed := range []string{
		`{"auths":{"r.example":{"auth":"dTpw"},"s.example":{"username":"u","password":"p"}}}`,
		`null`, `{"auths":null}`, `{"auths":{"a":{}},"auths":null,"AUTHS":{"b":null}}`,
		`{"auths":{"a":{"identitytoken":5}},"HttpHeaders":{"x":"y"}}`, `{"HttpHeaders":5}`,
		`{"auths":{"a":{"email":5}}}`, `{"auths":{"a":{"auth":"!!"}}}`, `{"r.example":{"username":"u"}}`, `[]`,
		`{"auths":{"a":{"username":"x"},"a":{"password":"y"}}}`, `{"authſ":{"a":{}}}`,
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, legacy bool) {
		var want kcp.DockerConfig
		var kerr error
		parse := keyring.ParseDockerConfigJSON
		if legacy {
			parse = keyring.ParseDockercfg
			kerr = json.Unmarshal(data, &want)
		} else {
			var cfg kcp.DockerConfigJSON
			kerr = json.Unmarshal(data, &cfg)
			want = cfg.Auths
		}
		got, perr := parse(data)
		if (kerr == nil) != (perr == nil) {
			t.Fatalf("config %q: the kubelet's error: %v, pullguard's: %v", data, kerr, perr)
		}
		if kerr != nil {
			return
		}
		gotMap := map[string][2]string{}
		for _, e := range got {
			gotMap[e.Key] = [2]string{e.Auth.Username, e.Auth.Password}
		}
		wantMap := map[string][2]string{}
		for k, e := range want {
			wantMap[k] = [2]string{e.Username, e.Password}
		}
		if len(got) != len(gotMap) {
			t.Fatalf("config %q: pullguard returned a key twice", data)
		}
		assert.Equal(t, wantMap, gotMap, "config %q", data)
	})
}
