// Package nodeconfig holds the kubelet's configuration as pullguard reads
// it: a KubeletConfiguration file read as the kubelet reads it (strict, then
// lenient for v1beta1), the *.conf drop-ins of the kubelet's --config-dir
// merged over it as the kubelet merges them (LoadKubeletConfigDir), merged
// with the kubelet's flags and checked with the kubelet's rules, into the
// Settings that assemble a node (feature gates,
// the image pull policy and allowlist, pull limits and registry QPS).
//
// cmd/pullguard loads it for run, serve and doctor, and pkg/podworkers assembles a
// node from its Settings; it depends on credtracker (the policy and
// allowlist types), featuregates, internal/boundedread and the kubelet's
// configuration types. test/kubelet checks its verdicts, through `pullguard
// config check`, against the kubelet's own validation
// (TestKubeletConfigurationParity), and its drop-in merge against the
// kubelet's own (TestKubeletDropInMergeParity).
package nodeconfig
