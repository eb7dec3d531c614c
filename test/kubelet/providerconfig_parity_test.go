package kubelet

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/credentialprovider/plugin"
	"k8s.io/kubernetes/pkg/features"

	"github.com/pullguard/pullguard/featuregates"
	cp "github.com/pullguard/pullguard/pkg/credentialprovider"
)

// A CredentialProviderConfig file read by pullguard (credentialprovider.Load)
// against the kubelet's start-up (RegisterCredentialProviderPlugins, which
// reads, strictly decodes, validates and registers), in process. Every
// provider named has an executable in the bin directory, so the kubelet's
// verdict is its decoding's and validation's. Names carry the case's
// number: the kubelet registers the providers of an accepted file for the
// life of the process and refuses a name twice; their matchImages are of
// .cfg.example, which no other test of the process looks up.
//
// The files vary what decoding decides (apiVersion, kind, YAML or JSON, an
// unknown, duplicated or miscased field at each level, values of the wrong
// type) and the kubelet's validation rules. Provider names and env names
// stay within what both accept or both refuse: pullguard refuses a name
// with a backslash, a tab or a control character, and an env name that is
// empty or holds '=' or NUL, which the kubelet's validation lets through.

// cfgNode is a configuration value: a raw scalar (JSON text, which YAML
// reads alike), a list or an object of members in order.
type cfgNode struct {
	scalar  string
	list    []cfgNode
	members []cfgMember
	isList  bool
}

type cfgMember struct {
	key string
	val cfgNode
}

func cfgScalar(s string) cfgNode { return cfgNode{scalar: s} }
func cfgString(s string) cfgNode { return cfgNode{scalar: fmt.Sprintf("%q", s)} }
func cfgList(items ...cfgNode) cfgNode {
	return cfgNode{list: items, isList: true}
}
func cfgObject(members ...cfgMember) cfgNode { return cfgNode{members: members} }

func (n cfgNode) json(b *strings.Builder) {
	switch {
	case n.isList:
		b.WriteByte('[')
		for i, it := range n.list {
			if i > 0 {
				b.WriteByte(',')
			}
			it.json(b)
		}
		b.WriteByte(']')
	case n.members != nil:
		b.WriteByte('{')
		for i, m := range n.members {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(b, "%q:", m.key)
			m.val.json(b)
		}
		b.WriteByte('}')
	default:
		b.WriteString(n.scalar)
	}
}

// yaml writes n in block style at indent; scalars are JSON (YAML's
// double-quoted strings, numbers, booleans).
func (n cfgNode) yaml(b *strings.Builder, indent string) {
	switch {
	case n.isList && len(n.list) == 0:
		b.WriteString(" []\n")
	case n.isList:
		b.WriteByte('\n')
		for _, it := range n.list {
			b.WriteString(indent + "-")
			if it.members != nil && len(it.members) > 0 {
				// The first member on the dash's line.
				b.WriteByte(' ')
				it.yamlMembers(b, indent+"  ", true)
				continue
			}
			it.yaml(b, indent+"  ")
		}
	case n.members != nil && len(n.members) == 0:
		b.WriteString(" {}\n")
	case n.members != nil:
		b.WriteByte('\n')
		n.yamlMembers(b, indent, false)
	default:
		b.WriteString(" " + n.scalar + "\n")
	}
}

func (n cfgNode) yamlMembers(b *strings.Builder, indent string, firstInline bool) {
	for i, m := range n.members {
		if i > 0 || !firstInline {
			b.WriteString(indent)
		}
		b.WriteString(m.key + ":")
		m.val.yaml(b, indent+"  ")
	}
}

