package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

const (
	daemonsetDir = "daemonset"
	// imageRepo is the release's image (tools/release, imageRepo).
	imageRepo    = "ghcr.io/pullguard/pullguard"
	namespace    = "pullguard-system"
	agentAccount = "pullguard-node-agent"
	serveAccount = "pullguard-serve"
)

// object is one document of a manifest, decoded into its client-go type.
type object struct {
	file string
	gvk  schema.GroupVersionKind
	obj  runtime.Object
}

// decodeManifest splits a multi-document YAML file and decodes each
// document strictly (an unknown or duplicated field fails) into the type
// client-go's scheme has for its apiVersion and kind.
func decodeManifest(t *testing.T, path string) []object {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err, path)
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		require.NoError(t, yaml.Unmarshal(doc, &tm), path)
		gv, err := schema.ParseGroupVersion(tm.APIVersion)
		require.NoError(t, err, "%s: apiVersion", path)
		gvk := gv.WithKind(tm.Kind)
		obj, err := scheme.Scheme.New(gvk)
		require.NoError(t, err, "%s: %s is not a Kubernetes type client-go knows", path, gvk)
		require.NoError(t, yaml.UnmarshalStrict(doc, obj), "%s: %s", path, gvk)
		out = append(out, object{file: filepath.Base(path), gvk: gvk, obj: obj})
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

// kustomization is the part of kustomize's Kustomization the directory
// uses, decoded strictly: a field it does not name fails the test.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images"`
}

func readKustomization(t *testing.T) kustomization {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(daemonsetDir, "kustomization.yaml"))
	require.NoError(t, err)
	var k kustomization
	require.NoError(t, yaml.UnmarshalStrict(data, &k))
	return k
}

// applied is every object `kubectl apply -k deploy/daemonset` creates.
func applied(t *testing.T) []object {
	t.Helper()
	var out []object
	for _, f := range readKustomization(t).Resources {
		out = append(out, decodeManifest(t, filepath.Join(daemonsetDir, f))...)
	}
	return out
}

func find[T runtime.Object](objs []object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestKustomizationListsEveryFile: the kustomization applies every
// manifest of the directory but uninstall.yaml, which is applied on its
// own, and sets the image's tag to the one the manifests name.
func TestKustomizationListsEveryFile(t *testing.T) {
	k := readKustomization(t)
	assert.Equal(t, "kustomize.config.k8s.io/v1beta1", k.APIVersion)
	assert.Equal(t, "Kustomization", k.Kind)
	files, err := filepath.Glob(filepath.Join(daemonsetDir, "*.yaml"))
	require.NoError(t, err)
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && b != "uninstall.yaml" {
			want = append(want, b)
		}
	}
	got := slices.Clone(k.Resources)
	slices.Sort(got)
	assert.Equal(t, want, got)
	require.Len(t, k.Images, 1)
	assert.Equal(t, imageRepo, k.Images[0].Name)
	assert.Empty(t, k.Images[0].NewName)
	for _, f := range []string{"daemonset.yaml", "uninstall.yaml"} {
		ds := find[*appsv1.DaemonSet](decodeManifest(t, filepath.Join(daemonsetDir, f)))
		require.Len(t, ds, 1, f)
		assert.Equal(t, imageRepo+":"+k.Images[0].NewTag, ds[0].Spec.Template.Spec.Containers[0].Image, "%s: the kustomization's tag", f)
	}
	ds := find[*appsv1.DaemonSet](applied(t))
	require.Len(t, ds, 1, "the kustomization installs; it never runs the uninstall beside it")
	assert.Equal(t, "pullguard-node-agent", ds[0].Name)
}

