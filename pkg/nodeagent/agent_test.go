package nodeagent_test

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/pullguard/pullguard/internal/durable/durabletest"
	"github.com/pullguard/pullguard/internal/leak"
	"github.com/pullguard/pullguard/pkg/nodeagent"
	"github.com/pullguard/pullguard/pkg/nodeinstall"
	"github.com/pullguard/pullguard/pkg/nodeinstall/nodeinstalltest"
)

const (
	token     = "eyJhbGciOiJSUzI1NiJ9.c2VydmUtdG9rZW4tc2VjcmV0LXZhbHVl.c2lnbmF0dXJl"
	apiServer = "https://10.0.0.1:6443"
	caPEM     = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
	nodeName  = "node-a"
	namespace = "pullguard-system"
)

// kubeletConf is a kubeadm kubelet.conf: its cluster, and the kubelet's
// client certificate.
var kubeletConf = `apiVersion: v1
kind: Config
clusters:
- name: kubernetes
  cluster:
    server: ` + apiServer + `
    certificate-authority-data: ` + base64.StdEncoding.EncodeToString([]byte(caPEM)) + `
contexts:
- name: system:node:node-a@kubernetes
  context: {cluster: kubernetes, user: system:node:node-a}
current-context: system:node:node-a@kubernetes
users:
- name: system:node:node-a
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem
    client-key: /var/lib/kubelet/pki/kubelet-client-current.pem
`

// world is one node and the cluster around its agent.
type world struct {
	root, pod  string
	binary     string
	systemd    *nodeinstalltest.Systemd
	client     *fake.Clientset
	clock      *testingclock.FakeClock
	doctorErr  error
	doctorRuns int
	// dialErr fails the connection to the host's systemd.
	dialErr error
	// onDoctor runs at each doctor check.
	onDoctor func()
	// pristine is the node before any agent ran.
	pristine map[string]string
	mu       sync.Mutex
	events   chan corev1.Event
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{
		root:    nodeinstalltest.Layout(t, "kubeadm"),
		pod:     t.TempDir(),
		systemd: &nodeinstalltest.Systemd{},
		client:  fake.NewClientset(),
		clock:   testingclock.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)),
		events:  make(chan corev1.Event, 100),
	}
	p := filepath.Join(w.root, "etc/kubernetes/kubelet.conf")
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(kubeletConf), 0o600))
	w.binary = filepath.Join(w.pod, "pullguard")
	w.setBinary(t, "pullguard v1\n")
	require.NoError(t, os.WriteFile(filepath.Join(w.pod, "token"), []byte(token+"\n"), 0o600))
	w.pristine = durabletest.Tree(t, w.root)
	w.client.PrependReactor("create", "events", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		w.events <- *a.(k8stesting.CreateAction).GetObject().(*corev1.Event)
		return false, nil, nil
	})
	return w
}

func (w *world) setBinary(t *testing.T, data string) {
	require.NoError(t, os.WriteFile(w.binary, []byte(data), 0o755))
}

func (w *world) agent() *nodeagent.Agent {
	cfg := nodeagent.Config{
		Root:           w.root,
		Binary:         &nodeinstall.Binary{Path: nodeagent.DefaultBinaryPath, Source: w.binary},
		ServeArgs:      []string{"--secure-port=10265"},
		ServeToken:     filepath.Join(w.pod, "token"),
		Timeout:        time.Minute,
		KubeletVersion: func(string) (string, error) { return "Kubernetes v1.33.4\n", nil },
	}
	return &nodeagent.Agent{
		Config: cfg,
		Systemd: func(context.Context, string) (nodeinstall.Systemd, func(), error) {
			if w.dialErr != nil {
				return nil, nil, w.dialErr
			}
			return w.systemd, func() {}, nil
		},
		Doctor: func(*nodeinstall.Plan) func(context.Context) error {
			return func(context.Context) error {
				w.mu.Lock()
				defer w.mu.Unlock()
				w.doctorRuns++
				if w.onDoctor != nil {
					w.onDoctor()
				}
				return w.doctorErr
			}
		},
		Lease: &nodeagent.Lease{Client: w.client.CoordinationV1(), Namespace: namespace, Name: nodeagent.DefaultLeaseName, Holder: nodeName, Duration: cfg.LeaseDuration(), Clock: w.clock},
		Report: &nodeagent.Reporter{
			StatusFile: filepath.Join(w.pod, "status.json"),
			Client:     w.client.CoreV1(),
			Pod:        nodeagent.PodRef{Namespace: namespace, Name: "pullguard-node-agent-x1", Node: nodeName, UID: "uid-1"},
			Clock:      w.clock,
			Secrets:    []string{token},
		},
		Clock: w.clock,
	}
}

