package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
)

// tenants is how many namespaces (each with its own pull secret) the
// records are spread over.
const tenants = 500

// hotSetSize is the number of images of the "hot set" workload.
const hotSetSize = 1024

// streamLen is the length of a request stream (a power of two); a
// measurement walks it from a random offset, wrapping around.
const streamLen = 1 << 20

// registry is the registry every image comes from.
const registry = "registry.example"

// repository is the i-th image's repository name (its name without tag).
func repository(i int) string {
	return fmt.Sprintf("%s/tenant-%d/app-%d", registry, i%tenants, i)
}

// image is the i-th image as a pod's container names it.
func image(i int) string { return repository(i) + ":v1" }

// imageRef is the runtime's image ID of the i-th image.
func imageRef(i int) string { return fmt.Sprintf("sha256:%064x", i+1) }

// secret is the pull secret of the i-th image's tenant: the same
// coordinates for both implementations.
type secret struct {
	namespace, name, uid string
	username, password   string
}

func secretOf(i int) secret {
	t := i % tenants
	return secret{
		namespace: fmt.Sprintf("tenant-%d", t),
		name:      "regcred",
		uid:       fmt.Sprintf("%08d-3d4a-4c5b-9e7f-0a1b2c3d4e5f", t),
		username:  fmt.Sprintf("tenant-%d", t),
		password:  fmt.Sprintf("password-of-tenant-%d", t),
	}
}

// upstreamHash is what the kubelet stores for a secret's credential: a
// SHA-256 of the auth config, hex-encoded (its keyring computes it; here
// it only needs to be the same string in the record and in the pod).
func (s secret) upstreamHash() string {
	h := sha256.Sum256([]byte(`{"username":"` + s.username + `","password":"` + s.password + `"}`))
	return hex.EncodeToString(h[:])
}

// stream is a sequence of record indices, the requests of one workload.
type stream []int32

// uniformStream draws streamLen indices uniformly from [0, n).
func uniformStream(rng *rand.Rand, n int) stream {
	s := make(stream, streamLen)
	for k := range s {
		s[k] = int32(rng.IntN(n))
	}
	return s
}

// hotStream picks min(hotSetSize, n) distinct records at random and draws
// streamLen indices uniformly among them.
func hotStream(rng *rand.Rand, n int) stream {
	hot := rng.Perm(n)[:min(hotSetSize, n)]
	s := make(stream, streamLen)
	for k := range s {
		s[k] = int32(hot[rng.IntN(len(hot))])
	}
	return s
}
