package criproxy

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestWindowKeepsNoHugeStatus: a tenant can give one image thousands of
// names (its registry serves one manifest under many tags, its pods pull
// them all), and every pod's presence check of any of them opens a window
// of its own. A window must not keep a copy of such a name list (10 000
// windows of 20 000 names would be gigabytes); the pull that follows asks
// the runtime again instead.
func TestWindowKeepsNoHugeStatus(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		names    int
		wantKept bool
	}{
		{names: 2, wantKept: true},
		{names: maxKeptNames, wantKept: true},
		{names: maxKeptNames + 1, wantKept: false},
		{names: 20000, wantKept: false},
	} {
		t.Run(fmt.Sprint(tc.names), func(t *testing.T) {
			p := newPodCalls(DefaultAnswerWindow)
			names := make([]string, tc.names)
			for i := range names {
				names[i] = fmt.Sprintf("reg.example.com/t/app:v%d", i)
			}
			p.hid("reg.example.com/t/app:v0", "pod", now, "sha256:1", names)
			ok, id, kept := p.take("reg.example.com/t/app:v0", "pod", now)
			assert.True(t, ok, "the window is open either way")
			if tc.wantKept {
				assert.Equal(t, "sha256:1", id)
				assert.Len(t, kept, tc.names)
			} else {
				assert.Empty(t, id, "no status kept: the pull asks the runtime")
				assert.Nil(t, kept)
			}
		})
	}
}

// TestFinestClockStep: the measure serve takes of the wall clock at its
// start is a positive duration (on this machine's nanosecond clock, tens
// of nanoseconds; on a jiffies clock, a tick).
func TestFinestClockStep(t *testing.T) {
	step := finestClockStep()
	assert.Positive(t, step)
	assert.Less(t, step, time.Second)
}
