package main_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/registry"
)

var binary, stateHome string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pullguard-bin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "pullguard")
	// The default root directory of commands run without --root-dir.
	stateHome = filepath.Join(dir, "state")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("go build: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var passwords = map[string]string{"alice": "alice-cli-pw-3f8a9", "carol": "carol-cli-pw-b71c2"}

// world is a registry with tenants and an image, and manifests naming it.
type world struct {
	t      *testing.T
	reg    *registry.Registry
	pushed registry.Pushed
	dir    string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	reg, err := registry.New(registry.Config{
		Users: []registry.User{{Name: "alice", Password: passwords["alice"]}, {Name: "carol", Password: passwords["carol"]}},
		Repositories: []registry.Repository{
			{Name: "team-a/app", Readers: []string{"alice", "carol"}},
			{Name: "public/*", Public: true},
		},
	}, registry.WithBcryptCost(bcrypt.MinCost))
	require.NoError(t, err)
	t.Cleanup(func() { _ = reg.Close() })
	img, err := registry.Image(7, 2, 8192)
	require.NoError(t, err)
	pushed, err := reg.Push(context.Background(), "team-a/app", "v1", img)
	require.NoError(t, err)
	tool, err := registry.Image(8, 1, 1024)
	require.NoError(t, err)
	_, err = reg.Push(context.Background(), "public/tool", "1", tool)
	require.NoError(t, err)
	return &world{t: t, reg: reg, pushed: pushed, dir: t.TempDir()}
}

// manifest fills in a testdata manifest and returns its path.
func (w *world) manifest(name string) string {
	w.t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(w.t, err)
	s := strings.NewReplacer("{{REG}}", w.reg.Host(), "{{PW_alice}}", passwords["alice"], "{{PW_carol}}", passwords["carol"]).Replace(string(data))
	path := filepath.Join(w.dir, name)
	require.NoError(w.t, os.WriteFile(path, []byte(s), 0o600))
	return path
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// pullguard runs the binary; no password may appear in what it prints.
func pullguard(t *testing.T, args ...string) cliResult {
	t.Helper()
	return pullguardIn(t, nil, args...)
}

// pullguardIn runs the binary with stdin; no password may appear in what it
// prints.
func pullguardIn(t *testing.T, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	return pullguardEnv(t, nil, stdin, args...)
}

// pullguardEnv runs the binary with stdin and env added to the test's
// environment. Its output is not a terminal and COLUMNS is unset unless
// env sets it, so tables fit the default 120 columns.
func pullguardEnv(t *testing.T, env []string, stdin io.Reader, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(append(os.Environ(), "XDG_STATE_HOME="+stateHome, "COLUMNS="), env...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	for _, pw := range passwords {
		// In every form: plain, base64, JSON- and URL-escaped.
		require.Empty(t, leak.Scan(map[string]string{"stdout": stdout.String(), "stderr": stderr.String()}, pw), "a password was printed")
	}
	return cliResult{stdout.String(), stderr.String(), code}
}

type runJSON struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Results    []struct {
		Pod        string `json:"pod"`
		Container  string `json:"container"`
		Image      string `json:"image"`
		PullPolicy string `json:"pullPolicy"`
		ImageRef   string `json:"imageRef"`
		Pulled     bool   `json:"pulled"`
		Error      string `json:"error"`
		Message    string `json:"message"`
		Init       bool   `json:"init"`
		Decision   struct {
			Action string `json:"action"`
			Reason string `json:"reason"`
		} `json:"decision"`
		Registry string `json:"registry"`
		Why      string `json:"why"`
	} `json:"results"`
	Events []struct {
		Object    string    `json:"object"`
		FieldPath string    `json:"fieldPath"`
		Type      string    `json:"type"`
		Reason    string    `json:"reason"`
		Message   string    `json:"message"`
		Time      time.Time `json:"time"`
		Source    struct {
			Component string `json:"component"`
			Host      string `json:"host"`
		} `json:"source"`
	} `json:"events"`
	Interrupted string `json:"interrupted"`
}

func decodeRun(t *testing.T, out string) runJSON {
	t.Helper()
	var doc runJSON
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&doc), out)
	return doc
}

