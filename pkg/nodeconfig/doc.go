// Package nodeconfig holds the kubelet's configuration as pullguard reads
// it: a KubeletConfiguration file read as the kubelet reads it (strict, then
// lenient for v1beta1), merged with the kubelet's flags and checked with the
// kubelet's rules, into the Settings that assemble a node (feature gates,
// the image pull policy and allowlist, pull limits and registry QPS).
//
// cmd/pullguard loads it for run and serve, and pkg/podworkers assembles a
// node from its Settings; it depends on credtracker (the policy and
// allowlist types), featuregates, internal/boundedread and the kubelet's
// configuration types. test/kubelet checks its verdicts, through `pullguard
// config check`, against the kubelet's own validation
// (TestKubeletConfigurationParity).
package nodeconfig
