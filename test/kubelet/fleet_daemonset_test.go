package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/pullguard/pullguard/pkg/nodeagent"
)

// agentVersion is the version the test's image of the release is built as.
const agentVersion = "v0.0.0-e2e"

// agentImage builds the release's image of this machine's architecture
// with tools/release (no network: go-containerregistry writes a
// docker-archive), pushes it to the test's registry as
// pullguard/pullguard:agentVersion, which anyone may pull, and returns its
// reference.
func (f *fleet) agentImage(t *testing.T, ctx context.Context) string {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dist := filepath.Join(f.cp.dir, "dist")
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "run", ".", "-C", repo, "-version", agentVersion, "-dist", dist, "-image-only", "-arch", runtime.GOARCH)
	cmd.Dir = filepath.Join(repo, "tools", "release")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "tools/release: %s", lastBytes(out, 3000))
	archive := filepath.Join(dist, "pullguard-"+agentVersion+"-image-linux-"+runtime.GOARCH+".tar")
	img, err := tarball.ImageFromPath(archive, nil)
	require.NoError(t, err, "the image's docker-archive %s", archive)
	f.cp.reg.grant("", "pullguard/")
	ref, err := push(ctx, f.cp.reg, img, "pullguard/pullguard", agentVersion)
	require.NoError(t, err)
	t.Logf("the image built by tools/release and pushed as %s in %s", ref, time.Since(start).Round(100*time.Millisecond))
	return ref
}

// daemonSetObjects decodes the manifests deploy/daemonset/kustomization.yaml
// lists, in its order, as `kubectl apply -k` sends them.
func daemonSetObjects(t *testing.T) []k8sruntime.Object {
	dir := filepath.Join("..", "..", "deploy", "daemonset")
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	var k struct {
		Resources []string `json:"resources"`
	}
	require.NoError(t, yaml.Unmarshal(data, &k))
	require.NotEmpty(t, k.Resources, "kustomization.yaml's resources")
	var objs []k8sruntime.Object
	for _, res := range k.Resources {
		objs = append(objs, decodeManifests(t, filepath.Join(dir, res))...)
	}
	return objs
}

// decodeManifests decodes every document of a manifest file.
func decodeManifests(t *testing.T, file string) []k8sruntime.Object {
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	var objs []k8sruntime.Object
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		require.NoError(t, err, file)
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		require.NoError(t, err, file)
		objs = append(objs, obj)
	}
}

// apply creates each object, leaving one that exists as it is.
func (f *fleet) apply(t *testing.T, ctx context.Context, objs []k8sruntime.Object) {
	cs := f.cp.client
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Secret:
			_, err = cs.CoreV1().Secrets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.DaemonSet:
			_, err = cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("deploy/daemonset: a %T the test does not apply", obj)
		}
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		require.NoError(t, err, "apply %T", obj)
	}
}

// hostRootInNamespace is where each node's kubeadm-shaped root is seen in
// its own mount namespace: the DaemonSet's hostPath in place of the
// host's /, the same path on every node.
const hostRootInNamespace = "/var/lib/pullguard-e2e-host"

// forTheFleet sets the DaemonSet's image, its host volume to
// hostRootInNamespace, and the API server's address for the agent's
// in-cluster client: the nodes have no kube-proxy, so the kubernetes
// Service's address leads nowhere (the variables the pod declares win over
// the ones the kubelet adds).
func forTheFleet(t *testing.T, ds *appsv1.DaemonSet, image, apiURL string) {
	spec := &ds.Spec.Template.Spec
	require.Len(t, spec.Containers, 1, "the DaemonSet's containers")
	spec.Containers[0].Image = image
	hostPort := strings.TrimPrefix(apiURL, "https://")
	host, port, ok := strings.Cut(hostPort, ":")
	require.True(t, ok, apiURL)
	spec.Containers[0].Env = append(spec.Containers[0].Env,
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: host},
		corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: port})
	found := false
	for i := range spec.Volumes {
		if v := spec.Volumes[i].HostPath; v != nil && v.Path == "/" {
			v.Path = hostRootInNamespace
			found = true
		}
	}
	require.True(t, found, "the DaemonSet's hostPath volume of /")
}

// agentPods are the DaemonSet's pods by node.
func (f *fleet) agentPods(ctx context.Context, ds *appsv1.DaemonSet) (map[string]corev1.Pod, error) {
	sel := metav1.FormatLabelSelector(ds.Spec.Selector)
	list, err := f.cp.client.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	pods := map[string]corev1.Pod{}
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			pods[p.Spec.NodeName] = p
		}
	}
	return pods, nil
}

