// Package kubeletcri holds the kubelet's own client of a CRI image
// service, k8s.io/cri-client with its defaults, for the tests and
// benchmarks that stand in for the kubelet in front of pullguard serve or
// a runtime, and for the differential test of pkg/criruntime's NewRemote.
//
// It is for tests only: pullguard itself reaches a runtime through
// criruntime.NewRemote, because cri-client logs a failed call's error
// itself, and a runtime's error may carry what a registry echoed (a
// credential). docs/imports.txt keeps cri-client out of the pullguard
// binary. It depends on pkg/criruntime (ParseEndpoint) and cri-client.
package kubeletcri
