package announce_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/announce"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// BenchmarkSource is the look-up a pull makes when the directory did not
// change: a full directory (DefaultMaxEntries announcements), a credential
// that is announced, and one that is not (a tenant's secret).
func BenchmarkSource(b *testing.B) {
	dir := filepath.Join(b.TempDir(), announce.Dir)
	w, err := announce.NewWriter(dir)
	require.NoError(b, err)
	for i := 0; i < announce.DefaultMaxEntries; i++ {
		a := ecrAnswer(announce.ScopeRegistry, time.Hour)
		a.Auth = map[string]credential.AuthConfig{ecrGlob: token(fmt.Sprintf("token-%04d", i))}
		require.NoError(b, w.Write(a))
	}
	board := announce.NewBoard(dir, announce.WithFSNow(func() time.Time { return time.Now().Add(time.Hour) }))
	im, err := keyring.ParseImage(ecrA + "/team/app:v1")
	require.NoError(b, err)
	for _, tc := range []struct {
		name string
		auth credential.AuthConfig
		want bool
	}{
		{name: "announced", auth: token("token-0042"), want: true},
		{name: "not announced", auth: token("a-tenant-secret"), want: false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, ok := board.Source(im, tc.auth); ok != tc.want {
					b.Fatalf("Source = %v", ok)
				}
			}
		})
	}
}