// drive steps the fake clock whenever someone waits on it, until the
// test ends: the agent's polls and timeouts pass at once.
func (w *world) drive(t *testing.T) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() { close(done); <-stopped })
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			default:
			}
			if w.clock.HasWaiters() {
				w.clock.Step(time.Second)
			} else {
				runtime.Gosched()
			}
		}
	}()
}

func (w *world) drainEvents() []corev1.Event {
	var out []corev1.Event
	for {
		select {
		case e := <-w.events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (w *world) status(t *testing.T) nodeagent.Status {
	s, err := nodeagent.ReadStatus(filepath.Join(w.pod, "status.json"))
	require.NoError(t, err)
	return s
}

func (w *world) lease(t *testing.T) *coordinationv1.Lease {
	l, err := w.client.CoordinationV1().Leases(namespace).Get(context.Background(), nodeagent.DefaultLeaseName, metav1.GetOptions{})
	require.NoError(t, err)
	return l
}

// captureLogs sends klog's output to a buffer until the test ends.
func captureLogs(t *testing.T) func() string {
	var mu sync.Mutex
	var b strings.Builder
	klog.SetLogger(funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		b.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 10}))
	t.Cleanup(klog.ClearLogger)
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return b.String()
	}
}

// installed runs an earlier pod's agent on the node; newImage then gives
// the pod a new binary.
func installed(t *testing.T, w *world) {
	require.True(t, w.agent().Install(context.Background()).Ready)
	w.systemd.Reset()
}

func newImage(t *testing.T, w *world) {
	installed(t, w)
	w.setBinary(t, "pullguard v2\n")
}

// recordsFile stands for serve's records in its store.
const recordsFile = "var/lib/pullguard/credtracker/records.db"

func writeRecords(t *testing.T, w *world) {
	p := filepath.Join(w.root, recordsFile)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
	require.NoError(t, os.WriteFile(p, []byte("records"), 0o600))
}

// longAgo is before any file of a test was written.
var longAgo = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

const activate = "daemon-reload|enable [pullguard.service pullguard.socket]|start pullguard.socket|restart pullguard.service|restart kubelet.service"

func calls(sd *nodeinstalltest.Systemd) string { return strings.Join(sd.Calls(), "|") }

