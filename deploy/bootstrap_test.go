package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/pullguard/pullguard/internal/debpkg"
	"github.com/pullguard/pullguard/pkg/nodeinstall"
)

// installSettings are the kubelet settings `pullguard install` writes
// (pkg/nodeinstall: deploy/kubelet/config-snippet.yaml but its
// containerRuntimeEndpoint, which stays the kubelet's own).
func installSettings(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("kubelet", "config-snippet.yaml"))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(data, &m))
	for _, k := range []string{"apiVersion", "kind", "containerRuntimeEndpoint"} {
		delete(m, k)
	}
	require.Equal(t, "unix:///run/pullguard/pullguard.sock", m["imageServiceEndpoint"])
	return m
}

// nodeConfig is nodeadm's NodeConfig (node.eks.aws/v1alpha1), the fields
// the recipe may use, as the EKS AL2023 documentation describes them.
// nodeadm's own Go module (github.com/awslabs/amazon-eks-ami/nodeadm) is
// served only as a pseudo-version of February 2024 that brings
// controller-runtime and the AWS SDK with it, so the recipe is decoded
// strictly into this mirror instead: a field it does not name fails.
type nodeConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Cluster struct {
			Name                 string `json:"name"`
			APIServerEndpoint    string `json:"apiServerEndpoint"`
			CertificateAuthority []byte `json:"certificateAuthority"`
			CIDR                 string `json:"cidr"`
		} `json:"cluster"`
		Kubelet struct {
			Config map[string]any `json:"config,omitempty"`
			Flags  []string       `json:"flags,omitempty"`
		} `json:"kubelet"`
		Containerd struct {
			Config string `json:"config,omitempty"`
		} `json:"containerd,omitempty"`
	} `json:"spec"`
}

// TestEKSUserData reads the EKS AL2023 user data as cloud-init and
// nodeadm do: a MIME multi-part message whose application/node.eks.aws
// part is a NodeConfig (its kubelet.config exactly install's settings)
// and whose text/x-shellscript part installs the checked package and runs
// `pullguard install`.
func TestEKSUserData(t *testing.T) {
	f, err := os.Open(filepath.Join("bootstrap", "eks", "user-data.mime"))
	require.NoError(t, err)
	defer f.Close()
	msg, err := mail.ReadMessage(f)
	require.NoError(t, err)
	assert.Equal(t, "1.0", msg.Header.Get("MIME-Version"))
	mediaType, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.Equal(t, "multipart/mixed", mediaType)
	r := multipart.NewReader(msg.Body, params["boundary"])
	parts := map[string][]byte{}
	var order []string
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		ct, _, err := mime.ParseMediaType(p.Header.Get("Content-Type"))
		require.NoError(t, err)
		data, err := io.ReadAll(p)
		require.NoError(t, err)
		require.NotContains(t, parts, ct)
		parts[ct] = data
		order = append(order, ct)
	}
	assert.Equal(t, []string{"application/node.eks.aws", "text/x-shellscript"}, order)

	doc, ok := strings.CutPrefix(string(parts["application/node.eks.aws"]), "---\n")
	require.True(t, ok, "the part opens with a YAML document marker, as AWS's examples")
	require.NotContains(t, doc, "\n---", "one NodeConfig")
	var nc nodeConfig
	require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &nc))
	assert.Equal(t, "node.eks.aws/v1alpha1", nc.APIVersion)
	assert.Equal(t, "NodeConfig", nc.Kind)
	assert.NotEmpty(t, nc.Spec.Cluster.Name)
	assert.True(t, strings.HasPrefix(nc.Spec.Cluster.APIServerEndpoint, "https://"))
	assert.NotEmpty(t, nc.Spec.Cluster.CertificateAuthority, "base64 in the file")
	assert.Equal(t, installSettings(t), nc.Spec.Kubelet.Config, "kubelet.config is what pullguard install writes")
	assert.Empty(t, nc.Spec.Kubelet.Flags)

	t.Run("pullguard install on the node nodeadm wrote", func(t *testing.T) { checkEKSInstall(t, nc.Spec.Kubelet.Config) })

	script := string(parts["text/x-shellscript"])
	assert.True(t, strings.HasPrefix(script, "#!/bin/bash\n"))
	assert.NotContains(t, script, "\r", "bash reads LF line ends")
	checkBootstrapScript(t, script, "dnf install -y", "pullguard install")
	checkShell(t, "bash", script)

	t.Run("fails closed", func(t *testing.T) {
		run := checkFailsClosed(t, "bash", script, "curl", "dnf", "pullguard install")
		// The kubelet is not running: nodeadm starts it after this script, and
		// a unit ordered after nodeadm's runs doctor, failing closed as well.
		require.Contains(t, run.log, "systemd-run ")
		var unit string
		for _, l := range strings.Split(run.log, "\n") {
			if strings.HasPrefix(l, "systemd-run ") {
				unit = l
			}
		}
		assert.Contains(t, unit, "--property=After=nodeadm-run.service")
		doctor := "pullguard doctor --wait 2m || { " + filepath.Join(run.dir, "host1") + "; exit 1; }"
		require.True(t, strings.HasSuffix(unit, " "+doctor), unit)
		for _, fail := range []string{"", "pullguard doctor"} {
			cmd := exec.Command("sh", "-c", doctor)
			cmd.Env = []string{"PATH=" + filepath.Join(run.dir, "bin") + ":/usr/bin:/bin", "FAKE_LOG=" + filepath.Join(run.dir, "doctor.log"), "FAKE_FAIL=" + fail}
			out, err := cmd.CombinedOutput()
			_, blockErr := os.Stat(filepath.Join(run.dir, "host0", "00-pullguard-bootstrap-failed.conf"))
			if fail == "" {
				assert.NoError(t, err, "%s", out)
				assert.ErrorIs(t, blockErr, os.ErrNotExist, "doctor passes: the kubelet runs")
			} else {
				assert.Error(t, err)
				assert.NoError(t, blockErr, "doctor fails: the kubelet is kept from starting")
			}
		}
	})
}

