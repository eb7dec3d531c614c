// Package credential holds what every other pullguard package says about a
// registry credential: its fields (AuthConfig), where it came from (Source),
// its node-local keyed hash (Hash, computed by a Hasher), and the
// credential of a CRI AuthConfig in the canonical form that gives one
// account one hash (CRICredential).
//
// Every package that handles a credential imports it (pkg/keyring,
// pkg/credentialprovider, pkg/announce, credtracker, pkg/guardedpull,
// imagemanager, pkg/criproxy, pkg/podworkers, cmd/pullguard). It is a
// leaf, depending on x/crypto and internal/ packages only, so that the
// keyring, which finds credentials, and the credential tracker, which
// remembers them, agree on one type and one hash without the keyring
// depending on the tracker's store.
//
// CRICredential is here rather than in pkg/criproxy, serve's package, so
// that test/kubelet checks serve's hash of the AuthConfig the kubelet sends
// with serve's own code, without building serve's runtime client and its
// containerd dependencies against the kubelet's own module versions.
//
// Nothing in this package ever prints credential material: AuthConfig
// formats as a redacted placeholder, and a Hash formats as a short prefix.
package credential