var (
	cfgMatchImages = []string{
		"*.cfg.example", "reg.cfg.example", "reg.cfg.example:5000/team", "*.*.cfg.example", "reg.cfg.example/team/*",
		"https://reg.cfg.example", "reg.cfg.example:http", "", "reg.cfg.example:99999", "[::1]:5000", "reg cfg.example",
	}
	cfgDurations    = []string{`"1m"`, `"1m"`, `"0s"`, `"12h"`, `"-1m"`, `"1x"`, `"10"`, `60`, `""`, `null`}
	cfgAPIVersions  = []string{"credentialprovider.kubelet.k8s.io/v1", "credentialprovider.kubelet.k8s.io/v1beta1", "credentialprovider.kubelet.k8s.io/v1alpha1"}
	cfgAnnotations  = []string{"example.com/role", "example.com/tier", "role", "Example.com/Role", "example.com/", "-bad", "a/b/c", ""}
	cfgFileVersions = []string{"kubelet.config.k8s.io/v1", "kubelet.config.k8s.io/v1beta1", "kubelet.config.k8s.io/v1alpha1"}
)

// randomProviderConfig draws a configuration file of case n, and the
// provider names it holds.
func randomProviderConfig(r *rand.Rand, n int) (data []byte, names []string) {
	fileVersion := pick(r, cfgFileVersions...)
	if r.IntN(20) == 0 {
		fileVersion = pick(r, "kubelet.config.k8s.io/v2", "kubelet.config.k8s.io", "credentialprovider.kubelet.k8s.io/v1")
	}
	var providers []cfgNode
	for i := range 1 + r.IntN(2) {
		name := fmt.Sprintf("c%d-%d", n, i)
		switch r.IntN(25) {
		case 0:
			name = pick(r, "a/b", "a b", ".", "..", "", " c")
		case 1:
			if len(names) > 0 {
				name = names[0]
			}
		}
		names = append(names, name)
		apiVersion := pick(r, cfgAPIVersions...)
		if r.IntN(20) == 0 {
			apiVersion = pick(r, "", "credentialprovider.kubelet.k8s.io/v2", "v1", "Credentialprovider.kubelet.k8s.io/v1")
		}
		var match []cfgNode
		for range 1 + r.IntN(2) {
			m := cfgMatchImages[r.IntN(3)]
			if r.IntN(6) == 0 {
				m = pick(r, cfgMatchImages...)
			}
			match = append(match, cfgString(m))
		}
		p := []cfgMember{{"name", cfgString(name)}}
		if r.IntN(25) > 0 {
			p = append(p, cfgMember{"matchImages", cfgList(match...)})
		}
		if r.IntN(25) > 0 {
			d := cfgDurations[0]
			if r.IntN(5) == 0 {
				d = pick(r, cfgDurations...)
			}
			p = append(p, cfgMember{"defaultCacheDuration", cfgScalar(d)})
		}
		if r.IntN(25) > 0 {
			p = append(p, cfgMember{"apiVersion", cfgString(apiVersion)})
		}
		if r.IntN(4) == 0 {
			p = append(p, cfgMember{"args", cfgList(cfgString("get-credentials"), cfgString("--x=1"))})
		}
		if r.IntN(4) == 0 {
			env := cfgObject(cfgMember{"name", cfgString("AWS_PROFILE")}, cfgMember{"value", cfgString("example_profile")})
			if r.IntN(4) == 0 {
				env = cfgObject(cfgMember{"name", cfgString("A")})
			}
			p = append(p, cfgMember{"env", cfgList(env)})
		}
		if r.IntN(4) == 0 {
			p = append(p, cfgMember{"tokenAttributes", randomTokenAttributes(r)})
		}
		providers = append(providers, cfgObject(p...))
	}
	doc := []cfgMember{{"apiVersion", cfgString(fileVersion)}, {"kind", cfgString("CredentialProviderConfig")}}
	if r.IntN(25) == 0 {
		doc[1].val = cfgString(pick(r, "KubeletConfiguration", "credentialproviderconfig", "CredentialProviderResponse"))
	}
	if r.IntN(30) > 0 {
		doc = append(doc, cfgMember{"providers", cfgList(providers...)})
	}
	root := cfgObject(doc...)
	mutateConfig(r, &root)
	var b strings.Builder
	if r.IntN(2) == 0 {
		root.json(&b)
	} else {
		root.yamlMembers(&b, "", false)
	}
	return []byte(b.String()), names
}

