//go:build tools

// Package kubelet holds the end-to-end test that runs pullguard under a real
// kubelet and kube-apiserver. This file pins the commands the test builds.
package kubelet

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
