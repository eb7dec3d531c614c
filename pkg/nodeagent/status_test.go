package nodeagent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/pullguard/pullguard/pkg/nodeagent"
)

func TestReadStatus(t *testing.T) {
	tests := []struct {
		name    string
		data    *string
		want    nodeagent.Status
		wantErr string
	}{
		{name: "no file yet: starting, not ready", want: nodeagent.Status{Reason: nodeagent.ReasonStarting}},
		{name: "ready", data: ptr.To(`{"ready":true,"reason":"Installed","message":"installed"}`), want: nodeagent.Status{Ready: true, Reason: nodeagent.ReasonInstalled, Message: "installed"}},
		{name: "not JSON", data: ptr.To("ready\n"), wantErr: "not the agent's status"},
		{name: "larger than its bound", data: ptr.To(`{"message":"` + strings.Repeat("x", 70<<10) + `"}`), wantErr: "status file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "status")
			if tt.data != nil {
				require.NoError(t, os.WriteFile(p, []byte(*tt.data), 0o644))
			}
			s, err := nodeagent.ReadStatus(p)
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				assert.False(t, s.Ready, "an unreadable status is never ready")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want.Ready, s.Ready)
			assert.Equal(t, tt.want.Reason, s.Reason)
			if tt.want.Message != "" {
				assert.Equal(t, tt.want.Message, s.Message)
			}
		})
	}
}

// FuzzReadStatus: any status file is read without a panic, and what reads
// is written back the same.
func FuzzReadStatus(f *testing.F) {
	f.Add([]byte(`{"ready":true,"reason":"Installed","message":"installed"}`))
	f.Add([]byte(`{"ready":"yes"}`))
	f.Add([]byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		p := filepath.Join(dir, "status")
		require.NoError(t, os.WriteFile(p, data, 0o644))
		s, err := nodeagent.ReadStatus(p)
		if err != nil {
			assert.False(t, s.Ready)
			return
		}
		q := filepath.Join(dir, "again")
		require.NoError(t, nodeagent.WriteStatus(q, s))
		again, err := nodeagent.ReadStatus(q)
		require.NoError(t, err)
		assert.Equal(t, s, again)
	})
}
