package keyring

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/pkg/credential"
)

// RacyWindow is how recent a node config file's modification or change
// time may be, when CachedNodeKeyring reads it, for the read to count as
// unsure: file times have a coarse granularity, so a file written twice
// within one tick with the same size would otherwise look unchanged. Until
// the file is older than this when it is looked at, every look-up reads it
// again.
const RacyWindow = 2 * time.Second // as pkg/announce's: FAT and some network file systems keep 2 s

// CachedNodeKeyring returns the node docker config keyring (NodeKeyring
// of files) as pullguard serve keeps it: never older than the kubelet's.
// The kubelet reads the files when it starts and then every five minutes
// (its CachingDockerConfigProvider); an operator who writes config.json
// into the kubelet's root directory and restarts the kubelet has it used
// at once. So at every look-up CachedNodeKeyring looks at the files of the
// search order (os.Stat: existence, type, size, modification and change
// time, inode and device) up to the one it read, and reads them again
// when any of them changed: a file created, replaced (renamed over),
// edited in place, removed, or an earlier file of the search order that
// appeared. There is no timer. A file whose time was within RacyWindow of
// clk's time when it was looked at is read again at the next look-up too.
//
// onErr, when not nil, gets the error of a read that passed over a file
// (*ConfigFileError values, which never hold credential material): once
// per change of the files, and again only when the error differs. Lookup
// itself reports no error. h must not be nil; a nil clk is the real
// clock.
func CachedNodeKeyring(h *credential.Hasher, files []string, clk clock.PassiveClock, onErr func(error)) Keyring {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &cachedNode{hasher: h, files: files, clock: clk, onErr: onErr}
}

type cachedNode struct {
	hasher *credential.Hasher
	files  []string
	clock  clock.PassiveClock
	onErr  func(error)

	reads atomic.Int64 // for tests

	mu      sync.Mutex
	current *Static
	stamps  []fileStamp // of files[:len(stamps)], taken before current was read
	racy    bool
	lastErr string
}

var _ Keyring = (*cachedNode)(nil)

// Lookup implements Keyring.
func (c *cachedNode) Lookup(ctx context.Context, image string) ([]credential.Credential, error) {
	return c.keyring().Lookup(ctx, image)
}

// keyring returns the keyring of the files as they are now, reading them
// again when they changed. Reads are serialized; each is bounded by the
// size limit of a node config file.
func (c *cachedNode) keyring() *Static {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := c.current == nil
	for i := 0; !changed && i < len(c.stamps); i++ {
		changed = stampFile(c.files[i]) != c.stamps[i]
	}
	if !changed && !c.racy {
		return c.current
	}
	// The stamps are taken before the read: a change after them shows at
	// the next look-up.
	stamps := make([]fileStamp, len(c.files))
	for i, f := range c.files {
		stamps[i] = stampFile(f)
	}
	now := c.clock.Now()
	c.reads.Add(1)
	kr, used, err := readNode(c.hasher, c.files)
	if used < len(c.files) {
		stamps = stamps[:used+1] // files after the one used cannot change the result
	}
	c.racy = false
	for _, st := range stamps {
		if st.racy(now) {
			c.racy = true
		}
	}
	if err != nil && c.onErr != nil && (changed || err.Error() != c.lastErr) {
		c.onErr(err)
	}
	c.lastErr = ""
	if err != nil {
		c.lastErr = err.Error()
	}
	c.current, c.stamps = kr, stamps
	return kr
}

// fileStamp is what a look-up compares of a node config file. errno is
// the stat error's number (0 when the stat succeeded).
type fileStamp struct {
	errno        uintptr
	mode         uint32
	size         int64
	mtime, ctime int64 // nanoseconds since the epoch
	ino, dev     uint64
}

// racy reports whether the file's times are too close to now (or after
// it) to tell a later write of the same size apart.
func (s fileStamp) racy(now time.Time) bool {
	if s.errno != 0 {
		return false
	}
	t := max(s.mtime, s.ctime)
	return now.UnixNano()-t < int64(RacyWindow)
}
