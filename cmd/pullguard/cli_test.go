package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRegistry serves h on 127.0.0.1 until the test ends.
func fakeRegistry(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func podYAML(name, ns, image, policy string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s, namespace: %s}\nspec:\n  containers:\n  - {name: app, image: %q, imagePullPolicy: %s}\n---\n", name, ns, image, policy)
}

func TestRunEscapesControlCharactersInTables(t *testing.T) {
	// A registry whose error text tries to forge a row of the table and
	// colour the terminal.
	forged := "nope\nteam-x/forged  app  evil/app:v1  present  credential match\x1b[31m\u202e"
	host := fakeRegistry(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK)
			return
		}
		if r.Method == http.MethodHead {
			// Resolve the tag, so that the client fetches the manifest
			// with GET and reads the error's body.
			w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			w.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("ab", 32))
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": "DENIED", "message": forged}}})
	})
	dir := t.TempDir()
	path := filepath.Join(dir, "pods.yaml")
	require.NoError(t, os.WriteFile(path, []byte(podYAML("victim", "team-b", host+"/team-a/app:v1", "IfNotPresent")), 0o600))
	for _, format := range []string{"table", "wide"} {
		t.Run(format, func(t *testing.T) {
			res := pullguard(t, "run", "-f", path, "--root-dir", filepath.Join(dir, format), "-o", format)
			require.Equal(t, 0, res.code, res.stderr)
			for _, line := range strings.Split(res.stdout, "\n") {
				assert.False(t, strings.HasPrefix(line, "team-x/forged"), "a forged row: %q", line)
				assert.NotContains(t, line, "\x1b", "an escape sequence reached the terminal")
				assert.NotContains(t, line, "\u202e")
			}
			if format == "wide" {
				assert.Contains(t, res.stdout, `nope\nteam-x/forged`, "the text is kept, escaped")
				assert.Contains(t, res.stdout, `\x1b[31m\u202e`)
			}
		})
	}
	// JSON keeps the text as it came (JSON escapes it).
	res := pullguard(t, "run", "-f", path, "--root-dir", filepath.Join(dir, "json"), "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	doc := decodeRun(t, res.stdout)
	require.Len(t, doc.Results, 1)
	assert.Contains(t, doc.Results[0].Message, forged)
	assert.Equal(t, "refused", doc.Results[0].Registry)
}

func TestRunSaysRegistryUnreachable(t *testing.T) {
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	host := ln.Addr().String()
	require.NoError(t, ln.Close())

	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	// The image is present (pulled by tenant A), then the registry goes
	// away: tenant B must verify, and cannot.
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root)
	require.Equal(t, 0, res.code, res.stderr)
	w.reg.SetDown(true)
	path := filepath.Join(w.dir, "down.yaml")
	manifest := podYAML("late", "team-b", w.reg.Host()+"/team-a/app:v1", "IfNotPresent") + podYAML("nowhere", "team-b", host+"/team-a/app:v1", "IfNotPresent")
	require.NoError(t, os.WriteFile(path, []byte(manifest), 0o600))
	res = pullguard(t, "run", "-f", path, "--root-dir", root, "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	doc := decodeRun(t, res.stdout)
	require.Len(t, doc.Results, 2)
	for _, r := range doc.Results {
		assert.Equal(t, "ErrImagePull", r.Error, r.Pod)
		assert.Equal(t, "unreachable", r.Registry, "%s: %s", r.Pod, r.Message)
		assert.Contains(t, r.Why, "registry unreachable", r.Pod)
		assert.NotContains(t, r.Why, "refused", r.Pod)
	}
	res = pullguard(t, "run", "-f", path, "--root-dir", filepath.Join(w.dir, "state2"))
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "registry unreachable")
	assert.NotContains(t, res.stdout, "refused by the registry")
}