// TestDaemonSets holds both DaemonSets (install and uninstall) to what a
// node agent needs and no more, and to a rollout one node at a time.
func TestDaemonSets(t *testing.T) {
	for _, tc := range []struct {
		file, name, mode string
		token            bool
	}{
		{file: "daemonset.yaml", name: "pullguard-node-agent", mode: "install", token: true},
		{file: "uninstall.yaml", name: "pullguard-node-agent-uninstall", mode: "uninstall"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			objs := decodeManifest(t, filepath.Join(daemonsetDir, tc.file))
			require.Len(t, objs, 1)
			ds := objs[0].obj.(*appsv1.DaemonSet)
			assert.Equal(t, tc.name, ds.Name)
			assert.Equal(t, namespace, ds.Namespace)

			ru := ds.Spec.UpdateStrategy.RollingUpdate
			assert.Equal(t, appsv1.RollingUpdateDaemonSetStrategyType, ds.Spec.UpdateStrategy.Type)
			require.NotNil(t, ru)
			assert.Equal(t, intstr.FromInt32(1), *ru.MaxUnavailable, "one node at a time")
			assert.Equal(t, intstr.FromInt32(0), *ru.MaxSurge, "never two agents on a node")

			pod := ds.Spec.Template.Spec
			assert.Equal(t, ds.Spec.Selector.MatchLabels, pickLabels(ds.Spec.Template.Labels, ds.Spec.Selector.MatchLabels))
			assert.Equal(t, agentAccount, pod.ServiceAccountName)
			assert.Equal(t, "system-node-critical", pod.PriorityClassName)
			assert.Equal(t, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, pod.Tolerations, "every taint, as kube-proxy")
			assert.True(t, pod.HostNetwork, "doctor reads serve's /healthz on the node's 127.0.0.1")
			assert.Equal(t, corev1.DNSClusterFirstWithHostNet, pod.DNSPolicy)
			assert.False(t, pod.HostPID, "the agent reaches systemd over its socket, not through PID 1")
			require.NotNil(t, pod.TerminationGracePeriodSeconds)
			assert.Positive(t, *pod.TerminationGracePeriodSeconds)
			assert.Empty(t, pod.InitContainers)
			require.Len(t, pod.Containers, 1)

			c := pod.Containers[0]
			assert.True(t, strings.HasPrefix(c.Image, imageRepo+":"), c.Image)
			assert.Equal(t, corev1.PullIfNotPresent, c.ImagePullPolicy)
			assert.Empty(t, c.Command, "the image's entrypoint, /usr/bin/pullguard")
			require.GreaterOrEqual(t, len(c.Args), 2)
			assert.Equal(t, []string{"node-agent", tc.mode}, c.Args[:2])
			assert.Contains(t, c.Args, "--host-root=/host")
			assert.Nil(t, c.Lifecycle, "no preStop: an image update must not uninstall")
			assert.Nil(t, c.LivenessProbe, "a restart in the middle of a switch helps no one")
			require.NotNil(t, c.ReadinessProbe)
			require.NotNil(t, c.ReadinessProbe.Exec)
			assert.Equal(t, []string{"/usr/bin/pullguard", "node-agent", "ready"}, c.ReadinessProbe.Exec.Command)

			sc := c.SecurityContext
			require.NotNil(t, sc)
			assert.Equal(t, ptrTo(true), sc.Privileged)
			assert.Equal(t, ptrTo(int64(0)), sc.RunAsUser)
			assert.Equal(t, ptrTo(true), sc.ReadOnlyRootFilesystem)

			assert.False(t, c.Resources.Requests.Cpu().IsZero())
			assert.False(t, c.Resources.Requests.Memory().IsZero())
			assert.False(t, c.Resources.Limits.Memory().IsZero())
			assert.Equal(t, 1, c.Resources.Limits.Memory().Cmp(*c.Resources.Requests.Memory()))

			env, values := map[string]string{}, map[string]string{}
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					values[e.Name] = e.Value
					continue
				}
				require.NotNil(t, e.ValueFrom.FieldRef, e.Name)
				env[e.Name] = e.ValueFrom.FieldRef.FieldPath
			}
			assert.Equal(t, map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid", "NODE_NAME": "spec.nodeName"}, env)
			// The collector works before the container's memory limit.
			require.Contains(t, values, "GOMEMLIMIT")
			limit, err := resource.ParseQuantity(strings.TrimSuffix(values["GOMEMLIMIT"], "B"))
			require.NoError(t, err, "GOMEMLIMIT")
			assert.Equal(t, -1, limit.Cmp(*c.Resources.Limits.Memory()), "GOMEMLIMIT below the memory limit")
			assert.Len(t, values, 1, "no other plain value")

			volumes := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				volumes[v.Name] = v
			}
			mounts := map[string]corev1.VolumeMount{}
			for _, m := range c.VolumeMounts {
				require.Contains(t, volumes, m.Name)
				mounts[m.MountPath] = m
			}
			host := mounts["/host"]
			require.NotNil(t, volumes[host.Name].HostPath, "/host")
			assert.Equal(t, "/", volumes[host.Name].HostPath.Path)
			assert.Equal(t, ptrTo(corev1.MountPropagationHostToContainer), host.MountPropagation)
			assert.False(t, host.ReadOnly)
			for _, v := range pod.Volumes {
				if v.HostPath != nil {
					assert.Equal(t, "host", v.Name, "the node's / is the only host path")
				}
			}
			tokenMount, hasToken := mounts["/var/run/secrets/pullguard-serve"]
			assert.Equal(t, tc.token, hasToken)
			if tc.token {
				assert.Contains(t, c.Args, "--serve-token-file=/var/run/secrets/pullguard-serve/token")
				assert.Contains(t, c.Args, "--serve-arg=--secure-port=10265", "serve's secure /metrics, which deploy/monitoring scrapes")
				assert.True(t, tokenMount.ReadOnly)
				secret := volumes[tokenMount.Name].Secret
				require.NotNil(t, secret)
				assert.Equal(t, "pullguard-serve-token", secret.SecretName)
				assert.Equal(t, ptrTo(int32(0o400)), secret.DefaultMode)
				assert.Equal(t, []corev1.KeyToPath{{Key: "token", Path: "token"}}, secret.Items, "the token alone")
			} else {
				for _, a := range c.Args {
					assert.False(t, strings.HasPrefix(a, "--serve-"), a)
				}
			}
			run := mounts["/run/pullguard-node-agent"]
			require.NotNil(t, volumes[run.Name].EmptyDir, "the status file's directory (node-agent's --status-file default)")
			assert.False(t, run.ReadOnly)
		})
	}
}

