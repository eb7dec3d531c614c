// Package dockerauth decodes the "auth" field of a docker config entry and
// of a CRI AuthConfig: base64 of "username:password". It is the one decoder
// of that field in pullguard; two readers of the field exist in the wild,
// and they differ, so Decode takes the rule to follow:
//
//	                     Kubelet                       Containerd
//	who                  k8s.io/kubernetes             containerd's CRI plugin
//	                     credentialprovider            (internal/cri/server/images
//	                     decodeDockerConfigFieldAuth   ParseAuth)
//	padding "="          optional: a value whose       required (StdEncoding): an
//	                     trimmed end is "=" is         unpadded value whose length
//	                     decoded padded, any other     is not a multiple of 4 is
//	                     unpadded                      invalid
//	line breaks          skipped (encoding/base64)     skipped (encoding/base64)
//	other white space    invalid                       invalid
//	split                at the first colon; no colon is invalid (both)
//	password             as decoded                    NUL bytes trimmed at both
//	                                                   ends
//
// Where both accept a value, they give the same username, and passwords
// that differ only in NUL bytes at their ends. Neither can carry a username
// with a colon (HTTP Basic authentication cannot either, RFC 7617): the
// value is always split at its first colon, so base64("a:b:c") is the
// username "a" with the password "b:c", another account than the username
// "a:b" with the password "c".
//
// Which rule a caller follows is whose reading it must agree with:
// pkg/keyring decodes docker configs as the kubelet does; pkg/criruntime
// presents to a registry what containerd presents for a CRI AuthConfig;
// pkg/criproxy folds a CRI "auth" into username and password as the kubelet
// decodes it, since the username and password beside it came from the
// kubelet's decoding (or pullguard's keyring, which decodes alike).
package dockerauth

import (
	"encoding/base64"
	"errors"
	"strings"
)

// Rule is whose reading of the "auth" field Decode follows.
type Rule int

const (
	// Kubelet decodes as the kubelet's credentialprovider decodes a docker
	// config entry (decodeDockerConfigFieldAuth): padding optional, the
	// password kept as decoded.
	Kubelet Rule = iota
	// Containerd decodes as containerd's CRI plugin decodes a CRI
	// AuthConfig's auth (ParseAuth): padding required, NUL bytes trimmed
	// from both ends of the password.
	Containerd
)

// The errors of Decode. They never hold the value.
var (
	ErrNotBase64 = errors.New(`field "auth" is not valid base64`)
	ErrNoColon   = errors.New(`field "auth" does not decode to "username:password"`)
)

// Decode decodes field, base64 of "username:password", by rule. The
// username is what precedes the first colon. An error is ErrNotBase64 or
// ErrNoColon.
func Decode(field string, rule Rule) (username, password string, err error) {
	enc := base64.StdEncoding
	if rule == Kubelet && !strings.HasSuffix(strings.TrimSpace(field), "=") {
		// The kubelet decodes a value without trailing padding unpadded
		// (RawStdEncoding); a value of whole quanta decodes alike either
		// way.
		enc = base64.RawStdEncoding
	}
	decoded, err := enc.DecodeString(field)
	if err != nil {
		return "", "", ErrNotBase64
	}
	username, password, ok := strings.Cut(string(decoded), ":")
	if !ok {
		return "", "", ErrNoColon
	}
	if rule == Containerd {
		// containerd decodes into a buffer of DecodedLen bytes, whose
		// unused tail is NUL, and trims NUL from the password's ends.
		password = strings.Trim(password, "\x00")
	}
	return username, password, nil
}