// TestInstall runs the agent on a node, as the pod would start, in the
// cases of a fleet.
func TestInstall(t *testing.T) {
	tests := []struct {
		name string
		// before prepares the node, and may run the agent once (an earlier
		// pod).
		before      func(t *testing.T, w *world)
		doctorErr   error
		wantReason  string
		wantReady   bool
		wantCalls   string
		wantMessage []string
		// untouched: the node's tree is the same after as before, byte for
		// byte; pristine: the same as before any agent ran, serve's store
		// (its records) aside.
		untouched, pristine bool
		// failSystemd is the systemd call that fails; stop stops the agent
		// (SIGTERM) at doctor's first check.
		failSystemd string
		stop        bool
		dialErr     error
		// started sets when units became active (the zero time: not
		// active), after before ran.
		started map[string]time.Time
		// serveAfter: serve runs on files no older than install's after
		// the agent (it was restarted when they changed).
		serveAfter bool
		// recordsKept: serve's records (writeRecords) are there after.
		recordsKept bool
	}{
		{
			name:        "fresh node: installed, the kubelet restarted once",
			wantReason:  nodeagent.ReasonInstalled,
			wantReady:   true,
			wantCalls:   activate,
			wantMessage: []string{"doctor passes"},
		},
		{
			name:       "pod restarted on an installed node: nothing written, nothing restarted",
			before:     installed,
			wantReason: nodeagent.ReasonUpToDate,
			wantReady:  true,
			wantCalls:  "",
			untouched:  true,
		},
		{
			name:       "new image: the binary replaced, serve restarted, not the kubelet",
			before:     newImage,
			wantReason: nodeagent.ReasonServeUpdated,
			wantReady:  true,
			wantCalls:  "daemon-reload|enable [pullguard.service pullguard.socket]|restart pullguard.service",
		},
		{
			name: "a kubelet configuration install refuses: the node untouched",
			before: func(t *testing.T, w *world) {
				f, err := os.OpenFile(filepath.Join(w.root, "var/lib/kubelet/config.yaml"), os.O_APPEND|os.O_WRONLY, 0)
				require.NoError(t, err)
				_, err = f.WriteString("imageServiceEndpoint: unix:///run/other/image.sock\n")
				require.NoError(t, err)
				require.NoError(t, f.Close())
			},
			wantReason:  nodeagent.ReasonRefused,
			wantCalls:   "",
			wantMessage: []string{"/var/lib/kubelet/config.yaml:57: the kubelet's image service is unix:///run/other/image.sock", "nothing was written"},
			untouched:   true,
		},
		{
			name:        "doctor fails: the node given back byte for byte",
			doctorErr:   errors.New("doctor: serve-answers: serve does not answer on unix:///run/pullguard/pullguard.sock"),
			wantReason:  nodeagent.ReasonRolledBack,
			wantCalls:   activate + "|disable [pullguard.service pullguard.socket]|daemon-reload|restart kubelet.service|stop pullguard.service|stop pullguard.socket",
			wantMessage: []string{"rolled back: the node is not ready: doctor: serve-answers: serve does not answer", "the node runs as before pullguard"},
			untouched:   true,
		},
		{
			name:        "doctor's words hold the token: redacted from the status, the event and the logs",
			doctorErr:   errors.New("doctor: serve-answers: the API server said: bad token " + token),
			wantReason:  nodeagent.ReasonRolledBack,
			wantCalls:   activate + "|disable [pullguard.service pullguard.socket]|daemon-reload|restart kubelet.service|stop pullguard.service|stop pullguard.socket",
			wantMessage: []string{"bad token " + leak.Placeholder},
			untouched:   true,
		},
		{
			name:        "new image, doctor fails: given back as before pullguard, the records kept",
			before:      newImage,
			doctorErr:   errors.New("doctor: serve-protection: serve is a pass-through"),
			wantReason:  nodeagent.ReasonRolledBack,
			wantCalls:   "daemon-reload|enable [pullguard.service pullguard.socket]|restart pullguard.service|disable [pullguard.service pullguard.socket]|daemon-reload|restart kubelet.service|stop pullguard.service|stop pullguard.socket",
			wantMessage: []string{"serve is a pass-through"},
			pristine:    true,
		},
		{
			name:        "serve does not (re)start: the kubelet is not restarted at all, the node given back",
			failSystemd: "restart pullguard.service",
			wantReason:  nodeagent.ReasonRolledBack,
			wantCalls:   "daemon-reload|enable [pullguard.service pullguard.socket]|start pullguard.socket|restart pullguard.service|disable [pullguard.service pullguard.socket]|daemon-reload|stop pullguard.service|stop pullguard.socket",
			wantMessage: []string{"restarting pullguard.service: job failed"},
			untouched:   true,
		},
		{
			name:        "the host's systemd unreachable: the files given back, nothing restarted",
			dialErr:     errors.New("connecting to systemd at /host/run/systemd/private: no such file or directory"),
			wantReason:  nodeagent.ReasonRolledBack,
			wantCalls:   "",
			wantMessage: []string{"rolled back: the host's systemd: connecting to systemd"},
			untouched:   true,
		},
		{
			name:        "new image, the host's systemd unreachable: nothing written, nothing restarted, not ready",
			before:      newImage,
			dialErr:     errors.New("connecting to systemd at /host/run/systemd/private: no such file or directory"),
			wantReason:  nodeagent.ReasonFailed,
			wantCalls:   "",
			wantMessage: []string{"the host's systemd: connecting to systemd"},
			untouched:   true,
		},
		{
			name: "new image and a kubelet file changed: the kubelet restarted and serve too (a running serve must read its new binary)",
			before: func(t *testing.T, w *world) {
				newImage(t, w)
				require.NoError(t, os.Remove(filepath.Join(w.root, "etc/kubernetes/kubelet.conf.d/99-pullguard.conf")))
			},
			wantReason:  nodeagent.ReasonInstalled,
			wantReady:   true,
			wantCalls:   activate,
			wantMessage: []string{"the kubelet restarted onto serve"},
			serveAfter:  true,
		},
		{
			name:        "installed, but the kubelet never restarted (an earlier agent stopped before it): restarted onto serve",
			before:      installed,
			started:     map[string]time.Time{nodeinstall.KubeletUnit: longAgo},
			wantReason:  nodeagent.ReasonInstalled,
			wantReady:   true,
			wantCalls:   activate,
			wantMessage: []string{"the kubelet ran on its settings from before install's files", "doctor passes"},
			untouched:   true,
		},
		{
			name:        "new image, and the kubelet never restarted onto serve: the kubelet restarted, not serve alone",
			before:      newImage,
			started:     map[string]time.Time{nodeinstall.KubeletUnit: longAgo},
			wantReason:  nodeagent.ReasonInstalled,
			wantReady:   true,
			wantCalls:   activate,
			wantMessage: []string{"the kubelet ran on its settings from before install's files"},
			serveAfter:  true,
		},
		{
			name:        "installed, serve runs on files older than install's: serve restarted, not the kubelet",
			before:      installed,
			started:     map[string]time.Time{nodeinstall.ServeUnit: longAgo},
			wantReason:  nodeagent.ReasonServeUpdated,
			wantReady:   true,
			wantCalls:   "daemon-reload|enable [pullguard.service pullguard.socket]|restart pullguard.service",
			wantMessage: []string{"serve ran on files older than install's: serve restarted, the kubelet did not"},
			untouched:   true,
			serveAfter:  true,
		},
		{
			name:       "installed, serve not running (socket activation waits for a call): nothing restarted",
			before:     installed,
			started:    map[string]time.Time{nodeinstall.ServeUnit: {}},
			wantReason: nodeagent.ReasonUpToDate,
			wantReady:  true,
			wantCalls:  "",
			untouched:  true,
		},
		{
			name:        "installed, systemd cannot say when the kubelet started: not ready, nothing restarted",
			before:      installed,
			failSystemd: "active-since kubelet.service",
			wantReason:  nodeagent.ReasonFailed,
			wantCalls:   "",
			wantMessage: []string{"when kubelet.service started: no such property"},
			untouched:   true,
		},
		{
			name: "installed node, a kubelet file changed, doctor fails: given back, serve's records kept",
			before: func(t *testing.T, w *world) {
				installed(t, w)
				writeRecords(t, w)
				require.NoError(t, os.Remove(filepath.Join(w.root, "etc/kubernetes/kubelet.conf.d/99-pullguard.conf")))
			},
			doctorErr:   errors.New("doctor: serve-answers: serve does not answer"),
			wantReason:  nodeagent.ReasonRolledBack,
			wantCalls:   activate + "|disable [pullguard.service pullguard.socket]|daemon-reload|restart kubelet.service|stop pullguard.service|stop pullguard.socket",
			wantMessage: []string{"serve does not answer"},
			pristine:    true,
			recordsKept: true,
		},
		{
			name: "installed node, a kubelet file changed, the host's systemd unreachable: new files kept, nothing restarted, not ready",
			before: func(t *testing.T, w *world) {
				installed(t, w)
				writeRecords(t, w)
				require.NoError(t, os.Remove(filepath.Join(w.root, "etc/kubernetes/kubelet.conf.d/99-pullguard.conf")))
			},
			dialErr:     errors.New("connecting to systemd at /host/run/systemd/private: no such file or directory"),
			wantReason:  nodeagent.ReasonFailed,
			wantCalls:   "",
			wantMessage: []string{"the new files are written, nothing was restarted"},
			recordsKept: true,
		},
		{
			name:       "stopped while doctor waits: no give-back, the node left as it is",
			doctorErr:  errors.New("doctor: serve-answers: not yet"),
			stop:       true,
			wantReason: nodeagent.ReasonStarting,
			wantCalls:  activate,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := captureLogs(t)
			w := newWorld(t)
			w.drive(t)
			if tt.before != nil {
				tt.before(t, w)
			}
			for u, at := range tt.started {
				w.systemd.Active(u, at)
			}
			w.drainEvents()
			before := durabletest.Tree(t, w.root)
			w.doctorErr = tt.doctorErr
			w.systemd.Fail = tt.failSystemd
			w.dialErr = tt.dialErr
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.stop {
				w.onDoctor = cancel
			}

			a := w.agent()
			require.NoError(t, a.Start(ctx))
			assert.False(t, w.status(t).Ready, "not ready while at work")
			s := a.Install(ctx)

			assert.Equal(t, tt.wantReason, s.Reason, s.Message)
			assert.Equal(t, tt.wantReady, s.Ready)
			if tt.pristine {
				after := durabletest.Tree(t, w.root)
				for p := range after {
					if strings.HasPrefix(p, "var/lib/pullguard") {
						delete(after, p)
					}
				}
				assert.Equal(t, w.pristine, after, "the node as before pullguard, byte for byte, serve's records aside")
			}
			if tt.stop {
				assert.Equal(t, tt.wantCalls, calls(w.systemd))
				assert.Nil(t, w.lease(t).Spec.HolderIdentity, "a stopped agent releases the lease")
				assert.Empty(t, w.drainEvents(), "a stopped agent reports nothing more")
				assert.Equal(t, nodeagent.ReasonStarting, w.status(t).Reason)
				return
			}
			assert.Equal(t, s, w.status(t), "the status file says it")
			assert.Equal(t, tt.wantCalls, calls(w.systemd))
			for _, m := range tt.wantMessage {
				assert.Contains(t, s.Message, m)
			}
			if tt.untouched {
				assert.Equal(t, before, durabletest.Tree(t, w.root), "the node as it was, byte for byte")
			}
			if tt.recordsKept {
				assert.FileExists(t, filepath.Join(w.root, recordsFile), "serve's records kept")
			}
			events := w.drainEvents()
			require.NotEmpty(t, events)
			last := events[len(events)-1]
			assert.Equal(t, tt.wantReason, last.Reason)
			assert.Equal(t, s.Message, last.Message)
			assert.Equal(t, "pullguard-node-agent-x1", last.InvolvedObject.Name)
			assert.Equal(t, map[bool]string{true: corev1.EventTypeNormal, false: corev1.EventTypeWarning}[s.Ready], last.Type)
			if l, err := w.client.CoordinationV1().Leases(namespace).Get(context.Background(), nodeagent.DefaultLeaseName, metav1.GetOptions{}); err == nil {
				assert.Nil(t, l.Spec.HolderIdentity, "the lease is released")
			}

			require.Contains(t, logs(), s.Reason, "klog's output is captured")
			texts := map[string]string{"logs": logs(), "status": s.String()}
			for i, e := range events {
				texts["event "+e.Reason+string(rune('0'+i))] = e.Message
			}
			assert.Empty(t, leak.Scan(texts, token), "no token in a log, status or event")
			if tt.serveAfter {
				// The next pod finds nothing stale: serve and the kubelet
				// run on install's files.
				w.systemd.Reset()
				again := w.agent().Install(context.Background())
				assert.Equal(t, nodeagent.ReasonUpToDate, again.Reason, again.Message)
				assert.Empty(t, w.systemd.Calls(), "nothing restarted by the next pod")
				w.drainEvents()
			}
		})
	}
}