func randomTokenAttributes(r *rand.Rand) cfgNode {
	var ms []cfgMember
	if r.IntN(10) > 0 {
		ms = append(ms, cfgMember{"serviceAccountTokenAudience", cfgString(pick(r, "registry.example", "registry.example", ""))})
	}
	if r.IntN(10) > 0 {
		ms = append(ms, cfgMember{"cacheType", cfgString(pick(r, "ServiceAccount", "Token", "ServiceAccount", "serviceaccount", ""))})
	}
	if r.IntN(10) > 0 {
		ms = append(ms, cfgMember{"requireServiceAccount", cfgScalar(pick(r, "true", "true", "false", `"true"`, "null"))})
	}
	keys := func() cfgNode {
		var ks []cfgNode
		for range r.IntN(3) {
			k := cfgAnnotations[r.IntN(2)]
			if r.IntN(4) == 0 {
				k = pick(r, cfgAnnotations...)
			}
			ks = append(ks, cfgString(k))
		}
		return cfgList(ks...)
	}
	if r.IntN(2) == 0 {
		ms = append(ms, cfgMember{"requiredServiceAccountAnnotationKeys", keys()})
	}
	if r.IntN(2) == 0 {
		ms = append(ms, cfgMember{"optionalServiceAccountAnnotationKeys", keys()})
	}
	return cfgObject(ms...)
}

// mutateConfig now and then adds an unknown field, repeats one or changes the
// case of one, at some level of the document.
func mutateConfig(r *rand.Rand, root *cfgNode) {
	if r.IntN(4) > 0 {
		return
	}
	// The objects of the document, the root first.
	objects := []*cfgNode{root}
	var walk func(n *cfgNode)
	walk = func(n *cfgNode) {
		for i := range n.members {
			v := &n.members[i].val
			if v.members != nil {
				objects = append(objects, v)
			}
			walk(v)
		}
		for i := range n.list {
			if n.list[i].members != nil {
				objects = append(objects, &n.list[i])
			}
			walk(&n.list[i])
		}
	}
	walk(root)
	o := objects[r.IntN(len(objects))]
	switch r.IntN(3) {
	case 0:
		o.members = append(o.members, cfgMember{pick(r, "future", "matchImage", "extra"), cfgScalar(pick(r, "1", `"x"`, "null", "{}"))})
	case 1:
		if len(o.members) > 0 {
			m := o.members[r.IntN(len(o.members))]
			o.members = append(o.members, m)
		}
	case 2:
		if len(o.members) > 0 {
			i := r.IntN(len(o.members))
			o.members[i].key = strings.ToUpper(o.members[i].key[:1]) + o.members[i].key[1:]
		}
	}
}

// kubeletConfigVerdict is the kubelet's start-up with the file: nil when
// it would run, with the providers registered.
func kubeletConfigVerdict(t *testing.T, dir, respond string, data []byte, names []string) error {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	for _, n := range names {
		if n == "" || n == "." || n == ".." || strings.Contains(n, "/") {
			continue
		}
		if err := os.Symlink(respond, filepath.Join(bin, n)); err != nil && !os.IsExist(err) {
			require.NoError(t, err)
		}
	}
	path := filepath.Join(dir, "config")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return plugin.RegisterCredentialProviderPlugins(path, bin, nil, nil)
}

