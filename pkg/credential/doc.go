// Package credential holds what every other pullguard package says about a
// registry credential: its fields (AuthConfig), where it came from (Source),
// and its node-local keyed hash (Hash, computed by a Hasher).
//
// Every package that handles a credential imports it (pkg/keyring,
// pkg/credentialprovider, pkg/announce, credtracker, pkg/guardedpull,
// imagemanager, pkg/criproxy, pkg/podworkers, cmd/pullguard). It is a leaf, depending on
// x/crypto only, so that the keyring, which finds credentials, and the
// credential tracker, which remembers them, agree on one type and one hash
// without the keyring depending on the tracker's store.
//
// Nothing in this package ever prints credential material: AuthConfig
// formats as a redacted placeholder, and a Hash formats as a short prefix.
package credential