// TestInstallWrites checks what a fresh install puts on the node: the
// binary, serve's kubeconfig (0600, the kubelet's API server and CA,
// serve's token), serve's flags; and that uninstall mode gives it all
// back, byte for byte.
func TestInstallWrites(t *testing.T) {
	w := newWorld(t)
	w.drive(t)
	before := durabletest.Tree(t, w.root)
	require.True(t, w.agent().Install(context.Background()).Ready)

	bin, err := os.Stat(filepath.Join(w.root, nodeagent.DefaultBinaryPath))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), bin.Mode().Perm())
	kc := filepath.Join(w.root, nodeagent.DefaultServeKubeconfig)
	fi, err := os.Stat(kc)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	cfg, err := clientcmd.LoadFromFile(kc)
	require.NoError(t, err)
	cl := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	assert.Equal(t, apiServer, cl.Server)
	assert.Equal(t, caPEM, string(cl.CertificateAuthorityData))
	assert.Equal(t, token, cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token)
	dropIn, err := os.ReadFile(filepath.Join(w.root, nodeinstall.ServeDropIn))
	require.NoError(t, err)
	for _, want := range []string{"ExecStart=" + nodeagent.DefaultBinaryPath + " serve", "--secure-port 10265", "--authentication-kubeconfig " + nodeagent.DefaultServeKubeconfig, "--authorization-kubeconfig " + nodeagent.DefaultServeKubeconfig} {
		assert.Contains(t, string(dropIn), want)
	}

	w.systemd.Reset()
	s := w.agent().Uninstall(context.Background())
	assert.Equal(t, nodeagent.ReasonUninstalled, s.Reason, s.Message)
	assert.True(t, s.Ready, "uninstall mode is ready once done")
	assert.Equal(t, "disable [pullguard.service pullguard.socket]|daemon-reload|restart kubelet.service|stop pullguard.service|stop pullguard.socket", calls(w.systemd))
	assert.Equal(t, before, durabletest.Tree(t, w.root), "uninstall mode gives the node back byte for byte")
	assert.Nil(t, w.lease(t).Spec.HolderIdentity)

	w.systemd.Reset()
	s = w.agent().Uninstall(context.Background())
	assert.Equal(t, nodeagent.ReasonNotInstalled, s.Reason)
	assert.True(t, s.Ready)
	assert.Empty(t, w.systemd.Calls())
}