// agentOutcomes are the reasons with which the agent ends its work on a
// node (not Starting, not WaitingForLease).
var agentOutcomes = map[string]bool{
	nodeagent.ReasonInstalled: true, nodeagent.ReasonServeUpdated: true, nodeagent.ReasonUpToDate: true,
	nodeagent.ReasonRefused: true, nodeagent.ReasonRolledBack: true, nodeagent.ReasonDoctorFailed: true,
	nodeagent.ReasonFailed:      true,
	nodeagent.ReasonUninstalled: true, nodeagent.ReasonNotInstalled: true, nodeagent.ReasonUninstallFailed: true,
}

// agentEvents are the events the agent recorded on its pod, "reason:
// message", in order, and whether one of them is an outcome.
func (f *fleet) agentEvents(ctx context.Context, p corev1.Pod) ([]string, bool, error) {
	evs, err := f.cp.client.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	if err != nil {
		return nil, false, err
	}
	var out []string
	ended := false
	for _, e := range evs.Items {
		if e.Reason != nodeagent.ReasonStarting && e.Reason != nodeagent.ReasonWaiting && !agentOutcomes[e.Reason] {
			continue // the scheduler's, the kubelet's
		}
		out = append(out, e.Reason+": "+e.Message)
		ended = ended || agentOutcomes[e.Reason]
	}
	return out, ended, nil
}

// containerRunning says whether the pod's container runs, and its
// readiness.
func containerRunning(p corev1.Pod) (running, ready bool) {
	for _, cs := range p.Status.ContainerStatuses {
		return cs.State.Running != nil, cs.Ready
	}
	return false, false
}

func podSummary(p corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s: phase %s", p.Name, p.Spec.NodeName, p.Status.Phase)
	for _, cs := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, ", ready %s, restarts %s", strconv.FormatBool(cs.Ready), strconv.Itoa(int(cs.RestartCount)))
		if w := cs.State.Waiting; w != nil {
			fmt.Fprintf(&b, ", waiting %s: %s", w.Reason, w.Message)
		}
		if r := cs.LastTerminationState.Terminated; r != nil {
			fmt.Fprintf(&b, ", last exit %d: %s", r.ExitCode, lastBytes([]byte(r.Message), 300))
		}
	}
	return b.String()
}