// TestKubeletCredentialProviderConfigParity: pullguard accepts exactly the
// credential provider configuration files the kubelet v1.36 starts with.
func TestKubeletCredentialProviderConfigParity(t *testing.T) {
	require.True(t, utilfeature.DefaultFeatureGate.Enabled(features.KubeletServiceAccountTokenForCredentialProviders))
	gates := featuregates.Gates{ServiceAccountTokenForCredentialProviders: true}
	k := newKubeletPlugins(t) // builds the plugin executable, keeps the kubelet's log quiet
	respond := filepath.Join(k.dir, "respond")
	r := rand.New(rand.NewPCG(2133, 4412))
	const cases = 1500
	accepted := 0
	for n := range cases {
		data, names := randomProviderConfig(r, n)
		dir := filepath.Join(k.dir, fmt.Sprintf("cfg-%d", n))
		kerr := kubeletConfigVerdict(t, dir, respond, data, names)
		_, perr := cp.Load(filepath.Join(dir, "config"), gates)
		if (kerr == nil) != (perr == nil) {
			t.Errorf("case %d: the kubelet's error: %v\npullguard's: %v\nfile:\n%s", n, kerr, perr, data)
			if t.Failed() {
				break
			}
		}
		if kerr == nil {
			accepted++
		}
	}
	t.Logf("%d files, %d accepted", cases, accepted)
	assert.Greater(t, accepted, cases/5, "the generator must make valid files often")
	assert.Less(t, accepted, cases*4/5, "the generator must make invalid files often")

	// A directory of files: which entries are read. (A FIFO, which the
	// kubelet waits on for ever and pullguard refuses, is left out.)
	valid := func(name string) []byte {
		return []byte("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n- name: " + name +
			"\n  matchImages: [reg.cfg.example]\n  defaultCacheDuration: 1m\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n")
	}
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, dir, name string)
	}{
		{name: "a dot file", setup: func(t *testing.T, dir, name string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, ".a.yaml"), valid(name), 0o600))
		}},
		{name: "a directory named like a file", setup: func(t *testing.T, dir, name string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), valid(name), 0o600))
			require.NoError(t, os.Mkdir(filepath.Join(dir, "b.json"), 0o700))
		}},
		{name: "a link to a file", setup: func(t *testing.T, dir, name string) {
			target := filepath.Join(t.TempDir(), "x.yaml")
			require.NoError(t, os.WriteFile(target, valid(name), 0o600))
			require.NoError(t, os.Symlink(target, filepath.Join(dir, "a.yaml")))
		}},
		{name: "a link to a directory", setup: func(t *testing.T, dir, name string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), valid(name), 0o600))
			require.NoError(t, os.Symlink(t.TempDir(), filepath.Join(dir, "b.yml")))
		}},
		{name: "a dangling link", setup: func(t *testing.T, dir, name string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), valid(name), 0o600))
			require.NoError(t, os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "b.yaml")))
		}},
		{name: "a README and an editor's swap file", setup: func(t *testing.T, dir, name string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "a.yaml"), valid(name), 0o600))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "README"), []byte("not a config"), 0o600))
			require.NoError(t, os.WriteFile(filepath.Join(dir, ".a.yaml.swp"), []byte("not a config"), 0o600))
		}},
		{name: "only a directory", setup: func(t *testing.T, dir, name string) {
			require.NoError(t, os.Mkdir(filepath.Join(dir, "b.json"), 0o700))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			dir, bin := filepath.Join(base, "config"), filepath.Join(base, "bin")
			require.NoError(t, os.Mkdir(dir, 0o700))
			require.NoError(t, os.Mkdir(bin, 0o700))
			name := fmt.Sprintf("dir-%d", providerCount.Add(1))
			require.NoError(t, os.Symlink(respond, filepath.Join(bin, name)))
			tt.setup(t, dir, name)
			kerr := plugin.RegisterCredentialProviderPlugins(dir, bin, nil, nil)
			_, perr := cp.Load(dir, gates)
			assert.Equal(t, kerr == nil, perr == nil, "the kubelet's error: %v; pullguard's: %v", kerr, perr)
		})
	}
}