// TestInstallWaitsForTheLease: another node holds the Lease; this node
// waits, says so, and proceeds once it is released.
func TestInstallWaitsForTheLease(t *testing.T) {
	w := newWorld(t)
	now := metav1.NewMicroTime(w.clock.Now())
	_, err := w.client.CoordinationV1().Leases(namespace).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: nodeagent.DefaultLeaseName, Namespace: namespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-b"), LeaseDurationSeconds: ptr.To(int32(600)), RenewTime: &now, AcquireTime: &now},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	done := make(chan nodeagent.Status, 1)
	go func() { done <- w.agent().Install(context.Background()) }()
	ev := <-w.events
	assert.Equal(t, nodeagent.ReasonWaiting, ev.Reason)
	assert.Contains(t, ev.Message, "node node-b is being switched")
	assert.Equal(t, corev1.EventTypeNormal, ev.Type)
	assert.Empty(t, w.systemd.Calls(), "nothing restarted while another node holds the lease")
	assert.Equal(t, nodeagent.ReasonWaiting, w.status(t).Reason)

	// One more try, still held: no new event.
	for !w.clock.HasWaiters() {
		runtime.Gosched()
	}
	w.clock.Step(nodeagent.DefaultLeaseInterval)
	for !w.clock.HasWaiters() {
		runtime.Gosched()
	}
	assert.Empty(t, w.drainEvents())

	l := w.lease(t)
	l.Spec.HolderIdentity = nil
	_, err = w.client.CoordinationV1().Leases(namespace).Update(context.Background(), l, metav1.UpdateOptions{})
	require.NoError(t, err)
	w.clock.Step(nodeagent.DefaultLeaseInterval)
	s := <-done
	assert.Equal(t, nodeagent.ReasonInstalled, s.Reason, s.Message)
	assert.Equal(t, activate, calls(w.systemd))
	l = w.lease(t)
	assert.Nil(t, l.Spec.HolderIdentity, "released")
	assert.Equal(t, int32(1), ptr.Deref(l.Spec.LeaseTransitions, 0))
}