// daemonSetWithoutSystemd applies deploy/daemonset with the release's
// image (forTheFleet) and waits until the agent ran on every node. The
// nodes' kubelets are run by the test, not by a systemd: the agent, having
// taken the Lease and written the node's files, cannot reach the host's
// systemd to restart the kubelet, gives the node back (every kubelet
// file's SHA-256 as before), says why in an Event on its pod (RolledBack)
// and stays not ready. Deleting the DaemonSet changes nothing more.
func (f *fleet) daemonSetWithoutSystemd(t *testing.T, ctx context.Context, roots map[*cluster]string) {
	before := map[*cluster]map[string]string{}
	for _, n := range f.nodes {
		root := roots[n]
		require.NotEmpty(t, root)
		// The agent reads the kubelet's --kubeconfig and its CA under the
		// host's root: they are put there, at their paths.
		for _, file := range []string{n.kubeconfig(), n.pki.caFile} {
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			dst := filepath.Join(root, file)
			require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
			require.NoError(t, os.WriteFile(dst, data, 0o600))
		}
		link := filepath.Join(n.ns.shadowed["/var/lib"], strings.TrimPrefix(hostRootInNamespace, "/var/lib/"))
		require.NoError(t, os.RemoveAll(link)) // systemd's node root's mount point (bootNodeSystem), unused here
		require.NoError(t, os.Symlink(root, link))
		before[n] = rootFiles(t, root)
	}
	image := f.agentImage(t, ctx)
	objs := daemonSetObjects(t)
	var ds *appsv1.DaemonSet
	for _, o := range objs {
		if d, ok := o.(*appsv1.DaemonSet); ok {
			ds = d
		}
	}
	require.NotNil(t, ds, "a DaemonSet in deploy/daemonset")
	forTheFleet(t, ds, image, f.cp.apiURL)
	from, err := f.cp.reg.mark(ctx)
	require.NoError(t, err)
	start := time.Now()
	f.apply(t, ctx, objs)

	// Every node gets the agent, which reports: an event of its own on its
	// pod, the pod not ready.
	pods, events := f.awaitAgents(t, ctx, ds, len(f.nodes))
	t.Logf("the agent reported on every node %s after the manifests were applied", time.Since(start).Round(100*time.Millisecond))
	for node, evs := range events {
		t.Logf("%s: the agent's events: %s", node, strings.Join(evs, " | "))
		// The agent installed (after taking the Lease), could not reach
		// the host's systemd, and gave the node back.
		require.True(t, slices.ContainsFunc(evs, func(e string) bool {
			return strings.HasPrefix(e, nodeagent.ReasonRolledBack+": ") && strings.Contains(e, "systemd")
		}), "%s: the agent rolled back for want of systemd: %v", node, evs)
	}
	for _, p := range pods {
		t.Logf("%s", podSummary(p))
		_, ready := containerRunning(p)
		require.False(t, ready, "%s's agent is not ready: its node could not be switched", p.Spec.NodeName)
	}
	to, err := f.cp.reg.mark(ctx)
	require.NoError(t, err)
	tr := summarize(f.cp.reg.hits(from, to), "pullguard/pullguard")
	t.Logf("the registry's log: %d manifest requests granted, %d blobs of pullguard/pullguard", tr.manifestOK, tr.blobs)
	require.Positive(t, tr.blobs, "the nodes pulled the image from the test's registry")
	for _, n := range f.nodes {
		require.Equal(t, before[n], rootFiles(t, roots[n]), "every file of %s's root as before the DaemonSet", n.hostname())
	}
	f.deleteDaemonSet(t, ctx, ds)
	for _, n := range f.nodes {
		require.Equal(t, before[n], rootFiles(t, roots[n]), "every file of %s's root as before, the DaemonSet deleted", n.hostname())
	}

	// The uninstall mode: nothing to take off.
	un := decodeManifests(t, filepath.Join("..", "..", "deploy", "daemonset", "uninstall.yaml"))
	require.Len(t, un, 1, "uninstall.yaml's objects")
	uds, ok := un[0].(*appsv1.DaemonSet)
	require.True(t, ok, "uninstall.yaml holds a DaemonSet")
	forTheFleet(t, uds, image, f.cp.apiURL)
	f.apply(t, ctx, un)
	_, events = f.awaitAgents(t, ctx, uds, len(f.nodes))
	for node, evs := range events {
		t.Logf("%s: the uninstall agent's events: %s", node, strings.Join(evs, " | "))
		require.True(t, slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, nodeagent.ReasonNotInstalled+": ") }),
			"%s: nothing to uninstall: %v", node, evs)
	}
	f.deleteDaemonSet(t, ctx, uds)
	for _, n := range f.nodes {
		require.Equal(t, before[n], rootFiles(t, roots[n]), "every file of %s's root as before, after the uninstall mode", n.hostname())
	}
}

// awaitAgents waits until ds has a pod on want nodes whose agent recorded
// an outcome, and returns the pods and their agent's events by node; on a
// timeout it fails with the pods' states and the nodes' containerd logs.
func (f *fleet) awaitAgents(t *testing.T, ctx context.Context, ds *appsv1.DaemonSet, want int) (map[string]corev1.Pod, map[string][]string) {
	var pods map[string]corev1.Pod
	events := map[string][]string{}
	err := poll(5*time.Minute, time.Second, func() (bool, error) {
		var err error
		if pods, err = f.agentPods(ctx, ds); err != nil {
			return false, err
		}
		done := len(pods) == want
		for node, p := range pods {
			var ended bool
			if events[node], ended, err = f.agentEvents(ctx, p); err != nil {
				return false, err
			}
			done = done && ended
		}
		if done {
			return true, nil
		}
		return false, fmt.Errorf("%s: %d pods, events %v", ds.Name, len(pods), events)
	})
	if err != nil {
		var summary []string
		for _, p := range pods {
			summary = append(summary, podSummary(p))
		}
		for _, n := range f.nodes {
			summary = append(summary, n.hostname()+"'s kubelet: "+n.kubeletJournal(10), n.hostname()+"'s containerd: "+n.ctrd.out.tail(5))
		}
		require.NoError(t, err, "%s", strings.Join(summary, "\n"))
	}
	return pods, events
}

// deleteDaemonSet deletes ds and waits until its pods are gone.
func (f *fleet) deleteDaemonSet(t *testing.T, ctx context.Context, ds *appsv1.DaemonSet) {
	require.NoError(t, f.cp.client.AppsV1().DaemonSets(ds.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{}))
	err := poll(2*time.Minute, time.Second, func() (bool, error) {
		pods, err := f.agentPods(ctx, ds)
		return err == nil && len(pods) == 0, err
	})
	require.NoError(t, err, "%s's pods gone", ds.Name)
}
