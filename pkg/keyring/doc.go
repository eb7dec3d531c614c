// Package keyring finds the registry credentials a pod can present for an
// image: its image pull secrets, the node's docker configuration and, via
// package credentialprovider, exec credential provider plugins. Every
// credential it returns carries its source and its keyed hash.
package keyring