func pickLabels(labels, keys map[string]string) map[string]string {
	out := map[string]string{}
	for k := range keys {
		if v, ok := labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }

// TestServeIdentity: serve's ServiceAccount, its long-lived token Secret,
// and its delegation bindings.
func TestServeIdentity(t *testing.T) {
	objs := applied(t)
	var sa *corev1.ServiceAccount
	for _, s := range find[*corev1.ServiceAccount](objs) {
		assert.Equal(t, namespace, s.Namespace)
		if s.Name == serveAccount {
			sa = s
		}
	}
	require.NotNil(t, sa)
	assert.Equal(t, ptrTo(false), sa.AutomountServiceAccountToken, "no pod runs as serve")
	secrets := find[*corev1.Secret](objs)
	require.Len(t, secrets, 1)
	s := secrets[0]
	assert.Equal(t, "pullguard-serve-token", s.Name)
	assert.Equal(t, namespace, s.Namespace)
	assert.Equal(t, corev1.SecretTypeServiceAccountToken, s.Type)
	assert.Equal(t, serveAccount, s.Annotations[corev1.ServiceAccountNameKey])
	assert.Empty(t, s.Data, "the token controller fills it in")
	assert.Empty(t, s.StringData)

	ns := find[*corev1.Namespace](objs)
	require.Len(t, ns, 1)
	assert.Equal(t, namespace, ns[0].Name)
	assert.Equal(t, "privileged", ns[0].Labels["pod-security.kubernetes.io/enforce"])
}

// TestRBAC: exactly the rules the agent and serve need. The agent: its
// Lease and Events on its Pod, in its namespace. serve: delegation
// (system:auth-delegator) and the authentication ConfigMap's reader in
// kube-system. No ClusterRole of their own, nothing on Secrets.
func TestRBAC(t *testing.T) {
	objs := applied(t)
	assert.Empty(t, find[*rbacv1.ClusterRole](objs), "no ClusterRole: the scrapers' is deploy/monitoring's")

	roles := find[*rbacv1.Role](objs)
	require.Len(t, roles, 1)
	assert.Equal(t, agentAccount, roles[0].Name)
	assert.Equal(t, namespace, roles[0].Namespace)
	assert.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"pullguard-node-agent"}, Verbs: []string{"get", "update"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
	}, roles[0].Rules)
	for _, r := range roles[0].Rules {
		assert.NotContains(t, r.Resources, "secrets")
		assert.NotContains(t, r.Resources, "*")
		assert.NotContains(t, r.Verbs, "*")
		assert.NotContains(t, r.APIGroups, "*")
	}

	type binding struct {
		namespace, roleKind, role string
		subjects                  []rbacv1.Subject
	}
	sa := func(name string) []rbacv1.Subject {
		return []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}}
	}
	got := map[string]binding{}
	for _, b := range find[*rbacv1.RoleBinding](objs) {
		assert.Equal(t, rbacv1.GroupName, b.RoleRef.APIGroup)
		got[b.Name] = binding{b.Namespace, b.RoleRef.Kind, b.RoleRef.Name, b.Subjects}
	}
	for _, b := range find[*rbacv1.ClusterRoleBinding](objs) {
		assert.Equal(t, rbacv1.GroupName, b.RoleRef.APIGroup)
		got[b.Name] = binding{"", b.RoleRef.Kind, b.RoleRef.Name, b.Subjects}
	}
	assert.Equal(t, map[string]binding{
		"pullguard-node-agent":                                      {namespace, "Role", "pullguard-node-agent", sa(agentAccount)},
		"pullguard-serve:system:auth-delegator":                     {"", "ClusterRole", "system:auth-delegator", sa(serveAccount)},
		"pullguard-serve:extension-apiserver-authentication-reader": {"kube-system", "Role", "extension-apiserver-authentication-reader", sa(serveAccount)},
	}, got)
}

// TestEveryObjectIsLabeled: every namespaced object names
// its namespace (kubectl apply -f puts none in the caller's), and every
// object is labeled part of pullguard (kubectl delete -l).
func TestEveryObjectIsLabeled(t *testing.T) {
	objs := applied(t)
	objs = append(objs, decodeManifest(t, filepath.Join(daemonsetDir, "uninstall.yaml"))...)
	for _, o := range objs {
		m, ok := o.obj.(interface {
			GetNamespace() string
			GetLabels() map[string]string
			GetName() string
		})
		require.True(t, ok)
		assert.Equal(t, "pullguard", m.GetLabels()["app.kubernetes.io/part-of"], "%s: %s %s", o.file, o.gvk.Kind, m.GetName())
		switch o.gvk.Kind {
		case "Namespace", "ClusterRoleBinding", "ClusterRole":
			assert.Empty(t, m.GetNamespace(), "%s: %s %s", o.file, o.gvk.Kind, m.GetName())
		default:
			assert.NotEmpty(t, m.GetNamespace(), "%s: %s %s", o.file, o.gvk.Kind, m.GetName())
		}
	}
}