// checkEKSInstall plans `pullguard install` (pkg/nodeinstall) on an EKS
// AL2023 node (pkg/nodeinstall/testdata/eks: kubelet 1.33, config.json
// and config.json.d) whose nodeadm wrote the NodeConfig's kubelet.config
// into its drop-in, 40-nodeadm.conf: install refuses nothing (the image
// service is already serve's), leaves nodeadm's files as they are, and
// its own drop-in holds the same settings.
func checkEKSInstall(t *testing.T, kubeletConfig map[string]any) {
	root := t.TempDir()
	require.NoError(t, os.CopyFS(root, os.DirFS(filepath.Join("..", "pkg", "nodeinstall", "testdata", "eks"))))
	dropIn := filepath.Join(root, "etc/kubernetes/kubelet/config.json.d/40-nodeadm.conf")
	data, err := os.ReadFile(dropIn)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(data, &m))
	for k, v := range kubeletConfig {
		m[k] = v
	}
	data, err = json.MarshalIndent(m, "", "    ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(dropIn, data, 0o644))
	plan, err := nodeinstall.PlanInstall(nodeinstall.Options{Root: root, KubeletVersion: func(string) (string, error) { return "Kubernetes v1.33.4-eks-1234", nil }})
	require.NoError(t, err, "pullguard install after nodeadm")
	ours := 0
	for _, c := range plan.Changes {
		switch {
		case strings.HasPrefix(c.Path, "/etc/kubernetes/kubelet/config.json"), c.Path == "/etc/eks/kubelet/environment":
			if c.Path == "/etc/kubernetes/kubelet/config.json.d/99-pullguard.conf" {
				ours++
				var got map[string]any
				require.NoError(t, yaml.Unmarshal(c.Data, &got))
				delete(got, "apiVersion")
				delete(got, "kind")
				assert.Equal(t, kubeletConfig, got, "install's drop-in holds the NodeConfig's settings")
				continue
			}
			assert.Equal(t, nodeinstall.Unchanged, c.Action, "nodeadm's %s", c.Path)
		}
	}
	assert.Equal(t, 1, ours)
}

// checkBootstrapScript: the script stops at the first error, checks the
// package's SHA-256 before it installs it, and runs install after both.
func checkBootstrapScript(t *testing.T, script, installer, pullguard string) {
	t.Helper()
	assert.Regexp(t, `(?m)^\s*set -eu`, script)
	var code []string
	for _, line := range strings.Split(script, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			code = append(code, line)
		}
	}
	script = strings.Join(code, "\n")
	download := strings.Index(script, "curl -fsSL")
	check := strings.Index(script, "| sha256sum -c -")
	pkg := strings.Index(script, installer)
	run := strings.Index(script, pullguard)
	require.True(t, download >= 0 && check >= 0 && pkg >= 0 && run >= 0, "download, check, package install, %s:\n%s", pullguard, script)
	assert.Less(t, download, check)
	assert.Less(t, check, pkg, "the package is checked before it is installed")
	assert.Less(t, pkg, run)
}