func TestRunReadsStdinAndDirectories(t *testing.T) {
	w := newWorld(t)
	tenants := w.manifest("tenants.yaml")
	data, err := os.ReadFile(tenants)
	require.NoError(t, err)

	res := pullguardIn(t, bytes.NewReader(data), "run", "-f", "-", "--root-dir", filepath.Join(w.dir, "stdin"), "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Len(t, decodeRun(t, res.stdout).Results, 6)

	// A directory: its *.yaml, *.yml and *.json files, in lexical order;
	// -R adds its subdirectories.
	dir := filepath.Join(w.dir, "manifests")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "more"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a-tenants.yaml"), data, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README.md"), []byte("not a manifest"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "more", "b.yml"), []byte(podYAML("extra", "team-a", w.reg.Host()+"/public/tool:1", "IfNotPresent")), 0o600))

	res = pullguard(t, "run", "-f", dir, "--root-dir", filepath.Join(w.dir, "dir"), "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Len(t, decodeRun(t, res.stdout).Results, 6, "without -R the subdirectory is not read")

	res = pullguard(t, "run", "-f", dir, "-R", "--root-dir", filepath.Join(w.dir, "dir-r"), "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	doc := decodeRun(t, res.stdout)
	require.Len(t, doc.Results, 7)
	assert.Equal(t, "team-a/extra", doc.Results[6].Pod)
}

func TestRunKeepsALastLineOf4096Bytes(t *testing.T) {
	w := newWorld(t)
	image := w.reg.Host() + "/public/tool:1"
	for _, n := range []int{4096, 8192} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			head := "apiVersion: v1\nkind: Pod\nmetadata: {name: never, namespace: team-b}\nspec:\n  containers:\n  - name: app\n    image: " + image + "\n"
			key, value := "    imagePullPolicy:", "Never"
			doc := head + key + strings.Repeat(" ", n-len(key)-len(value)) + value
			path := filepath.Join(w.dir, fmt.Sprintf("last-%d.yaml", n))
			require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
			w.reg.Reset()
			res := pullguard(t, "run", "-f", path, "--root-dir", filepath.Join(w.dir, fmt.Sprint(n)), "-o", "json")
			require.Equal(t, 0, res.code, res.stderr)
			out := decodeRun(t, res.stdout)
			require.Len(t, out.Results, 1)
			assert.Equal(t, "Never", out.Results[0].PullPolicy, "the last line was read")
			assert.Equal(t, "ErrImageNeverPull", out.Results[0].Error)
			assert.Empty(t, w.reg.Requests(), "a Never pod does not pull")
		})
	}
}

func TestRecordsOnARootWithoutStore(t *testing.T) {
	for _, root := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing")} {
		res := pullguard(t, "records", "--root-dir", root)
		assert.Equal(t, 1, res.code)
		assert.Contains(t, res.stderr, "no record store under "+root)
		assert.Empty(t, res.stdout)
	}
}

// signalChild starts a run whose first pull hangs at a registry, sends sig
// once the registry sees the pull, and returns the process's exit code and
// output.
func signalChild(t *testing.T, sig syscall.Signal) (code int, stdout, stderr string, root string) {
	t.Helper()
	arrived := make(chan struct{}, 16)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	host := fakeRegistry(t, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	dir := t.TempDir()
	root = filepath.Join(dir, "state")
	path := filepath.Join(dir, "pods.yaml")
	manifest := podYAML("slow", "team-a", host+"/team-a/app:v1", "IfNotPresent") + podYAML("next", "team-a", host+"/team-a/other:v1", "IfNotPresent")
	require.NoError(t, os.WriteFile(path, []byte(manifest), 0o600))

	cmd := exec.Command(binary, "run", "-f", path, "--root-dir", root, "-o", "json")
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+stateHome)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the pull never reached the registry")
	}
	require.NoError(t, cmd.Process.Signal(sig))
	err := cmd.Wait()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the run must exit non-zero: %v", err)
	return exit.ExitCode(), out.String(), errOut.String(), root
}

