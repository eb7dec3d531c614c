package kubelet

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/apps"
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	appsvalidation "k8s.io/kubernetes/pkg/apis/apps/validation"
	"k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	corevalidation "k8s.io/kubernetes/pkg/apis/core/validation"
	"k8s.io/kubernetes/pkg/apis/rbac"
	_ "k8s.io/kubernetes/pkg/apis/rbac/install"
	rbacvalidation "k8s.io/kubernetes/pkg/apis/rbac/validation"
	"k8s.io/kubernetes/pkg/capabilities"
)

// TestDaemonSetManifestsPassTheAPIServersValidation decodes every
// manifest of deploy/daemonset (uninstall.yaml included) as the API
// server v1.36 does (its scheme: conversion and defaulting into the
// internal types) and runs its validation of each kind: what `kubectl
// apply` would be refused for (a selector that does not match the
// template, a Secret of a ServiceAccount token without its ServiceAccount,
// a rolling update with neither maxUnavailable nor maxSurge, an invalid
// name or rule), without a server. (The fleet e2e applies them to a real
// one; deploy's own tests hold their content.)
//
// The API server is taken as every cluster that runs node agents runs it,
// with --allow-privileged=true (kubeadm's, and the managed services').
func TestDaemonSetManifestsPassTheAPIServersValidation(t *testing.T) {
	capabilities.ResetForTest()
	capabilities.Setup(true, 0)
	t.Cleanup(capabilities.ResetForTest)
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "daemonset", "*.yaml"))
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, f)
			obj, gvk, err := legacyscheme.Codecs.UniversalDecoder().Decode(doc, nil, nil)
			require.NoError(t, err, f)
			kinds[gvk.Kind]++
			var errs []error
			switch o := obj.(type) {
			case *apps.DaemonSet:
				errs = aggregate(appsvalidation.ValidateDaemonSet(o, podutil.GetValidationOptionsFromPodTemplate(&o.Spec.Template, nil)).ToAggregate())
			case *core.Namespace:
				errs = aggregate(corevalidation.ValidateNamespace(o).ToAggregate())
			case *core.ServiceAccount:
				errs = aggregate(corevalidation.ValidateServiceAccount(o).ToAggregate())
			case *core.Secret:
				errs = aggregate(corevalidation.ValidateSecret(o).ToAggregate())
			case *rbac.Role:
				errs = aggregate(rbacvalidation.ValidateRole(o).ToAggregate())
			case *rbac.RoleBinding:
				errs = aggregate(rbacvalidation.ValidateRoleBinding(o).ToAggregate())
			case *rbac.ClusterRoleBinding:
				errs = aggregate(rbacvalidation.ValidateClusterRoleBinding(o).ToAggregate())
			default:
				t.Errorf("%s: %s: no validation of this kind here; add it", f, gvk)
			}
			assert.Empty(t, errs, "%s: %s", filepath.Base(f), gvk.Kind)
		}
	}
	assert.Equal(t, map[string]int{"Namespace": 1, "ServiceAccount": 2, "Secret": 1, "Role": 1, "RoleBinding": 2, "ClusterRoleBinding": 1, "DaemonSet": 2}, kinds)
}

func aggregate(agg interface{ Errors() []error }) []error {
	if agg == nil {
		return nil
	}
	return agg.Errors()
}