// TestInstallTakesAnExpiredLease: a holder that did not renew within its
// duration (its agent died) is taken over.
func TestInstallTakesAnExpiredLease(t *testing.T) {
	w := newWorld(t)
	old := metav1.NewMicroTime(w.clock.Now().Add(-11 * time.Minute))
	_, err := w.client.CoordinationV1().Leases(namespace).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: nodeagent.DefaultLeaseName, Namespace: namespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-b"), LeaseDurationSeconds: ptr.To(int32(600)), RenewTime: &old},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	s := w.agent().Install(context.Background())
	assert.Equal(t, nodeagent.ReasonInstalled, s.Reason, s.Message)
}

// TestInstallStopped: SIGTERM while waiting for the lease ends the agent
// at once; the node is untouched and no give-back runs.
func TestInstallStopped(t *testing.T) {
	w := newWorld(t)
	now := metav1.NewMicroTime(w.clock.Now())
	_, err := w.client.CoordinationV1().Leases(namespace).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: nodeagent.DefaultLeaseName, Namespace: namespace},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-b"), LeaseDurationSeconds: ptr.To(int32(600)), RenewTime: &now},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	before := durabletest.Tree(t, w.root)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan nodeagent.Status, 1)
	go func() { done <- w.agent().Install(ctx) }()
	<-w.events
	cancel()
	s := <-done
	assert.False(t, s.Ready)
	assert.Empty(t, w.systemd.Calls())
	assert.Equal(t, before, durabletest.Tree(t, w.root))
	assert.Equal(t, "node-b", ptr.Deref(w.lease(t).Spec.HolderIdentity, ""), "another node's lease is left alone")
}