// checkShell parses script with the shell (-n: read, not run) when it
// is installed.
func checkShell(t *testing.T, shell, script string) {
	t.Helper()
	path, err := exec.LookPath(shell)
	if err != nil {
		t.Logf("%s is not installed: the script is not parsed", shell)
		return
	}
	cmd := exec.Command(path, "-n")
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	assert.NoError(t, err, "%s -n: %s", shell, out)
}

// cloudConfig is the part of cloud-init's #cloud-config the recipe uses,
// decoded strictly.
type cloudConfig struct {
	Packages   []string `json:"packages"`
	WriteFiles []struct {
		Path        string `json:"path"`
		Owner       string `json:"owner"`
		Permissions string `json:"permissions"`
		Content     string `json:"content"`
	} `json:"write_files"`
	RunCmd [][]string `json:"runcmd"`
}

// TestCloudInit: the #cloud-config writes the bootstrap script and runs
// it; the script checks the package and runs `pullguard install
// --restart-kubelet`; Debian's cloud-init accepts the file (`cloud-init
// schema`; CI installs cloud-init, elsewhere the check is skipped when it
// is missing).
func TestCloudInit(t *testing.T) {
	path := filepath.Join("bootstrap", "cloud-init", "cloud-config.yaml")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(data, []byte("#cloud-config\n")), "cloud-init reads a file as cloud-config by its first line")
	var cc cloudConfig
	require.NoError(t, yaml.UnmarshalStrict(data, &cc))
	require.Len(t, cc.WriteFiles, 1)
	wf := cc.WriteFiles[0]
	assert.Equal(t, "0755", wf.Permissions)
	assert.Equal(t, "root:root", wf.Owner)
	assert.Equal(t, [][]string{{wf.Path}}, cc.RunCmd)
	assert.True(t, strings.HasPrefix(wf.Content, "#!/bin/sh\n"))
	checkBootstrapScript(t, wf.Content, "apt-get install -y", "pullguard install --restart-kubelet")
	checkShell(t, "sh", wf.Content)
	assert.Subset(t, cc.Packages, []string{"curl", "ca-certificates"})
	t.Run("fails closed", func(t *testing.T) {
		run := checkFailsClosed(t, "sh", wf.Content, "curl", "sha256sum", "apt-get", "pullguard install")
		assert.Contains(t, run.log, "pullguard install --restart-kubelet\n")
	})

	t.Run("cloud-init schema", func(t *testing.T) {
		tool := requireTool(t, "cloud-init", "cloud-init")
		out, err := exec.Command(tool, "schema", "--config-file", path).CombinedOutput()
		require.NoError(t, err, "cloud-init schema --config-file %s: %s", path, out)
		assert.Contains(t, string(out), "Valid cloud-config")

		bad := filepath.Join(t.TempDir(), "bad.yaml")
		require.NoError(t, os.WriteFile(bad, bytes.Replace(data, []byte("runcmd:\n"), []byte("runcmd: 5\nx:\n"), 1), 0o644))
		out, err = exec.Command(tool, "schema", "--config-file", bad).CombinedOutput()
		assert.Error(t, err, "cloud-init schema finds a mistake: %s", out)
	})
}

// TestKubeadmRecipeScript: join.sh installs the checked package and
// starts serve's socket before the join, and runs install after it. (The
// JoinConfiguration and its patch are read with kubeadm's own code in
// test/kubelet, TestKubeadmJoinRecipe.)
func TestKubeadmRecipeScript(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("bootstrap", "kubeadm", "join.sh"))
	require.NoError(t, err)
	script := string(data)
	checkBootstrapScript(t, script, "apt-get install -y", "pullguard install --restart-kubelet")
	socket := strings.Index(script, "systemctl enable --now pullguard.socket")
	join := strings.Index(script, "kubeadm join --config join.yaml")
	install := strings.Index(script, "pullguard install --restart-kubelet")
	require.True(t, socket >= 0 && join >= 0)
	assert.Less(t, socket, join, "serve's socket is there before the kubelet's first start")
	assert.Less(t, join, install, "install after kubeadm wrote the kubelet's files")
	checkShell(t, "sh", script)
	t.Run("fails closed", func(t *testing.T) {
		// join.sh runs from its directory: cd "$(dirname "$0")" is the copy's.
		run := checkFailsClosed(t, "sh", script, "curl", "kubeadm", "pullguard install")
		assert.Contains(t, run.log, "pullguard install --restart-kubelet\n")
	})
	fi, err := os.Stat(filepath.Join("bootstrap", "kubeadm", "join.sh"))
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&0o111, "join.sh is executable")
}

