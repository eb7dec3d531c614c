package credtracker_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/pullguard/pullguard/credtracker"
	"github.com/pullguard/pullguard/pkg/credential"
)

const (
	crashDirEnv   = "CREDTRACKER_CRASH_DIR"
	crashStartEnv = "CREDTRACKER_CRASH_START"
)

func crashImage(i int) string { return fmt.Sprintf("registry.example/tenant-%d/app:v1", i) }
func crashRef(i int) string   { return fmt.Sprintf("sha256:%064x", i+1) }

func crashSecret(h *credential.Hasher, i int) credential.Credential {
	auth := credential.AuthConfig{Username: fmt.Sprintf("user-%d", i), Password: fmt.Sprintf("pw-%d", i)}
	return credential.Credential{Registry: reg, Auth: auth, Source: credential.Source{Kind: credential.SourceSecret, Namespace: fmt.Sprintf("tenant-%d", i), Name: "regcred", UID: fmt.Sprintf("uid-%d", i)}, Hash: h.Hash(reg, auth)}
}

// crashInventory says every image whose pull was ever started is present:
// the worst case, where each pull landed just before the crash.
func crashInventory(upTo int) credtracker.ImageInventory {
	return credtracker.ImageInventoryFunc(func(context.Context) ([]credtracker.Image, error) {
		var imgs []credtracker.Image
		for i := 0; i < upTo; i++ {
			imgs = append(imgs, credtracker.Image{Ref: crashRef(i), Names: []string{crashImage(i)}})
		}
		return imgs, nil
	})
}

// TestCrashWriter is the child process of TestCrashSafety: it records
// pulls as fast as it can, printing its progress, until it is killed.
func TestCrashWriter(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("the child process of TestCrashSafety")
	}
	start, err := strconv.Atoi(os.Getenv(crashStartEnv))
	require.NoError(t, err)
	tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: dir}, crashInventory(start), credtracker.WithLogger(klog.Background().V(10)))
	require.NoError(t, err)
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()
	for i := start; ; i++ {
		require.NoError(t, tr.RecordPullIntent(crashImage(i)))
		// Only now may the runtime hold the image: a pull starts after its
		// intent is durable.
		fmt.Fprintf(out, "intent %d\n", i)
		out.Flush()
		// Every other image is pulled twice, the second time by a second
		// tenant: records are rewritten, not only created.
		require.NoError(t, tr.RecordImagePulled(crashImage(i), crashRef(i), crashSecret(tr.Hasher(), i)))
		if i%2 == 1 {
			require.NoError(t, tr.RecordPullIntent(crashImage(i)))
			require.NoError(t, tr.RecordImagePulled(crashImage(i), crashRef(i), crashSecret(tr.Hasher(), i+1000)))
		}
		fmt.Fprintf(out, "recorded %d\n", i)
		out.Flush()
	}
}

func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills child processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	started := 0 // images whose pull intent may have been written
	for round := range 12 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashStartEnv+"="+strconv.Itoa(started))
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		// Kill after a random number of progress lines: the child is
		// somewhere inside its next write, at an instant we do not choose.
		lines := bufio.NewScanner(stdout)
		killAfter := 1 + rng.IntN(40)
		for n := 0; lines.Scan(); n++ {
			if f := strings.Fields(lines.Text()); len(f) == 2 && f[0] == "intent" {
				i, _ := strconv.Atoi(f[1])
				started = max(started, i+1)
			}
			if n == killAfter {
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			}
		}
		_ = cmd.Wait()

		tr, err := credtracker.New(context.Background(), credtracker.Config{Dir: dir}, crashInventory(started), credtracker.WithLogger(klog.Background().V(10)))
		require.NoError(t, err, "round %d", round)
		st := tr.Status()
		assert.Zero(t, st.RecoveredAt, "round %d: the store survived the kill", round)
		assert.Zero(t, st.UnreadableRecords, "round %d: no torn record", round)
		assert.Zero(t, st.Intents, "round %d: leftover intents are resolved", round)
		for i := 0; i < started; i++ {
			for _, pp := range []corev1.PullPolicy{corev1.PullIfNotPresent, corev1.PullNever} {
				// A pod with no credential, or another tenant's, never
				// gets an image whose pull may have happened.
				for _, creds := range [][]credential.Credential{nil, {crashSecret(tr.Hasher(), i+1)}} {
					d := tr.Decide(credtracker.Request{Image: crashImage(i), ImageRef: crashRef(i), Names: []string{crashImage(i)}, PullPolicy: pp, Credentials: credsFunc(creds...)})
					require.NotEqual(t, credtracker.UseImage, d.Action, "round %d image %d: %s", round, i, d.Reason)
				}
			}
		}
		require.NoError(t, tr.Close())
	}
	assert.Greater(t, started, 12, "the writers made progress")
}