// TestRecipeNode: on a node whose own kubelet configuration asks serve's
// socket (a bootstrap recipe), giving the node back with serve stopped
// would leave the kubelet without an image service: uninstall mode
// refuses and touches nothing, and a failed doctor leaves the install in
// place, not ready.
func TestRecipeNode(t *testing.T) {
	recipe := func(t *testing.T, w *world) {
		f, err := os.OpenFile(filepath.Join(w.root, "var/lib/kubelet/config.yaml"), os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString("imageServiceEndpoint: unix:///run/pullguard/pullguard.sock\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	t.Run("uninstall mode refuses, the node untouched", func(t *testing.T) {
		w := newWorld(t)
		w.drive(t)
		recipe(t, w)
		installed(t, w)
		before := durabletest.Tree(t, w.root)
		s := w.agent().Uninstall(context.Background())
		assert.Equal(t, nodeagent.ReasonUninstallFailed, s.Reason, s.Message)
		assert.False(t, s.Ready)
		assert.Contains(t, s.Message, "/var/lib/kubelet/config.yaml:")
		assert.Contains(t, s.Message, "nothing was changed")
		assert.Empty(t, w.systemd.Calls(), "nothing stopped or restarted")
		assert.Equal(t, before, durabletest.Tree(t, w.root), "the node as it was")
	})
	t.Run("doctor fails: not given back, not ready", func(t *testing.T) {
		w := newWorld(t)
		w.drive(t)
		recipe(t, w)
		w.doctorErr = errors.New("doctor: serve-answers: serve does not answer")
		s := w.agent().Install(context.Background())
		assert.Equal(t, nodeagent.ReasonFailed, s.Reason, s.Message)
		assert.False(t, s.Ready)
		assert.Contains(t, s.Message, "the node was not given back")
		assert.Equal(t, activate, calls(w.systemd), "serve not stopped")
	})
}

// TestWatch: once installed, doctor runs again every interval; the pod
// turns not ready when it no longer passes and ready when it passes
// again, with one Event at each change and none in between; the node is
// not touched.
func TestWatch(t *testing.T) {
	w := newWorld(t)
	checks := make(chan struct{}, 10)
	installed(t, w)
	w.drainEvents()
	w.mu.Lock()
	w.onDoctor = func() { checks <- struct{}{} }
	w.mu.Unlock()
	before := durabletest.Tree(t, w.root)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.agent().Watch(ctx, time.Minute, nodeagent.Status{Ready: true, Reason: nodeagent.ReasonInstalled})
	}()
	// tick lets one check run and waits for its report.
	tick := func(doctorErr error) nodeagent.Status {
		t.Helper()
		w.mu.Lock()
		w.doctorErr = doctorErr
		w.mu.Unlock()
		require.Eventually(t, w.clock.HasWaiters, 10*time.Second, time.Millisecond, "Watch waits for its next check")
		w.clock.Step(time.Minute)
		select {
		case <-checks:
		case <-time.After(10 * time.Second):
			t.Fatal("no check after the interval")
		}
		require.Eventually(t, w.clock.HasWaiters, 10*time.Second, time.Millisecond, "Watch waits again")
		return w.status(t)
	}

	assert.True(t, tick(nil).Ready)
	assert.Empty(t, w.drainEvents(), "nothing changed: no Event")

	s := tick(errors.New("doctor: serve-answers: serve does not answer"))
	assert.False(t, s.Ready)
	assert.Equal(t, nodeagent.ReasonDoctorFailed, s.Reason)
	assert.Contains(t, s.Message, "doctor no longer passes: doctor: serve-answers")
	events := w.drainEvents()
	require.Len(t, events, 1)
	assert.Equal(t, corev1.EventTypeWarning, events[0].Type)

	assert.False(t, tick(errors.New("doctor: serve-answers: still down")).Ready)
	assert.Empty(t, w.drainEvents(), "still failing: no new Event")

	s = tick(nil)
	assert.True(t, s.Ready)
	assert.Equal(t, nodeagent.ReasonUpToDate, s.Reason)
	require.Len(t, w.drainEvents(), 1)

	cancel()
	<-done
	assert.Equal(t, before, durabletest.Tree(t, w.root), "watching changes nothing on the node")
	assert.Empty(t, w.systemd.Calls(), "nothing restarted")
}

