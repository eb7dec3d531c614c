// Package announce holds the channel through which `pullguard
// credential-provider` tells `pullguard serve` which credentials the
// node's credential provider plugins handed the kubelet: announcements,
// one file each, in a directory only root may write under serve's root
// directory (<root-dir>/node-credentials).
//
// A plugin that mints a token per call (ECR's) gives the kubelet a
// credential serve never saw when it ran the plugin itself. When the
// kubelet's CredentialProviderConfig runs the plugin through the wrapper,
// the wrapper writes what the plugin answered (Writer.Write): the keyed
// hash of each credential, never the credential, with the image pattern
// it was answered for, the provider's matchImages, the cache key the
// kubelet files the answer under (Image, Registry or Global) and until
// when it counts. serve asks Board.Source, in a pull, whether the pull's
// credential is one of them for the pulled image: then the image is
// recorded as pulled with a node credential, as the kubelet records it.
//
// The hashes are Hasher.HashAuth (bound to no registry: a pattern may be
// a glob) under a key of the directory's own (<dir>/key, created by the
// first writer, never replaced), so that the channel works before serve's
// first start and whatever serve's record store does with its own key.
//
// Trust: only root may announce. The Board refuses (and logs, once per
// problem) a directory, key or announcement that is not owned by root (or
// by serve's own user), that others may write (the key: read), that is a
// symbolic link or not a regular file, or that does not decode strictly;
// refused or expired announcements count for nothing. Reading is bounded
// (DefaultMaxEntries files of at most MaxFileSize bytes, MaxCredentials
// credentials each) and happens only when the directory changed: a pull
// otherwise costs one lstat and a map look-up.
//
// pkg/criproxy asks a Board (criproxy.WithAnnouncedCredentials) and
// cmd/pullguard writes with a Writer; it depends on pkg/credential,
// pkg/keyring, internal/boundedread, internal/safedecode, klog and
// component-base metrics.
package announce
