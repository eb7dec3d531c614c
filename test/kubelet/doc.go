// Package kubelet is pullguard's end-to-end test with the upstream kubelet
// and kube-apiserver (built from k8s.io/kubernetes at the version go.mod
// requires), etcd, a private containerd (built from
// github.com/containerd/containerd/v2 at containerdVersion) and the Debian
// docker-registry.
//
// It is a module of its own so that pullguard's module never imports
// k8s.io/kubernetes; it imports pullguard's module (replace ../..) for the
// in-process comparison of the two keyrings (keyring_diff_test.go) and of
// the credential every spelling of a pull secret gives (spellings_test.go).
// Run it with `make e2e-kubelet` (root, Linux). See docs/testing.md.
package kubelet
