package keyring

// NodeReads returns how many times a CachedNodeKeyring has read its
// files.
func NodeReads(kr Keyring) int64 { return kr.(*cachedNode).reads.Load() }
