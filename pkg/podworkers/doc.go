// Package node plays the kubelet's part for images: it reads v1 Secret,
// ServiceAccount and Pod manifests and drives every pod's init containers,
// then containers, through the image manager, as the kubelet's pod workers
// do. The command line and the end-to-end suite share it.
package podworkers
