// Package criproxy holds `pullguard serve`'s CRI image service: a
// runtime.v1.ImageService between a real kubelet and its container runtime
// that applies the credential tracker's rules.
//
// cmd/pullguard serves it, and bench/serve files records as it does
// (SourceNamePrefix); it depends on credtracker (the decision),
// pkg/guardedpull (the pull, and the tracker's view of the backend's
// images), pkg/criruntime (the backend, image names), pkg/keyring (image
// name parsing, the node's keyring), pkg/credential, internal/boundedread,
// cri-api and grpc. It is a sibling of imagemanager and never imports it,
// nor anything above it (docs/imports.txt).
//
// A Server serves runtime.v1.ImageService and forwards every call to a
// backend image service (the node's container runtime, through
// criruntime.NewRemote, which has k8s.io/cri-client's call semantics and
// logs nothing, or pullguard's embedded runtime). It sits beside the
// image manager in the package graph and applies the same rules, those of
// the credential tracker (credtracker), with what the CRI carries:
//
//   - ImageStatus carries no credential. A pod's presence check carries
//     the pod (the kubelet copies the pod's annotations, among them
//     kubernetes.io/config.source and kubernetes.io/config.seen, which it
//     sets itself, into every call it makes for the pod's image): an
//     image that some pod could not use without credentials (pulled by
//     this node under the asked name with a credential that is not
//     node-wide, of unknown origin, or needing verification under the
//     policy) is reported absent, unless this pod's own pull of it proved
//     a credential the records still grant. The kubelet then calls
//     PullImage with each of the pod's credentials, as for an absent
//     image. Images free to every pod (node-accessible, or preloaded under
//     the policy) are reported as they are, and so is every image to a
//     bare look-up (the container's user) once the kubelet is seen to
//     annotate its presence checks (podcalls.go).
//   - PullImage carries the pod (sandbox_config.metadata) and one
//     credential (auth). A credential whose keyed hash already pulled the
//     image under the asked name gets the image's ref with no registry
//     contact when the pod's own presence check asked just before (the
//     IfNotPresent path); anything else is forwarded through the guarded pull of
//     package guardedpull (the image manager's): a durable pull intent, the
//     backend's pull, its verification, and the record. A credential that
//     is the node's own for the image (WithNodeKeyring: the node's docker
//     config and its credential providers without service account
//     tokens) is recorded as the node's, node-accessible, as the kubelet
//     records it; any other as a secret entry of the pod's namespace.
//   - RemoveImage prunes the records of images that are gone.
//   - ListImages, ImageFsInfo and StreamImages pass through.
//
// Errors of the backend keep their gRPC code; a backend that cannot be
// reached gives Unavailable (the gRPC client reconnects by itself);
// malformed requests give InvalidArgument. No credential is ever logged or
// returned.
package criproxy
