package kubelet

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kcp "k8s.io/kubernetes/pkg/credentialprovider"
	kcpsecrets "k8s.io/kubernetes/pkg/credentialprovider/secrets"
	"k8s.io/kubernetes/pkg/util/parsers"

	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// One account, one hash, in every front end, against the kubelet's own
// decoding of a pull secret: in process, no root, no cluster.
//
// A case is an account (a username and a password, any bytes) and a
// spelling of it in a pull secret's docker config entry: username and
// password fields, or "auth" (padded or not, line breaks, non-zero
// trailing bits, beside other username and password fields, which it
// overrides, after a decoy "auth" it replaces), field names in any case,
// every character JSON-escaped, email and unknown fields, the legacy
// dockercfg type. The kubelet's side is its own code: the secret through
// credentialprovider/secrets.MakeDockerKeyring (DockerConfigEntry's
// UnmarshalJSON, BasicDockerKeyring.Add), looked up as its image manager
// looks up, and the CRI AuthConfig kuberuntime's PullImage builds from the
// credential found. pullguard's side: the keyring of the secret
// (keyring.FromSecrets), serve's hash of the AuthConfig the kubelet sends
// (credential.CRICredential), and of the one pullguard's image manager sends
// for the keyring's credential. All must be the kubelet's account with one
// hash, the same as the plain spelling of that account.
//
// identitytoken and registrytoken are not spelled: the kubelet drops them
// from a pull secret, pullguard's keyring keeps them (docs/keyring.md), so
// a secret that holds one is another credential to pullguard.

// spellingImage is the image every case looks up, and spellingKey the
// docker config key that matches it.
const (
	spellingImage = "registry.example:5000/team/app:v1"
	spellingKey   = "registry.example:5000"
)

// The bits of a spelling (a uint32): the low three choose the form, the
// next ones the variations, the high 16 a position for line breaks.
const (
	formFields      = iota // "username" and "password"
	formAuth               // "auth", padded
	formAuthRaw            // "auth", unpadded
	formAuthBeside         // "auth" beside other "username" and "password"
	formFieldsEmpty        // the fields beside an empty "auth"
	forms
)

const (
	spellLineBreaks   = 1 << (3 + iota) // "\r\n" inside "auth", "\n" after it
	spellTrailingBits                   // the unused bits of the last character set
	spellFieldCase                      // "Auth", "USERNAME", "Password"
	spellEscaped                        // every character of a value as \uXXXX
	spellExtraFields                    // "email" and an unknown field
	spellDecoy                          // an "AUTH" before the real "auth"
	spellDockercfg                      // a kubernetes.io/dockercfg secret
)

// spelled is one spelling of an account: the secret, and the "auth" value
// it holds as JSON decodes it ("" when it holds none).
type spelled struct {
	secret *corev1.Secret
	auth   string
}

func spell(user, pass string, spelling uint32) spelled {
	form := (spelling & 7) % forms
	name := func(n string) string {
		if spelling&spellFieldCase == 0 {
			return n
		}
		return map[string]string{"auth": "Auth", "username": "USERNAME", "password": "Password", "email": "EMAIL"}[n]
	}
	value := func(s string) string {
		if spelling&spellEscaped != 0 {
			return escapeJSON(s)
		}
		v, _ := json.Marshal(s)
		return string(v)
	}
	var fields []string
	field := func(n, v string) { fields = append(fields, value(name(n))+":"+value(v)) }
	var auth string
	switch form {
	case formFields:
		field("username", user)
		field("password", pass)
	case formFieldsEmpty:
		field("username", user)
		field("password", pass)
		field("auth", "")
	default:
		enc := base64.StdEncoding
		if form == formAuthRaw {
			enc = base64.RawStdEncoding
		}
		auth = enc.EncodeToString([]byte(user + ":" + pass))
		if spelling&spellTrailingBits != 0 {
			auth = setTrailingBits(auth)
		}
		if spelling&spellLineBreaks != 0 {
			at := int(spelling>>16) % (len(auth) + 1)
			auth = auth[:at] + "\r\n" + auth[at:] + "\n"
		}
		if form == formAuthBeside {
			field("username", "other-"+user)
			field("password", "other-"+pass)
		}
		if spelling&spellDecoy != 0 {
			fields = append(fields, value("AUTH")+":"+value("!!not base64"))
		}
		field("auth", auth)
	}
	if spelling&spellExtraFields != 0 {
		field("email", "someone@example.test")
		fields = append(fields, `"unknown":{"a":[1,null]}`)
	}
	entries := `{` + value(spellingKey) + `:{` + strings.Join(fields, ",") + `}}`
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "pull", UID: "uid-pull"}}
	if spelling&spellDockercfg != 0 {
		secret.Type = corev1.SecretTypeDockercfg
		secret.Data = map[string][]byte{corev1.DockerConfigKey: []byte(entries)}
	} else {
		secret.Type = corev1.SecretTypeDockerConfigJson
		secret.Data = map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":` + entries + `}`)}
	}
	return spelled{secret: secret, auth: auth}
}

