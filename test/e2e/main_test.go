// Package e2e runs pullguard's multi-tenant scenarios against a real
// containerd (through CRI) and a real registry (the Debian
// docker-registry, with token auth from an issuer in this process that
// grants pull per repository), and checks outcomes, events and the
// registry's own access log.
//
// It needs root and the Debian packages containerd, runc and
// docker-registry; as root it installs them when missing. In CI (CI=true)
// a missing prerequisite fails the run; elsewhere the suite is skipped
// with a message saying how to run it (sudo make e2e).
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/pullguard/pullguard/internal/debpkg"
)

// h is the harness every scenario shares.
var h *harness

type harness struct {
	dir        string
	issuer     *issuer
	registry   *dockerRegistry
	containerd *containerd
	binary     string // the pullguard command
	plugin     string // the test credential provider plugin's directory
	skip       string // why the suite is skipped, if it is
}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	h = &harness{}
	if reason := prerequisites(); reason != "" {
		if os.Getenv("CI") == "true" {
			return 1, fmt.Errorf("cannot run in CI: %s", reason)
		}
		h.skip = reason + " (run the suite as root: sudo make e2e)"
		return m.Run(), nil
	}
	// Short paths: unix socket names are limited to 108 bytes.
	dir, err := os.MkdirTemp("/tmp", "pge2e-")
	if err != nil {
		return 1, err
	}
	h.dir = dir
	code := 1
	defer func() { h.teardown(code != 0) }()
	if err := h.setup(); err != nil {
		return 1, err
	}
	code = m.Run()
	return code, nil
}

// prerequisites installs what is missing when it can, and says why the
// suite cannot run when it cannot.
func prerequisites() string {
	if runtime.GOOS != "linux" {
		return "the e2e suite needs Linux"
	}
	missing := missingTools()
	if len(missing) == 0 {
		return ""
	}
	if os.Geteuid() != 0 {
		return fmt.Sprintf("not root, and %v are not installed", missing)
	}
	fmt.Fprintf(os.Stderr, "e2e: installing containerd runc docker-registry (missing: %v)\n", missing)
	if err := debpkg.Install("containerd", "runc", "docker-registry"); err != nil {
		return err.Error()
	}
	if missing := missingTools(); len(missing) > 0 {
		return fmt.Sprintf("%v still missing after apt-get install", missing)
	}
	return ""
}

func missingTools() []string {
	var missing []string
	for _, t := range []string{"containerd", "runc", "/usr/bin/docker-registry"} {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, filepath.Base(t))
		}
	}
	return missing
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

func (h *harness) setup() error {
	var err error
	if h.issuer, err = newIssuer(); err != nil {
		return fmt.Errorf("token issuer: %w", err)
	}
	h.issuer.setUser(adminUser, adminPassword)
	h.issuer.grant(adminUser, "*", "pull", "push", "*")
	regDir := filepath.Join(h.dir, "registry")
	if err := os.MkdirAll(regDir, 0o755); err != nil {
		return err
	}
	if h.registry, err = startDockerRegistry(regDir, h.issuer); err != nil {
		return fmt.Errorf("docker-registry: %w", err)
	}
	ctrDir := filepath.Join(h.dir, "ctr")
	if err := os.MkdirAll(ctrDir, 0o755); err != nil {
		return err
	}
	if h.containerd, err = startContainerd(ctrDir, nil); err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	h.binary = filepath.Join(h.dir, "pullguard")
	if out, err := exec.Command("go", "build", "-o", h.binary, "../../cmd/pullguard").CombinedOutput(); err != nil {
		return fmt.Errorf("go build pullguard: %v\n%s", err, out)
	}
	// One plugin program under two provider names (a provider's name is
	// its binary's name in the bin dir).
	h.plugin = filepath.Join(h.dir, "plugins")
	for _, name := range []string{"e2e-node-provider", "e2e-sa-provider"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(h.plugin, name), "./testdata/plugin").CombinedOutput(); err != nil {
			return fmt.Errorf("go build the test plugin: %v\n%s", err, out)
		}
	}
	return nil
}

func (h *harness) teardown(keep bool) {
	if h.containerd != nil {
		h.containerd.stop()
	}
	if h.registry != nil {
		h.registry.stop()
	}
	if h.issuer != nil {
		h.issuer.close()
	}
	// Keep the directory (logs, state) after a failure, or when asked.
	if keep || os.Getenv("PULLGUARD_E2E_KEEP") != "" {
		fmt.Fprintf(os.Stderr, "e2e: logs and state kept in %s\n", h.dir)
		return
	}
	_ = os.RemoveAll(h.dir)
}

// need skips the test when the suite cannot run here.
func need(t *testing.T) {
	t.Helper()
	if h.skip != "" {
		t.Skip("e2e: " + h.skip)
	}
}