func TestRunStopsOnSignals(t *testing.T) {
	tests := []struct {
		sig      syscall.Signal
		name     string
		wantCode int
	}{
		{sig: syscall.SIGINT, name: "SIGINT", wantCode: 130},
		{sig: syscall.SIGTERM, name: "SIGTERM", wantCode: 143},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr, root := signalChild(t, tt.sig)
			assert.Equal(t, tt.wantCode, code, stderr)
			assert.Contains(t, stderr, "interrupted by "+tt.name)
			doc := decodeRun(t, stdout)
			assert.Equal(t, tt.name, doc.Interrupted)
			require.Len(t, doc.Results, 1, "the pod after the signal is not processed")
			assert.Equal(t, "team-a/slow", doc.Results[0].Pod)
			assert.Equal(t, "ErrImagePull", doc.Results[0].Error)

			// The intent of the pull in flight was resolved.
			res := pullguard(t, "records", "--root-dir", root, "-o", "json")
			require.Equal(t, 0, res.code, res.stderr)
			var recs struct {
				Status struct {
					Intents int  `json:"intents"`
					Healthy bool `json:"healthy"`
				} `json:"status"`
				PendingIntents []string `json:"pendingIntents"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &recs))
			assert.Zero(t, recs.Status.Intents)
			assert.Empty(t, recs.PendingIntents)
			assert.True(t, recs.Status.Healthy)
		})
	}
}

// TestRecordsListsAnInterruptedPullsIntent kills a run during a pull: the
// intent it leaves is listed by records with its image and when its pull
// started, in JSON and in the table.
func TestRecordsListsAnInterruptedPullsIntent(t *testing.T) {
	before := time.Now().Add(-time.Second)
	_, _, _, root := signalChild(t, syscall.SIGKILL)
	after := time.Now().Add(time.Second)

	res := pullguard(t, "records", "--root-dir", root, "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	var recs struct {
		Status struct {
			Intents int `json:"intents"`
		} `json:"status"`
		PendingIntents []string `json:"pendingIntents"`
		Intents        []struct {
			Image string     `json:"image"`
			Since *time.Time `json:"since"`
		} `json:"intents"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &recs))
	assert.Equal(t, 1, recs.Status.Intents)
	require.Len(t, recs.Intents, 1)
	assert.Equal(t, recs.PendingIntents, []string{recs.Intents[0].Image})
	assert.Contains(t, recs.Intents[0].Image, "/team-a/app:v1")
	require.NotNil(t, recs.Intents[0].Since, "the intent says when its pull started")
	assert.True(t, recs.Intents[0].Since.After(before) && recs.Intents[0].Since.Before(after), "since %s", recs.Intents[0].Since)

	table := pullguard(t, "records", "--root-dir", root)
	require.Equal(t, 0, table.code, table.stderr)
	assert.Contains(t, table.stdout, "PENDING PULL INTENTS")
	assert.Contains(t, table.stdout, recs.Intents[0].Since.UTC().Format(time.RFC3339))
}

func TestMetricsFileHasTheKubeletNames(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "metrics.prom")
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", filepath.Join(dir, "state"), "--metrics-file", file, "--dump-metrics")
	require.Equal(t, 0, res.code, res.stderr)
	data, err := os.ReadFile(file)
	require.NoError(t, err)

	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	require.NoError(t, err, "the file is Prometheus text format")
	value := func(name string, labels map[string]string) float64 {
		mf, ok := families[name]
		require.True(t, ok, "metric %s is missing", name)
		for _, m := range mf.GetMetric() {
			match := true
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					match = false
				}
			}
			if match {
				switch {
				case m.GetCounter() != nil:
					return m.GetCounter().GetValue()
				case m.GetGauge() != nil:
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("no %s%v", name, labels)
		return 0
	}
	// tenants.yaml: B's IfNotPresent and Never pods and C's pod must
	// authenticate, A's second pod matches a record.
	assert.Equal(t, 3.0, value("kubelet_imagemanager_image_mustpull_checks_total", map[string]string{"result": "mustAuthenticate"}))
	assert.Equal(t, 1.0, value("kubelet_imagemanager_image_mustpull_checks_total", map[string]string{"result": "credentialRecordFound"}))
	assert.Equal(t, 2.0, value("kubelet_imagemanager_ondisk_pulledrecords", nil))
	assert.Equal(t, 0.0, value("kubelet_imagemanager_ondisk_pullintents", nil))
	assert.Equal(t, 1.0, value("kubelet_image_manager_ensure_image_requests_total", map[string]string{"pull_policy": "never", "present_locally": "true", "pull_required": "false"}))
	assert.Equal(t, 1.0, value("pullguard_credtracker_checks_total", map[string]string{"action": "use", "reason": "credential_match"}))
	assert.Equal(t, 2.0, value("pullguard_credtracker_records", map[string]string{"location": "disk"}))
	assert.Contains(t, res.stderr, "# TYPE kubelet_imagemanager_image_mustpull_checks_total counter", "--dump-metrics prints them too")
}

func TestLogsCarryEveryDecisionAtV2(t *testing.T) {
	w := newWorld(t)
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", filepath.Join(w.dir, "state"), "--logging-format=json", "-v=2")
	require.Equal(t, 0, res.code, res.stderr)
	var decisions []map[string]any
	sc := bufio.NewScanner(strings.NewReader(res.stderr))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var entry map[string]any
		if json.Unmarshal(sc.Bytes(), &entry) != nil {
			continue
		}
		if entry["msg"] == "Decided" {
			decisions = append(decisions, entry)
		}
	}
	require.Len(t, decisions, 6, "one decision per container:\n%s", res.stderr)
	assert.Equal(t, "team-b/intruder-never", decisions[2]["pod"])
	assert.Equal(t, "no_matching_credentials", decisions[2]["reason"])
	assert.Equal(t, "never_pull", decisions[2]["action"])
	assert.Equal(t, "credential_match", decisions[3]["reason"])

	res = pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", filepath.Join(w.dir, "state2"), "-v=1")
	require.Equal(t, 0, res.code)
	assert.NotContains(t, res.stderr, "Decided", "below -v=2 decisions are not logged")
}