func TestRunJSONAndRestart(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	image := w.reg.Host() + "/team-a/app:v1"
	tool := w.reg.Host() + "/public/tool:1"

	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root, "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	doc := decodeRun(t, res.stdout)
	type row struct {
		pod, container, image, policy, ref string
		pulled                             bool
		err                                string
	}
	want := []row{
		{"team-a/app-1", "app", image, "IfNotPresent", w.pushed.ConfigDigest, true, ""},
		{"team-b/intruder", "app", image, "IfNotPresent", "", true, "ErrImagePull"},
		{"team-b/intruder-never", "app", image, "Never", "", false, "ErrImageNeverPull"},
		{"team-a/app-2", "app", image, "IfNotPresent", w.pushed.ConfigDigest, false, ""},
		{"team-c/app", "init", tool, "IfNotPresent", "", true, ""},
		{"team-c/app", "app", image, "IfNotPresent", w.pushed.ConfigDigest, true, ""},
	}
	require.Len(t, doc.Results, len(want))
	for i, wr := range want {
		got := doc.Results[i]
		assert.Equal(t, wr.pod, got.Pod, "result %d", i)
		assert.Equal(t, wr.container, got.Container, "result %d", i)
		assert.Equal(t, wr.image, got.Image, "result %d", i)
		assert.Equal(t, wr.policy, got.PullPolicy, "result %d", i)
		if wr.ref != "" {
			assert.Equal(t, wr.ref, got.ImageRef, "result %d", i)
		}
		assert.Equal(t, wr.pulled, got.Pulled, "result %d", i)
		assert.Equal(t, wr.err, got.Error, "result %d", i)
	}
	assert.Contains(t, doc.Results[1].Message, "401 Unauthorized")
	assert.Equal(t, `Container image "`+image+`" is not present with pull policy of Never`, doc.Results[2].Message)
	assert.Equal(t, `Container image "`+image+`" already present on machine and can be accessed by the pod`, doc.Results[3].Message)
	assert.True(t, strings.HasPrefix(doc.Results[4].ImageRef, "sha256:"))

	failed := 0
	for _, ev := range doc.Events {
		if ev.Object == "team-b/intruder" && ev.Type == "Warning" && ev.Reason == "Failed" {
			failed++
			assert.Contains(t, ev.Message, "401 Unauthorized")
		}
	}
	assert.Equal(t, 1, failed, "the refused verification is a Warning Failed event")

	// A restart: a new process over the same root directory.
	w.reg.Reset()
	res = pullguard(t, "run", "-f", w.manifest("restart.yaml"), "--root-dir", root, "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	doc = decodeRun(t, res.stdout)
	require.Len(t, doc.Results, 2)
	assert.Equal(t, "", doc.Results[0].Error)
	assert.False(t, doc.Results[0].Pulled)
	assert.Equal(t, "ErrImageNeverPull", doc.Results[1].Error)
	assert.Empty(t, w.reg.Requests(), "after the restart neither pod contacted the registry")

	// What the node remembers.
	res = pullguard(t, "records", "--root-dir", root, "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	var recs struct {
		Status struct {
			Records int `json:"records"`
		} `json:"status"`
		Records []struct {
			APIVersion   string `json:"apiVersion"`
			Kind         string `json:"kind"`
			ImageRef     string `json:"imageRef"`
			Repositories []struct {
				Name           string `json:"name"`
				NodeAccessible bool   `json:"nodeAccessible"`
				Secrets        []struct {
					Namespace, Name, UID, Hash string
				} `json:"secrets"`
			} `json:"repositories"`
		} `json:"records"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &recs), res.stdout)
	require.Len(t, recs.Records, 2)
	byRef := map[string]int{}
	for i, r := range recs.Records {
		byRef[r.ImageRef] = i
		assert.Equal(t, "credtracker.pullguard.io/v1", r.APIVersion)
		assert.Equal(t, "ImagePulledRecord", r.Kind)
	}
	app := recs.Records[byRef[w.pushed.ConfigDigest]]
	require.Len(t, app.Repositories, 1)
	assert.Equal(t, w.reg.Host()+"/team-a/app", app.Repositories[0].Name)
	var holders []string
	for _, s := range app.Repositories[0].Secrets {
		holders = append(holders, s.Namespace+"/"+s.Name)
		assert.Len(t, s.Hash, 12, "only a short hash prefix is shown")
	}
	assert.ElementsMatch(t, []string{"team-a/regcred", "team-c/regcred"}, holders)

	res = pullguard(t, "records", "--root-dir", root)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "secret team-a/regcred")
	// team-c's secret is for the whole registry, so it pulled the public
	// tool too, and is what the node remembers for it.
	assert.Contains(t, res.stdout, w.reg.Host()+"/public/tool  secret team-c/regcred")
}

func TestRunTableAndGateOff(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root, "--feature-gates", "KubeletEnsureSecretPulledImages=false")
	require.Equal(t, 0, res.code, res.stderr)
	lines := strings.Split(res.stdout, "\n")
	require.Greater(t, len(lines), 7)
	assert.Contains(t, lines[0], "POD")
	// The stock kubelet: tenant B's IfNotPresent and Never pods get the image.
	for _, l := range lines[1:7] {
		if strings.HasPrefix(l, "team-b/") {
			assert.Contains(t, l, "present", l)
			assert.Contains(t, l, "feature disabled", l)
		}
	}
	assert.NoDirExists(t, filepath.Join(root, "credtracker"), "no records are written with the gate off")
	assert.Contains(t, res.stdout, "EVENTS")
}

func TestRunWithKubeletConfig(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	// AlwaysVerify from the config file: even the pod whose secret pulled
	// the image is asked once more... unless its credential matches.
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root, "--config", "testdata/kubelet-config.yaml", "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	doc := decodeRun(t, res.stdout)
	assert.False(t, doc.Results[3].Pulled, "a matching credential is enough under AlwaysVerify")

	// The flag overrides the file; as in the kubelet, a verification
	// policy with the gate off is an error naming the file and the field.
	root2 := filepath.Join(w.dir, "state2")
	res = pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root2, "--config", "testdata/kubelet-config.yaml",
		"--feature-gates", "KubeletEnsureSecretPulledImages=false", "-o", "json")
	require.NotEqual(t, 0, res.code)
	assert.Contains(t, res.stderr, "testdata/kubelet-config.yaml")
	assert.Contains(t, res.stderr, "imagePullCredentialsVerificationPolicy must not be set")
	noPolicy := filepath.Join(w.dir, "kc-no-policy.yaml")
	require.NoError(t, os.WriteFile(noPolicy, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  KubeletEnsureSecretPulledImages: true\n"), 0o600))
	res = pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root2, "--config", noPolicy,
		"--feature-gates", "KubeletEnsureSecretPulledImages=false", "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	doc = decodeRun(t, res.stdout)
	assert.Equal(t, "", doc.Results[2].Error, "gate off by flag: the Never pod gets the image")
}

// dirDigest fingerprints every file under dir (names, modes and contents).
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h.Write([]byte(path + info.Mode().String()))
		if d.Type().IsRegular() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			h.Write(data)
		}
		return nil
	})
	require.NoError(t, err)
	return string(h.Sum(nil))
}

func TestRunBadInputChangesNoState(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root)
	require.Equal(t, 0, res.code, res.stderr)
	before := dirDigest(t, root)

	write := func(name, content string) string {
		p := filepath.Join(w.dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	good := w.manifest("restart.yaml")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{name: "unreadable file", args: []string{"-f", filepath.Join(w.dir, "missing.yaml")}, want: []string{"missing.yaml"}},
		{name: "invalid yaml", args: []string{"-f", write("bad.yaml", "kind: Pod\n  : [")}, want: []string{"bad.yaml", "document 1"}},
		{name: "unknown kind", args: []string{"-f", write("kind.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")}, want: []string{"kind.yaml", "ConfigMap"}},
		{name: "unknown field", args: []string{"-f", write("field.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: a, imagePullPolcy: Never}]}\n")}, want: []string{"field.yaml", "imagePullPolcy"}},
		{name: "invalid policy flag", args: []string{"-f", good, "--image-pull-credentials-verification-policy", "Sometimes"}, want: []string{"imagePullCredentialsVerificationPolicy", "Sometimes"}},
		{name: "invalid feature gate", args: []string{"-f", good, "--feature-gates", "NoSuchGate=true"}, want: []string{"NoSuchGate"}},
		{name: "invalid config policy", args: []string{"-f", good, "--config", write("kc.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimagePullCredentialsVerificationPolicy: Maybe\n")}, want: []string{"Maybe"}},
		{name: "config field of the wrong type", args: []string{"-f", good, "--config", write("kc2.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nregistryBurst: many\n")}, want: []string{"kc2.yaml", "registryBurst"}},
		{name: "invalid allowlist", args: []string{"-f", good, "--config", write("kc3.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nimagePullCredentialsVerificationPolicy: NeverVerifyAllowlistedImages\npreloadedImagesVerificationAllowlist: ['a/*/b']\n")}, want: []string{"preloadedImagesVerificationAllowlist[0]"}},
		{name: "parallel pulls with serialized pulls", args: []string{"-f", good, "--config", write("kc4.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nserializeImagePulls: true\nmaxParallelImagePulls: 3\n")}, want: []string{"kc4.yaml", "maxParallelImagePulls"}},
		{name: "invalid provider config", args: []string{"-f", good, "--image-credential-provider-config", write("cp.yaml", "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: [{name: '', matchImages: []}]\n"), "--image-credential-provider-bin-dir", w.dir}, want: []string{"cp.yaml", "providers[0]"}},
		{name: "provider bin dir missing", args: []string{"-f", good, "--image-credential-provider-config", write("cp2.yaml", "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: [{name: p, matchImages: [registry.example], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}]\n"), "--image-credential-provider-bin-dir", filepath.Join(w.dir, "no-such-dir")}, want: []string{"bin directory"}},
		{name: "provider plugin missing", args: []string{"-f", good, "--image-credential-provider-config", write("cp3.yaml", "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: [{name: absent-plugin, matchImages: [registry.example], defaultCacheDuration: 1m, apiVersion: credentialprovider.kubelet.k8s.io/v1}]\n"), "--image-credential-provider-bin-dir", w.dir}, want: []string{"absent-plugin"}},
		{name: "bad output", args: []string{"-f", good, "-o", "xml"}, want: []string{"--output"}},
		{name: "manifest over the size limit", args: []string{"-f", write("huge.yaml", "# "+strings.Repeat("x", 9<<20)+"\n")}, want: []string{"huge.yaml", "larger than the limit"}},
		{name: "config over the size limit", args: []string{"-f", good, "--config", write("huge-kc.yaml", "# "+strings.Repeat("x", 9<<20)+"\n")}, want: []string{"huge-kc.yaml", "larger than the limit"}},
		{name: "provider config over the size limit", args: []string{"-f", good, "--image-credential-provider-config", write("huge-cp.yaml", "# "+strings.Repeat("x", 9<<20)+"\n"), "--image-credential-provider-bin-dir", w.dir}, want: []string{"huge-cp.yaml", "larger than the limit"}},
		{name: "directory without manifests", args: []string{"-f", t.TempDir()}, want: []string{"no *.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := pullguard(t, append([]string{"run", "--root-dir", root}, tt.args...)...)
			assert.NotEqual(t, 0, res.code)
			for _, wnt := range tt.want {
				assert.Contains(t, res.stderr, wnt)
			}
			assert.Equal(t, before, dirDigest(t, root), "the state is unchanged")

			fresh := filepath.Join(t.TempDir(), "never-created")
			pullguard(t, append([]string{"run", "--root-dir", fresh}, tt.args...)...)
			assert.NoDirExists(t, fresh, "no state is created")
		})
	}
}

func TestDemo(t *testing.T) {
	root := filepath.Join(t.TempDir(), "demo")
	res := pullguard(t, "demo", "--root-dir", root)
	require.Equal(t, 0, res.code, res.stdout+res.stderr)
	assert.Contains(t, res.stdout, "Every outcome is as expected.")
	assert.Len(t, regexp.MustCompile(`(?m)^team-\S+ .*  yes$`).FindAllString(res.stdout, -1), 8, "each pod's row is as expected:\n%s", res.stdout)
	for _, step := range []string{"ErrImagePull", "ErrImageNeverPull", "credential match", "preloaded", "restart"} {
		assert.Contains(t, res.stdout, step)
	}
	res = pullguard(t, "records", "--root-dir", root)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "team-a/app")
}

func TestHelp(t *testing.T) {
	for _, cmd := range []string{"run", "records", "demo", "registry"} {
		res := pullguard(t, cmd, "--help")
		require.Equal(t, 0, res.code)
		assert.Contains(t, res.stdout, "Examples:")
	}
}
