package criproxy

import (
	"encoding/base64"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/pullguard/pullguard/pkg/credential"
)

// criCredential turns the credential of a CRI PullImage into the form the
// tracker compares: its registry (the image's, whatever ServerAddress says:
// that is where the runtime presents it), its fields and its keyed hash.
// The zero Credential means an anonymous pull.
//
// The fields are canonicalized first, so that one registry account gives
// one hash however a client spells it: the kubelet sends a docker config
// entry's "auth" decoded into username and password, pullguard's own
// image manager sends both. An "auth" that is base64 of the username and
// password beside it (or that fills them when they are empty) is dropped;
// any other "auth" is kept as it is, so it still counts.
//
// The Source is left empty: the CRI names no secret, so a credential can
// only match a record by its hash, never by coordinates.
func criCredential(h *credential.Hasher, registry string, auth *runtimeapi.AuthConfig) credential.Credential {
	a := canonicalAuth(auth)
	if a.Empty() {
		return credential.Credential{}
	}
	return credential.Credential{Registry: registry, Auth: a, Hash: h.Hash(registry, a)}
}

// canonicalAuth copies the credential fields of a CRI AuthConfig, with
// "auth" folded into username and password where it says the same.
func canonicalAuth(auth *runtimeapi.AuthConfig) credential.AuthConfig {
	if auth == nil {
		return credential.AuthConfig{}
	}
	a := credential.AuthConfig{
		Username:      auth.GetUsername(),
		Password:      auth.GetPassword(),
		Auth:          auth.GetAuth(),
		IdentityToken: auth.GetIdentityToken(),
		RegistryToken: auth.GetRegistryToken(),
	}
	if a.Auth == "" {
		return a
	}
	user, pass, ok := decodeAuth(a.Auth)
	if !ok {
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

// decodeAuth decodes a docker config "auth" value: base64 (padded or not)
// of "username:password", split at the first colon.
func decodeAuth(s string) (user, pass string, ok bool) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		raw, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
		if err != nil {
			return "", "", false
		}
	}
	user, pass, ok = strings.Cut(string(raw), ":")
	return user, pass, ok
}

// recordSource is what a credential that pulled through the CRI is filed
// under. The CRI gives the pod's namespace, name and uid but no secret
// coordinates, so the entry is a secret entry (never node-wide) in the
// pod's namespace, named by the hash's printed prefix: pods of a namespace
// that present the same credential share one entry, `pullguard records`
// shows where it came from, and deleting the namespace can forget it. It
// is matched by hash only: the proxy never presents coordinates.
func recordSource(namespace string, h credential.Hash) credential.Source {
	if len(validation.IsDNS1123Label(namespace)) > 0 {
		// No pod, or not a namespace the kubelet would send.
		namespace = NoNamespace
	}
	return credential.Source{Kind: credential.SourceSecret, Namespace: namespace, Name: SourceNamePrefix + h.String()}
}

// The names recordSource files CRI credentials under.
const (
	// SourceNamePrefix starts the name of every secret entry the proxy
	// records; the rest is the credential hash's 12-hex-digit prefix.
	SourceNamePrefix = "cri-auth-"
	// NoNamespace is the namespace of an entry recorded from a PullImage
	// without pod metadata (crictl pull without --pod-config).
	NoNamespace = "_no-pod"
)
