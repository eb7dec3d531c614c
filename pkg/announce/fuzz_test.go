package announce_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/announce"
	"github.com/pullguard/pullguard/pkg/credential"
)

// FuzzDecode: no input read from the directory makes Decode panic or hang,
// and whatever it accepts encodes to a form it decodes to the same value.
func FuzzDecode(f *testing.F) {
	valid, err := announce.Encode(announce.Announcement{
		Provider: "ecr-credential-provider", Image: ecrA + "/team/app", Scope: announce.ScopeRegistry,
		MatchImages: []string{ecrGlob}, ExpiresAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		Credentials: []announce.Credential{{Pattern: ecrGlob, Hash: credential.Hash{1, 2, 3}}},
	})
	require.NoError(f, err)
	f.Add(valid)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"apiVersion":"announce.pullguard.io/v1","kind":"NodeCredentialAnnouncement"} {}`))
	f.Add([]byte(`{"apiVersion":"announce.pullguard.io/v1","kind":"NodeCredentialAnnouncement","provider":"p","image":"a/b","scope":"Global","expiresAt":"2026-01-01T00:00:00Z","credentials":[{"pattern":"*.example","hash":"zz"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := announce.Decode(data)
		if err != nil {
			if len(data) >= 8 {
				assert.NotContains(t, err.Error(), string(data), "the error quotes the input")
			}
			return
		}
		again, err := announce.Encode(*a)
		require.NoError(t, err)
		b, err := announce.Decode(again)
		require.NoError(t, err)
		assert.True(t, a.ExpiresAt.Equal(b.ExpiresAt))
		a.ExpiresAt, b.ExpiresAt = time.Time{}, time.Time{}
		assert.Equal(t, a, b)
	})
}
