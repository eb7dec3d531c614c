// Package criruntime holds the CRI image services pullguard pulls through: a
// real container runtime's, over its CRI socket, and an embedded one.
//
// pkg/podworkers and cmd/pullguard open them, pkg/criproxy forwards to one,
// pkg/guardedpull pulls through them and scrubs their errors (RedactAuth),
// and imagemanager and pkg/criproxy read image names with ImageNames and
// NormalizeImage. It depends on cri-api, grpc, go-containerregistry,
// containerd's registry client (core/remotes/docker and its config package,
// for VerifyManifest), internal/dirlock, internal/leak and
// internal/boundedread, and on no other pullguard package
// (docs/imports.txt): the tracker's view of a runtime's images,
// guardedpull.Inventory, lives with its callers. It does not import
// k8s.io/cri-client, which logs a failed call's error; the kubelet's own
// client, for tests, is in internal/kubeletcri.
//
// Two implementations of k8s.io/cri-api's ImageManagerService are provided:
//
//   - NewRemote connects to a real container runtime (containerd, CRI-O) over
//     its CRI gRPC socket: cri-api's generated client with k8s.io/cri-client's
//     call semantics (the differential test TestRemoteMatchesCRIClient), on a
//     connection with static HTTP/2 windows, logging nothing of its own (a
//     runtime's error may carry what a registry echoed; callers redact it).
//     It adds endpoint validation and clear connection errors.
//   - NewEmbedded is an in-process image service that keeps images under a
//     state directory and pulls them with go-containerregistry. It behaves like
//     containerd where pullguard depends on it: a pull always resolves the
//     reference at the registry with the caller's credentials (so a re-pull of
//     a present image is one manifest request that the registry may refuse
//     with 401), blobs already in the content store are never downloaded
//     again, the image ID is the config digest, and RepoTags / RepoDigests are
//     normalized the way containerd and the kubelet print them.
//
// VerifyManifest checks, after a real runtime's pull, that the registry
// serves the manifest bytes the runtime resolved, reaching it as
// containerd does: through containerd's registry hosts configuration
// (hosts.toml mirrors, CAs, client certificates; WithRegistryConfigPath),
// read with containerd's own library.
//
// Every request either makes to a registry is bounded (bounds.go): in
// time (WithRegistryTimeout: each phase of a connection, and the whole of
// a verification or of a manifest fetch, or the caller's deadline if it
// comes first), in size (a manifest to
// containerd's MaxManifestSize, a blob to its size, a token or error body
// and an answer's header to 64 and 16 KiB) and in redirects. A registry
// that does not answer in time fails the call with ErrRegistryTimeout.
//
// Nothing in this package logs or returns credential material: registry
// errors are scrubbed of every field of the AuthConfig before they are
// returned.
package criruntime