// TestWatchSkips: a node left not ready for a reason doctor does not
// answer (refused, given back) is not watched, nor with a 0 interval.
func TestWatchSkips(t *testing.T) {
	w := newWorld(t)
	for _, tt := range []struct {
		last  nodeagent.Status
		every time.Duration
	}{
		{nodeagent.Status{Reason: nodeagent.ReasonRefused}, time.Minute},
		{nodeagent.Status{Reason: nodeagent.ReasonRolledBack}, time.Minute},
		{nodeagent.Status{Ready: true, Reason: nodeagent.ReasonInstalled}, 0},
	} {
		w.agent().Watch(context.Background(), tt.every, tt.last) // returns at once
	}
	assert.Zero(t, w.doctorRuns)
}

// TestInstallHalted: a node given back is listed on the Lease; once the
// list holds MaxFailed other nodes, an agent switches nothing and stays
// not ready, RolloutHalted, saying how to go on.
func TestInstallHalted(t *testing.T) {
	w := newWorld(t)
	w.drive(t)
	w.doctorErr = errors.New("doctor: serve-answers: serve does not answer")
	s := w.agent().Install(context.Background())
	require.Equal(t, nodeagent.ReasonRolledBack, s.Reason, s.Message)
	assert.Equal(t, nodeName, w.lease(t).Annotations[nodeagent.FailedAnnotation], "the failed node listed")

	other := newWorld(t)
	other.drive(t)
	other.client = w.client // the same cluster
	before := durabletest.Tree(t, other.root)
	a := other.agent()
	a.Lease.Holder, a.Lease.MaxFailed = "node-b", 1
	s = a.Install(context.Background())
	assert.Equal(t, nodeagent.ReasonHalted, s.Reason, s.Message)
	assert.False(t, s.Ready)
	assert.Contains(t, s.Message, "1 nodes failed ("+nodeName+")")
	assert.Equal(t, before, durabletest.Tree(t, other.root), "the node untouched")
	assert.Empty(t, other.systemd.Calls())

	w.doctorErr = nil
	s = w.agent().Install(context.Background())
	require.True(t, s.Ready, s.Message)
	assert.Empty(t, w.lease(t).Annotations[nodeagent.FailedAnnotation], "a success takes the node off the list")
}
