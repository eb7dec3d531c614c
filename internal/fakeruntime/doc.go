// Package fakeruntime holds the fake container runtimes of the front ends'
// tests: CRI image services (k8s.io/cri-api's ImageManagerService, what
// pkg/guardedpull pulls through) that keep their images as containerd
// does, each once under its ID and found by its ID or by any spelling of
// any of its names (Images).
//
//   - Runtime pulls from a model registry (Serve, AddUser), with hooks
//     for the moments a pull can fail or wait (Hold, StoreFirst); the
//     image manager's tests and internal/pulltest's pull cases use it.
//   - ClaimTrusting resolves a reference as containerd 1.6 does, by
//     trusting the digest a real registry's HEAD claims; the hostile
//     suites of both front ends use it.
//
// Only tests import it (imagemanager's, pkg/criproxy's, internal/pulltest);
// it depends on cri-api, pkg/imageref (containerd's grammar) and
// go-containerregistry (ClaimTrusting's HEAD).
package fakeruntime