// requireTool skips the test when tool (from Debian's package pkg) is
// missing; with CI=true, as root, it installs the package first, and a
// tool still missing fails the test.
func requireTool(t *testing.T, tool, pkg string) string {
	t.Helper()
	if path, err := exec.LookPath(tool); err == nil {
		return path
	}
	if os.Getenv("CI") != "true" {
		t.Skipf("%s is not installed (Debian's %s package; with CI=true the test installs it)", tool, pkg)
	}
	require.Zero(t, os.Geteuid(), "CI=true: %s is missing, and only root can install %s", tool, pkg)
	require.NoError(t, debpkg.Install(pkg))
	path, err := exec.LookPath(tool)
	require.NoError(t, err, "%s still missing after apt-get install %s", tool, pkg)
	return path
}

// recipeRun is one run of a bootstrap script on a fake host: every
// command that would change the host (curl, sha256sum, apt-get, dnf,
// install, kubeadm, pullguard, systemctl, systemd-run) is a fake on $PATH
// that logs its arguments, and the script's host paths are rewritten
// into a temporary directory.
type recipeRun struct {
	err   error
	log   string // the fakes' calls, one a line
	block string // the drop-in that keeps the kubelet from starting, "" if none
	dir   string
}

// hostPaths are the paths the scripts write, rewritten for the run.
var hostPaths = []string{"/etc/systemd/system/kubelet.service.d", "/usr/local/sbin/pullguard-fail-closed", "/var/cache/pullguard"}

// runRecipe runs script with shell; fail names the fake that fails (its
// first argument too, as "pullguard install"), "" for none.
func runRecipe(t *testing.T, shell, script, fail string) recipeRun {
	t.Helper()
	sh, err := exec.LookPath(shell)
	if err != nil {
		t.Skipf("%s is not installed", shell)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.Mkdir(bin, 0o755))
	logFile := filepath.Join(dir, "calls.log")
	fake := "#!/bin/sh\n" +
		`name=$(basename "$0")` + "\n" +
		`echo "$name $*" >>"$FAKE_LOG"` + "\n" +
		`case "$name $1" in "$FAKE_FAIL"|"$FAKE_FAIL "*) exit 1;; esac` + "\n" +
		`case "$name" in curl) while [ $# -gt 0 ]; do if [ "$1" = -o ]; then : >"$2"; fi; shift; done;; sha256sum) cat >/dev/null;; systemctl) [ "$1" != is-active ];; esac` + "\n"
	for _, name := range []string{"curl", "sha256sum", "apt-get", "dnf", "install", "kubeadm", "pullguard", "systemctl", "systemd-run"} {
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), []byte(fake), 0o755))
	}
	for i, p := range hostPaths {
		script = strings.ReplaceAll(script, p, filepath.Join(dir, fmt.Sprintf("host%d", i)))
	}
	path := filepath.Join(dir, "recipe")
	require.NoError(t, os.WriteFile(path, []byte(script), 0o755))
	cmd := exec.Command(sh, path)
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "FAKE_LOG=" + logFile, "FAKE_FAIL=" + fail,
		"PULLGUARD_DEB_URL=https://example.invalid/pullguard.deb", "PULLGUARD_DEB_SHA256=" + strings.Repeat("0", 64)}
	out, runErr := cmd.CombinedOutput()
	t.Logf("%s:\n%s", shell, out)
	run := recipeRun{err: runErr, dir: dir}
	if data, err := os.ReadFile(logFile); err == nil {
		run.log = string(data)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "host0", "00-pullguard-bootstrap-failed.conf")); err == nil {
		run.block = string(data)
	}
	return run
}

// checkFailsClosed: the script run with each of fails failing exits
// non-zero, stops the kubelet and leaves the drop-in that keeps it from
// starting; run without a failure it leaves neither.
func checkFailsClosed(t *testing.T, shell, script string, fails ...string) recipeRun {
	t.Helper()
	for _, fail := range fails {
		t.Run(fail+" fails", func(t *testing.T) {
			run := runRecipe(t, shell, script, fail)
			assert.Error(t, run.err)
			assert.Contains(t, run.log, "systemctl stop kubelet\n")
			assert.Equal(t, "[Service]\nExecStartPre=/bin/echo pullguard bootstrap failed: remove this drop-in and run the bootstrap again\nExecStartPre=/bin/false\n", run.block)
		})
	}
	run := runRecipe(t, shell, script, "")
	require.NoError(t, run.err)
	assert.NotContains(t, run.log, "systemctl stop kubelet")
	assert.Empty(t, run.block)
	return run
}
