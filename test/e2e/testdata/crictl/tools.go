//go:build tools

// Package tools pins crictl, the CRI client the e2e suite drives
// `pullguard serve` with (built by test/e2e/crictl_test.go).
package tools

import _ "sigs.k8s.io/cri-tools/cmd/crictl"