func TestVersion(t *testing.T) {
	res := pullguard(t, "--version")
	require.Equal(t, 0, res.code, res.stderr)
	assert.True(t, strings.HasPrefix(res.stdout, "pullguard v"), res.stdout)
	res = pullguard(t, "--version=raw")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "GoVersion:")
}

func TestStartupWarnsOnceAboutUnrecordedImages(t *testing.T) {
	w := newWorld(t)
	root := filepath.Join(w.dir, "state")
	// Images pulled with the protection off leave no record...
	res := pullguard(t, "run", "-f", w.manifest("tenants.yaml"), "--root-dir", root, "--feature-gates", "KubeletEnsureSecretPulledImages=false")
	require.Equal(t, 0, res.code, res.stderr)
	assert.NotContains(t, res.stderr, "WARNING")
	// ...so turning it on over them warns, once, with the remedy.
	res = pullguard(t, "run", "-f", w.manifest("restart.yaml"), "--root-dir", root)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Equal(t, 1, strings.Count(res.stderr, "WARNING:"), res.stderr)
	assert.Contains(t, res.stderr, "2 of the runtime's 2 images have no record")
	assert.Contains(t, res.stderr, "AlwaysVerify")
	// Under AlwaysVerify they are protected: no warning.
	res = pullguard(t, "run", "-f", w.manifest("restart.yaml"), "--root-dir", root, "--image-pull-credentials-verification-policy", "AlwaysVerify")
	require.Equal(t, 0, res.code, res.stderr)
	assert.NotContains(t, res.stderr, "WARNING")
}

func TestRegistryCommand(t *testing.T) {
	dir := t.TempDir()
	access := filepath.Join(dir, "access.yaml")
	require.NoError(t, os.WriteFile(access, []byte(`users:
- {name: alice, password: alice-cli-pw-3f8a9}
repositories:
- {name: team-a/*, readers: [alice]}
- {name: public/*, public: true}
`), 0o600))
	cmd := exec.Command(binary, "registry", "--access", access, "--addr", "127.0.0.1:0", "--image", "team-a/app:v1")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	var host string
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "Serving the registry on "); ok {
			host = strings.Fields(rest)[0]
			break
		}
	}
	if host == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the registry never served: %s", stderr.String())
	}

	manifest := `apiVersion: v1
kind: Secret
metadata: {name: regcred, namespace: team-a}
type: kubernetes.io/dockerconfigjson
stringData: {.dockerconfigjson: '{"auths":{"` + host + `":{"username":"alice","password":"alice-cli-pw-3f8a9"}}}'}
---
` + podYAML("app", "team-a", host+"/team-a/app:v1", "IfNotPresent") + podYAML("intruder", "team-b", host+"/team-a/app:v1", "IfNotPresent")
	manifest = strings.Replace(manifest, "spec:\n  containers:", "spec:\n  imagePullSecrets: [{name: regcred}]\n  containers:", 1)
	path := filepath.Join(dir, "pods.yaml")
	require.NoError(t, os.WriteFile(path, []byte(manifest), 0o600))
	res := pullguard(t, "run", "-f", path, "--root-dir", filepath.Join(dir, "state"), "-o", "json")
	require.Equal(t, 0, res.code, res.stderr)
	doc := decodeRun(t, res.stdout)
	require.Len(t, doc.Results, 2)
	assert.Equal(t, "", doc.Results[0].Error, doc.Results[0].Message)
	assert.Equal(t, "ErrImagePull", doc.Results[1].Error)
	assert.Equal(t, "refused", doc.Results[1].Registry)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	rest, _ := io.ReadAll(stdout)
	require.NoError(t, cmd.Wait(), "the registry stops cleanly on SIGTERM")
	assert.Contains(t, string(rest), "Stopped.")
	assert.NotContains(t, stderr.String()+string(rest), "alice-cli-pw-3f8a9")

	// A bad access file is an error naming it, without the password.
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("users:\n- {name: alice, pasword: alice-cli-pw-3f8a9}\nrepositories: [{name: '*', public: true}]\n"), 0o600))
	res = pullguard(t, "registry", "--access", bad)
	assert.Equal(t, 1, res.code)
	assert.Contains(t, res.stderr, "bad.yaml")
	assert.Contains(t, res.stderr, `unknown field "pasword"`)
}
