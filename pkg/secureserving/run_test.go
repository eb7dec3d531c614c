package secureserving_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pullguard/pullguard/internal/fakeapiserver"
	"github.com/pullguard/pullguard/pkg/secureserving"
)

// TestRunRetries: an endpoint that cannot come up (its port held by
// another listener, its certificate unreadable) is reported down with the
// cause and tried again on the clock's backoff (1 s, then 2 s), and comes
// up once the cause is gone; stopping Run while it waits ends it.
func TestRunRetries(t *testing.T) {
	cases := []struct {
		name string
		// block makes the endpoint fail; it returns what to check in the
		// error and the fix.
		block func(t *testing.T, port int, args *[]string) (wantErr string, fix func())
	}{
		{name: "port held by another listener", block: func(t *testing.T, port int, _ *[]string) (string, func()) {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			require.NoError(t, err)
			t.Cleanup(func() { _ = l.Close() })
			return "address already in use", func() { require.NoError(t, l.Close()) }
		}},
		{name: "certificate file unreadable", block: func(t *testing.T, _ int, args *[]string) (string, func()) {
			files := givenFiles(t)
			certFile := files[1]
			pem, err := os.ReadFile(certFile)
			require.NoError(t, err)
			require.NoError(t, os.Remove(certFile))
			*args = append(*args, files...)
			return certFile, func() { require.NoError(t, os.WriteFile(certFile, pem, 0o600)) }
		}},
		{name: "certificate directory not writable", block: func(t *testing.T, _ int, args *[]string) (string, func()) {
			dir := filepath.Join(t.TempDir(), "pki")
			require.NoError(t, os.WriteFile(dir, []byte("a file where the directory goes"), 0o600))
			*args = append(*args, "--cert-dir", dir)
			return dir, func() { require.NoError(t, os.Remove(dir)) }
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api := fakeapiserver.Start(t)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			port := l.Addr().(*net.TCPAddr).Port
			require.NoError(t, l.Close())
			args := []string{"--secure-port", strconv.Itoa(port), "--bind-address", "127.0.0.1", "--authentication-skip-lookup",
				"--authentication-kubeconfig", api.Kubeconfig, "--authorization-kubeconfig", api.Kubeconfig}
			wantErr, fix := c.block(t, port, &args)

			o := secureserving.NewOptions()
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			o.AddFlags(fs)
			require.NoError(t, fs.Parse(args))
			o.Complete(t.TempDir())
			require.NoError(t, o.Validate())
			assert.Equal(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), o.Address())

			clk := clocktesting.NewFakeClock(time.Now())
			reports := make(chan error, 10)
			mux := http.NewServeMux()
			mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok: protecting") })
			ctx, cancel := context.WithCancel(context.Background())
			done := o.Run(ctx, "node-1", mux, clk, klog.Background(), func(err error) { reports <- err })
			t.Cleanup(func() { cancel(); <-done })

			next := func() error {
				t.Helper()
				select {
				case err := <-reports:
					return err
				case <-time.After(30 * time.Second):
					require.FailNow(t, "no report within 30 s")
					return nil
				}
			}
			err = next()
			require.Error(t, err, "down at first")
			assert.Contains(t, err.Error(), wantErr)
			clk.Step(time.Second)
			err = next()
			require.Error(t, err, "still down after the first retry")
			assert.Contains(t, err.Error(), wantErr)

			fix()
			clk.Step(time.Second)
			assert.Empty(t, reports, "the second wait is 2 s")
			clk.Step(time.Second)
			require.NoError(t, next(), "up once the cause is gone")

			tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the endpoint's certificate is not what is tested
			t.Cleanup(tr.CloseIdleConnections)
			resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get("https://" + o.Address() + "/healthz")
			require.NoError(t, err)
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "ok: protecting", string(body))
		})
	}
}

// TestRunStopsWhileWaiting: a Run waiting to try again ends when its
// context does, and reports nothing more.
func TestRunStopsWhileWaiting(t *testing.T) {
	api := fakeapiserver.Start(t)
	squatter, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = squatter.Close() })
	o := secureserving.NewOptions()
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.AddFlags(fs)
	require.NoError(t, fs.Parse([]string{"--secure-port", strconv.Itoa(squatter.Addr().(*net.TCPAddr).Port), "--bind-address", "127.0.0.1",
		"--authentication-kubeconfig", api.Kubeconfig, "--authorization-kubeconfig", api.Kubeconfig}))
	o.Complete(t.TempDir())
	clk := clocktesting.NewFakeClock(time.Now())
	reports := make(chan error, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := o.Run(ctx, "node-1", http.NewServeMux(), clk, klog.Background(), func(err error) { reports <- err })
	require.Error(t, <-reports)
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "Run did not stop within 30 s of its context")
	}
	assert.Empty(t, reports)
	assert.False(t, clk.HasWaiters(), "the retry timer is stopped")
}
