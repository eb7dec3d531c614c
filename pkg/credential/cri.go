package credential

import "github.com/pullguard/pullguard/internal/dockerauth"

// CRIAuth is a CRI AuthConfig (k8s.io/cri-api runtime/v1) as its generated
// getters give it; a nil *runtimeapi.AuthConfig gives empty fields. It is
// an interface so that this package imports no CRI.
type CRIAuth interface {
	GetUsername() string
	GetPassword() string
	GetAuth() string
	GetIdentityToken() string
	GetRegistryToken() string
}

// CRICredential is the credential a CRI PullImage's AuthConfig presents
// for an image of registry, as serve files it: its registry (the image's,
// whatever ServerAddress says: that is where the runtime presents it), its
// fields in canonical form (canonicalCRI) and their keyed hash. The zero
// Credential means an anonymous pull, and so does a nil auth. The Source is
// left empty: the CRI names no secret.
func CRICredential(h *Hasher, registry string, auth CRIAuth) Credential {
	a := canonicalCRI(auth)
	if a.Empty() {
		return Credential{}
	}
	return Credential{Registry: registry, Auth: a, Hash: h.Hash(registry, a)}
}

// canonicalCRI copies the credential fields of a CRI AuthConfig, with
// "auth" folded into username and password where it says the same, so
// that one registry account gives one hash however a client spells it,
// and the hash pkg/keyring gives the pull secret it came from.
//
// The kubelet sends a docker config entry's username and password, "auth"
// decoded and left out; pullguard's image manager sends what its keyring
// gives, the same; another client may send "auth" alone or beside the
// two. "auth" is decoded as the kubelet decodes it (dockerauth.Kubelet), as
// the username and password beside it were. It is dropped when it fills
// an empty username and password, or when it decodes to the username and
// password beside it; any other "auth" (not base64, no colon, another
// account) is kept as it is and hashed with the rest, so the credential
// is one of its own: never an account it does not name, at worst one more
// registry check.
//
// "auth" is split at its first colon, so it cannot carry a username with
// a colon (nor can HTTP Basic authentication, RFC 7617): beside such a
// username it names another account and is kept; alone it is the account
// the split gives, as the kubelet and containerd read it too.
func canonicalCRI(auth CRIAuth) AuthConfig {
	if auth == nil {
		return AuthConfig{}
	}
	a := AuthConfig{
		Username:      auth.GetUsername(),
		Password:      auth.GetPassword(),
		Auth:          auth.GetAuth(),
		IdentityToken: auth.GetIdentityToken(),
		RegistryToken: auth.GetRegistryToken(),
	}
	if a.Auth == "" {
		return a
	}
	user, pass, err := dockerauth.Decode(a.Auth, dockerauth.Kubelet)
	if err != nil {
		return a
	}
	switch {
	case a.Username == "" && a.Password == "":
		a.Username, a.Password, a.Auth = user, pass, ""
	case a.Username == user && a.Password == pass:
		a.Auth = ""
	}
	return a
}
