package e2e

import (
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/fakeapiserver"
)

// secureBenchArgs is what the daemon benchmarks add to serve's flags:
// with PULLGUARD_BENCH_SECURE=1, serve's secure endpoint on 127.0.0.1,
// its clients authenticated and authorized by a fake API server the
// benchmark starts; none when unset, as in CI. docs/benchmarks.md ("The
// secure endpoint and the hop") compares the two.
func secureBenchArgs(b *testing.B) []string {
	if os.Getenv("PULLGUARD_BENCH_SECURE") != "1" {
		return nil
	}
	api := fakeapiserver.Start(b)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(b, l.Close())
	return []string{"--secure-port", strconv.Itoa(port), "--bind-address", "127.0.0.1",
		"--authentication-kubeconfig", api.Kubeconfig, "--authorization-kubeconfig", api.Kubeconfig}
}

// awaitSecure waits, when args turned it on, until serve's secure
// endpoint is up.
func awaitSecure(b *testing.B, d *serveDaemon, args []string) {
	if len(args) == 0 {
		return
	}
	require.True(b, d.log.waitFor(0, "Serving /metrics and /healthz securely", 60*time.Second), "the secure endpoint did not start:\n%s", d.log.all())
}