// setTrailingBits sets the bits of the last base64 character that carry
// no data (there are some when the data is not whole 3-byte groups): the
// value decodes alike, as Go's non-strict decoding reads it.
func setTrailingBits(s string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	data := strings.TrimRight(s, "=")
	var unused uint
	switch len(data) % 4 {
	case 2:
		unused = 4
	case 3:
		unused = 2
	default:
		return s
	}
	last := strings.IndexByte(alphabet, data[len(data)-1])
	return data[:len(data)-1] + string(alphabet[last|(1<<unused-1)]) + s[len(data):]
}

// escapeJSON writes s as a JSON string with every character escaped
// (\uXXXX, surrogate pairs above the BMP); a string that is not UTF-8 is
// left to encoding/json.
func escapeJSON(s string) string {
	if !utf8.ValidString(s) {
		v, _ := json.Marshal(s)
		return string(v)
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&b, `\u%04x`, u)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// kubeletCredential is what the kubelet finds in s for spellingImage, and
// the CRI AuthConfig it sends for it. ok is false when the kubelet refuses
// the secret.
func kubeletCredential(t testing.TB, s *corev1.Secret) (found kcp.TrackedAuthConfig, sent *runtimeapi.AuthConfig, ok bool) {
	kr, err := kcpsecrets.MakeDockerKeyring([]corev1.Secret{*s}, &kcp.BasicDockerKeyring{})
	if err != nil {
		return kcp.TrackedAuthConfig{}, nil, false
	}
	repoToPull, _, _, err := parsers.ParseImageName(spellingImage)
	require.NoError(t, err)
	creds, _ := kr.Lookup(repoToPull)
	require.Len(t, creds, 1, "the kubelet finds the secret's entry")
	c := creds[0]
	// kuberuntime's PullImage (kuberuntime_image.go), field for field.
	sent = &runtimeapi.AuthConfig{
		Username:      c.Username,
		Password:      c.Password,
		Auth:          c.Auth,
		ServerAddress: c.ServerAddress,
		IdentityToken: c.IdentityToken,
		RegistryToken: c.RegistryToken,
	}
	return c, sent, true
}

// pullguardCredential is the credential pullguard's keyring finds in s
// for spellingImage; ok is false when it refuses the secret.
func pullguardCredential(t testing.TB, h *credential.Hasher, s *corev1.Secret) (credential.Credential, bool) {
	kr, errs := keyring.FromSecrets(h, []*corev1.Secret{s})
	if len(errs) > 0 {
		return credential.Credential{}, false
	}
	creds, err := kr.Lookup(context.Background(), spellingImage)
	require.NoError(t, err)
	require.Len(t, creds, 1, "pullguard finds the secret's entry")
	return creds[0], true
}

// spellingKind is what a checked spelling exercised.
type spellingKind struct {
	auth      bool // spelled in "auth"
	split     bool // a username with a colon, split by "auth"
	anonymous bool // an empty account
}

// checkSpelling checks one spelling of the account user, pass.
func checkSpelling(t *testing.T, h *credential.Hasher, user, pass string, spelling uint32) (kind spellingKind) {
	t.Helper()
	sp := spell(user, pass, spelling)
	kc, sent, kok := kubeletCredential(t, sp.secret)
	pc, pok := pullguardCredential(t, h, sp.secret)
	require.Equal(t, kok, pok, "spelling %#x: the kubelet accepts the secret: %v, pullguard: %v", spelling, kok, pok)
	if !kok {
		// Every spelling is a valid entry (a decoy "auth" is replaced by
		// the later one, as encoding/json replaces a repeated field).
		assert.Fail(t, "a spelling of an account was refused by both", "spelling %#x", spelling)
		return kind
	}
	kind.auth = sp.auth != ""
	kind.split = kind.auth && strings.Contains(user, ":")

	// The generator spelled the account; a username with a colon cannot
	// be spelled in "auth", which splits at the first colon.
	wantUser, wantPass := user, pass
	if sp.auth != "" {
		wantUser, wantPass, _ = strings.Cut(user+":"+pass, ":")
	}
	if sp.auth != "" || (utf8.ValidString(user) && utf8.ValidString(pass)) {
		assert.True(t, kc.Username == wantUser && kc.Password == wantPass, "spelling %#x: the kubelet reads another account than spelled (values withheld)", spelling)
	}

	// The keyring's credential is the kubelet's, field for field.
	want := credential.AuthConfig{Username: kc.Username, Password: kc.Password, Auth: kc.Auth, IdentityToken: kc.IdentityToken, RegistryToken: kc.RegistryToken}
	assert.True(t, want == pc.Auth, "spelling %#x: pullguard's keyring gives another credential than the kubelet's (values withheld)", spelling)

	registry := keyringRegistry(t)
	served := credential.CRICredential(h, registry, sent)
	imageManager := credential.CRICredential(h, registry, &runtimeapi.AuthConfig{
		Username: pc.Auth.Username, Password: pc.Auth.Password, Auth: pc.Auth.Auth,
		IdentityToken: pc.Auth.IdentityToken, RegistryToken: pc.Auth.RegistryToken,
	})
	if want.Empty() {
		assert.True(t, pc.Anonymous() && served.Anonymous() && imageManager.Anonymous(), "spelling %#x: an empty account is an anonymous pull everywhere", spelling)
		kind.anonymous = true
		return kind
	}
	assert.Equal(t, pc.Hash, served.Hash, "spelling %#x: serve hashes the kubelet's AuthConfig otherwise than the keyring", spelling)
	assert.Equal(t, pc.Hash, imageManager.Hash, "spelling %#x: serve hashes the image manager's AuthConfig otherwise than the keyring", spelling)
	account := credential.AuthConfig{Username: kc.Username, Password: kc.Password}
	assert.Equal(t, h.Hash(registry, account), pc.Hash, "spelling %#x: the account hashes otherwise than its username and password", spelling)
	if utf8.ValidString(kc.Username) && utf8.ValidString(kc.Password) {
		// (JSON strings carry UTF-8 only.)
		plain, ok := pullguardCredential(t, h, spell(kc.Username, kc.Password, formFields).secret)
		require.True(t, ok)
		assert.Equal(t, plain.Hash, pc.Hash, "spelling %#x: the account hashes otherwise than spelled as username and password", spelling)
	}
	if sp.auth != "" {
		// Another CRI client's spellings of the same "auth": alone, and
		// beside the username and password it decodes to.
		alone := credential.CRICredential(h, registry, &runtimeapi.AuthConfig{Auth: sp.auth})
		beside := credential.CRICredential(h, registry, &runtimeapi.AuthConfig{Username: kc.Username, Password: kc.Password, Auth: sp.auth})
		assert.Equal(t, pc.Hash, alone.Hash, "spelling %#x: auth alone", spelling)
		assert.Equal(t, pc.Hash, beside.Hash, "spelling %#x: auth beside its fields", spelling)
	}
	return kind
}

func keyringRegistry(t testing.TB) string {
	im, err := keyring.ParseImage(spellingImage)
	require.NoError(t, err)
	return im.Registry
}

// spellingAccounts is account material: empty parts, colons, padding
// characters, NUL, line breaks, quotes and escapes, non-ASCII, bytes that
// are not UTF-8, and lengths of each remainder modulo 3.
var spellingAccounts = []string{
	"", "alice", "a", "ab", "abc", "pw-s3cret-Qz8", ":", "a:b", "::", "=", "==", "p=", "\x00", "pw\x00\x00", "\x00pw",
	"line\nbreak", "\r\n", `"quoted"`, `back\slash`, "<html>&", "ünï", "日本", "🔑", "\xff\xfe", "\u2028", " space ", "\t",
	"+/", "dGVzdA==", strings.Repeat("x", 100),
}

// TestKubeletCredentialSpellings checks generated accounts in every
// spelling (a fixed seed, so a failure repeats).
func TestKubeletCredentialSpellings(t *testing.T) {
	quietKubeletLog(t)
	h, err := credential.NewHasher(bytes.Repeat([]byte{5}, credential.KeySize))
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(36, 2535))
	part := func() string {
		if r.IntN(5) == 0 {
			return ""
		}
		s := spellingAccounts[r.IntN(len(spellingAccounts))]
		if r.IntN(3) == 0 {
			s += spellingAccounts[r.IntN(len(spellingAccounts))]
		}
		return s
	}
	const cases = 3000
	var auth, split, anonymous int
	for n := range cases {
		user, pass := part(), part()
		spelling := uint32(n%forms) | r.Uint32()&^7
		kind := checkSpelling(t, h, user, pass, spelling)
		if t.Failed() {
			t.Fatalf("case %d failed", n)
		}
		auth += b2i(kind.auth)
		split += b2i(kind.split)
		anonymous += b2i(kind.anonymous)
	}
	t.Logf("%d spellings: %d in auth, %d of them of a username with a colon; %d empty accounts", cases, auth, split, anonymous)
	assert.Greater(t, auth, cases/2, "the generator spells in auth often")
	assert.Greater(t, split, cases/50, "the generator spells usernames with a colon")
	assert.Greater(t, anonymous, cases/100, "the generator spells empty accounts")
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// FuzzKubeletCredentialSpellings checks fuzzed accounts in fuzzed
// spellings.
func FuzzKubeletCredentialSpellings(f *testing.F) {
	for i, a := range spellingAccounts {
		f.Add(a, spellingAccounts[(i*7+3)%len(spellingAccounts)], uint32(i%forms)|uint32(i)<<3|uint32(i*13)<<16)
	}
	f.Add(":", "0", uint32(formAuth))
	f.Add("a:b", "c", uint32(formAuthBeside|spellDecoy|spellEscaped))
	f.Add("", "", uint32(formAuthRaw|spellLineBreaks|spellTrailingBits))
	h, err := credential.NewHasher(bytes.Repeat([]byte{5}, credential.KeySize))
	require.NoError(f, err)
	quietKubeletLog(f)
	f.Fuzz(func(t *testing.T, user, pass string, spelling uint32) {
		checkSpelling(t, h, user, pass, spelling)
	})
}
