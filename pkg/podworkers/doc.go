// Package podworkers holds pullguard's stand-in for the kubelet's pod
// workers, as far as images go: it reads v1 Secret, ServiceAccount and Pod
// manifests, assembles a node (Start: the runtime, the credential tracker,
// the node keyring, the credential provider plugins and the image manager,
// under one locked root directory), and drives every pod's init containers,
// then containers, through the image manager, as the kubelet's pod workers
// do, keeping the events.
//
// cmd/pullguard (run and demo assemble a node with it; records, serve and
// registry use its directory names and bounded reads), bench/serve (serve's
// root directory layout, TrackerDir) and the end-to-end suite use it; no
// package of the product below the command imports it. It depends on
// imagemanager and on everything a node is made of (credtracker,
// pkg/criruntime, pkg/guardedpull, pkg/keyring, pkg/credentialprovider,
// pkg/nodeconfig, pkg/credential, internal/boundedread, internal/dirlock,
// internal/safedecode).
package podworkers
