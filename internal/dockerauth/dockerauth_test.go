package dockerauth_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/dockerauth"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func raw64(s string) string { return base64.RawStdEncoding.EncodeToString([]byte(s)) }

// result is one rule's reading of a value: its username and password, or
// its error.
type result struct {
	user, pass string
	err        error
}

// TestDecode shows each rule on the spellings where the kubelet and
// containerd agree and where they differ.
func TestDecode(t *testing.T) {
	tests := []struct {
		name       string
		field      string
		kubelet    result
		containerd result
	}{
		{name: "padded", field: b64("alice:pw"), kubelet: result{user: "alice", pass: "pw"}, containerd: result{user: "alice", pass: "pw"}},
		{name: "whole quanta, no padding needed", field: b64("u:p"), kubelet: result{user: "u", pass: "p"}, containerd: result{user: "u", pass: "p"}},
		{name: "unpadded", field: raw64("alice:pw"), kubelet: result{user: "alice", pass: "pw"}, containerd: result{err: dockerauth.ErrNotBase64}},
		{name: "line breaks inside and after", field: b64("alice:pw")[:4] + "\r\n" + b64("alice:pw")[4:] + "\n", kubelet: result{user: "alice", pass: "pw"}, containerd: result{user: "alice", pass: "pw"}},
		{name: "line break after an unpadded value", field: raw64("alice:pw") + "\n", kubelet: result{user: "alice", pass: "pw"}, containerd: result{err: dockerauth.ErrNotBase64}},
		{name: "a space around it", field: " " + b64("alice:pw"), kubelet: result{err: dockerauth.ErrNotBase64}, containerd: result{err: dockerauth.ErrNotBase64}},
		{name: "a tab after the padding", field: b64("alice:pw") + "\t", kubelet: result{err: dockerauth.ErrNotBase64}, containerd: result{err: dockerauth.ErrNotBase64}},
		{name: "short padding", field: strings.TrimSuffix(b64("u:pq"), "="), kubelet: result{err: dockerauth.ErrNotBase64}, containerd: result{err: dockerauth.ErrNotBase64}},
		{name: "padding inside", field: b64("u:") + b64("u:"), kubelet: result{err: dockerauth.ErrNotBase64}, containerd: result{err: dockerauth.ErrNotBase64}},
		{name: "non-zero trailing bits", field: "dTpwcR==", kubelet: result{user: "u", pass: "pq"}, containerd: result{user: "u", pass: "pq"}},
		{name: "standard alphabet", field: b64("u:p\xfb\xff"), kubelet: result{user: "u", pass: "p\xfb\xff"}, containerd: result{user: "u", pass: "p\xfb\xff"}},
		{name: "URL alphabet spelled", field: strings.NewReplacer("+", "-", "/", "_").Replace(b64("u:p\xfb\xff")), kubelet: result{err: dockerauth.ErrNotBase64}, containerd: result{err: dockerauth.ErrNotBase64}},
		{name: "NUL around the password", field: b64("alice:\x00pw\x00\x00"), kubelet: result{user: "alice", pass: "\x00pw\x00\x00"}, containerd: result{user: "alice", pass: "pw"}},
		{name: "NUL around the username", field: b64("\x00alice\x00:pw"), kubelet: result{user: "\x00alice\x00", pass: "pw"}, containerd: result{user: "\x00alice\x00", pass: "pw"}},
		{name: "split at the first colon", field: b64("a:b:c"), kubelet: result{user: "a", pass: "b:c"}, containerd: result{user: "a", pass: "b:c"}},
		{name: "empty username and password", field: b64(":"), kubelet: result{}, containerd: result{}},
		{name: "no colon", field: b64("alice"), kubelet: result{err: dockerauth.ErrNoColon}, containerd: result{err: dockerauth.ErrNoColon}},
		{name: "empty", field: "", kubelet: result{err: dockerauth.ErrNoColon}, containerd: result{err: dockerauth.ErrNoColon}},
		{name: "not base64", field: "%%%", kubelet: result{err: dockerauth.ErrNotBase64}, containerd: result{err: dockerauth.ErrNotBase64}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []struct {
				rule dockerauth.Rule
				want result
			}{{dockerauth.Kubelet, tc.kubelet}, {dockerauth.Containerd, tc.containerd}} {
				user, pass, err := dockerauth.Decode(tc.field, r.rule)
				if r.want.err != nil {
					assert.ErrorIs(t, err, r.want.err, "rule %d", r.rule)
					assert.Empty(t, user+pass, "rule %d: nothing decoded on an error", r.rule)
					continue
				}
				require.NoError(t, err, "rule %d", r.rule)
				assert.Equal(t, r.want.user, user, "rule %d", r.rule)
				assert.Equal(t, r.want.pass, pass, "rule %d", r.rule)
			}
		})
	}
}

// FuzzDecode feeds arbitrary values, and the spellings of an arbitrary
// account: never a panic; an error is one of the two; what containerd
// accepts the kubelet accepts as the same account up to NUL bytes at the
// password's ends; the kubelet accepts more only for values of partial
// quanta; and every spelling of an account whose username has no colon
// decodes to it (one with a colon decodes at the first colon).
func FuzzDecode(f *testing.F) {
	f.Add(b64("alice:pw"), "alice", "pw")
	f.Add(raw64("alice:pw")+"\n", "a:b", "c")
	f.Add("dTpwcR==", "", "\x00pw\x00")
	f.Add(" YQ==", "u", "")
	f.Fuzz(func(t *testing.T, field, user, pass string) {
		ku, kp, kerr := dockerauth.Decode(field, dockerauth.Kubelet)
		cu, cp, cerr := dockerauth.Decode(field, dockerauth.Containerd)
		for _, err := range []error{kerr, cerr} {
			if err != nil && err != dockerauth.ErrNotBase64 && err != dockerauth.ErrNoColon {
				t.Fatalf("an error of neither kind: %v", err)
			}
		}
		if cerr == nil {
			require.NoError(t, kerr, "containerd accepts what the kubelet refuses")
			assert.Equal(t, cu, ku)
			assert.Equal(t, cp, strings.Trim(kp, "\x00"))
		}
		if kerr == nil && cerr != nil {
			quanta := strings.NewReplacer("\r", "", "\n", "").Replace(field)
			assert.NotZero(t, len(quanta)%4, "the kubelet accepts a value of whole quanta that containerd refuses")
		}

		wantUser, wantPass, _ := strings.Cut(user+":"+pass, ":")
		for _, spelled := range []string{b64(user + ":" + pass), raw64(user + ":" + pass)} {
			u, p, err := dockerauth.Decode(spelled, dockerauth.Kubelet)
			require.NoError(t, err)
			assert.Equal(t, wantUser, u)
			assert.Equal(t, wantPass, p)
			if !strings.Contains(user, ":") {
				assert.Equal(t, user, u, "a username without a colon is carried")
				assert.Equal(t, pass, p)
			}
		}
		u, p, err := dockerauth.Decode(b64(user+":"+pass), dockerauth.Containerd)
		require.NoError(t, err)
		assert.Equal(t, wantUser, u)
		assert.Equal(t, strings.Trim(wantPass, "\x00"), p)
	})
}
