package announce

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/internal/boundedread"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// racyWindow: a directory changed less than this before it was read may
// change again within the same timestamp tick (a second on some file
// systems, a few milliseconds on ext4), which its stamp would not show,
// so it is read again at the next look-up until it is older.
const racyWindow = 2 * time.Second

// Board is serve's view of the announcements in a directory: which
// credentials the node's wrapped plugins handed the kubelet. It is safe
// for concurrent use. A look-up reads the directory again only when it
// changed (its inode, owner, mode, size or modification time), so a pull
// costs one lstat, a keyed hash and a map look-up; it never fails (a
// directory it cannot read, or must refuse, announces nothing).
type Board struct {
	dir        string
	clock      clock.PassiveClock
	logger     klog.Logger
	owners     []uint32
	maxEntries int
	// fsNow is the wall clock file times are compared with (racyWindow).
	fsNow func() time.Time

	mu       sync.Mutex // one reload at a time
	snap     atomic.Pointer[snapshot]
	problems map[string]string // the last reload's, logged once each
	loads    atomic.Int64      // readings of the directory, for tests
}

// BoardOption sets an optional parameter of NewBoard.
type BoardOption func(*Board)

// WithClock sets the clock announcements expire on (default: the real
// clock).
func WithClock(c clock.PassiveClock) BoardOption { return func(b *Board) { b.clock = c } }

// WithLogger sets the logger refusals are reported on.
func WithLogger(l klog.Logger) BoardOption { return func(b *Board) { b.logger = l } }

// WithBoardMaxEntries sets how many announcements, newest first, are read
// (default DefaultMaxEntries).
func WithBoardMaxEntries(n int) BoardOption { return func(b *Board) { b.maxEntries = n } }

// NewBoard returns the Board of dir (<serve's root-dir>/node-credentials).
// The directory need not exist yet. Announcements count only when the
// directory, its parent, its key and the announcement file are owned by
// root or by this process's user and writable by nobody else.
func NewBoard(dir string, opts ...BoardOption) *Board {
	b := &Board{
		dir: dir, clock: clock.RealClock{}, logger: klog.Background(),
		owners: trustedOwners(), maxEntries: DefaultMaxEntries, fsNow: time.Now,
	}
	for _, o := range opts {
		o(b)
	}
	return b
}

func trustedOwners() []uint32 {
	owners := []uint32{0}
	if uid := os.Geteuid(); uid > 0 {
		owners = append(owners, uint32(uid))
	}
	return owners
}

// Source returns the node source of the announcement that covers auth (the
// credential of a pull, with serve's canonical fields) for the pulled
// image im, or false when none does: no announcement of that keyed hash
// for a pattern and matchImages that match im, within its scope, not
// expired.
func (b *Board) Source(im keyring.Image, auth credential.AuthConfig) (credential.Source, bool) {
	if auth.Empty() {
		return credential.Source{}, false
	}
	s := b.current()
	if len(s.byHash) == 0 {
		return credential.Source{}, false
	}
	now := b.clock.Now()
	for _, e := range s.byHash[s.hasher.HashAuth(auth)] {
		if now.Before(e.expiresAt) && e.covers(im) {
			matches.WithLabelValues(e.provider).Inc()
			return credential.Source{Kind: credential.SourceNode, Name: e.provider}, true
		}
	}
	return credential.Source{}, false
}

// entry is one announced credential.
type entry struct {
	provider string
	pattern  keyring.Pattern
	// hub: the credential is filed under "index.docker.io", which the
	// kubelet hands out for a Docker Hub image no key matched.
	hub       bool
	keys      []keyring.Pattern // every credential's of the answer
	match     []keyring.Pattern
	scope     Scope
	image     keyring.Image
	expiresAt time.Time
}

// covers reports whether the kubelet hands the credential out for im: its
// key matches im (keyring.Pattern on its keyring.ConfigKey), or it is the
// Docker Hub key and no key of the answer matches a Docker Hub image (the
// kubelet's fallback; the answers of other plugins are not known here,
// and cannot hold this credential: the kubelet got it from this run);
// one of the provider's matchImages (if known) matches im; and the
// answer's cache key covers it.
func (e *entry) covers(im keyring.Image) bool {
	if !e.pattern.Match(im) && !(e.hub && im.DockerHub() && !matchesAny(e.keys, im)) {
		return false
	}
	if len(e.match) > 0 && !matchesAny(e.match, im) {
		return false
	}
	// The kubelet's cache keys: the image's normalized name, or its
	// registry as that name spells it.
	switch e.scope {
	case ScopeImage:
		return im.Name() == e.image.Name()
	case ScopeRegistry:
		return im.Domain() == e.image.Domain()
	default:
		return true
	}
}

// snapshot is what one reading of the directory found.
type snapshot struct {
	stamp  stamp
	racy   bool
	hasher *credential.Hasher
	byHash map[credential.Hash][]*entry
}

// stamp is what tells a changed directory.
type stamp struct {
	exists bool
	dev    uint64
	ino    uint64
	uid    uint32
	mode   fs.FileMode
	size   int64
	mtime  int64
}

func (b *Board) stat() (stamp, fs.FileInfo, error) {
	fi, err := os.Lstat(b.dir)
	if err != nil {
		return stamp{}, nil, err
	}
	st := stamp{exists: true, mode: fi.Mode(), size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.dev, st.ino, st.uid = uint64(sys.Dev), uint64(sys.Ino), sys.Uid
	}
	return st, fi, nil
}

// current returns the snapshot of the directory as it is now, reading it
// again if it changed.
func (b *Board) current() *snapshot {
	st, _, _ := b.stat()
	if s := b.snap.Load(); s != nil && s.stamp == st && !s.racy {
		return s
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st, fi, err := b.stat()
	if s := b.snap.Load(); s != nil && s.stamp == st && !s.racy {
		return s
	}
	s := b.load(st, fi, err)
	b.snap.Store(s)
	return s
}

// load reads the directory. Every problem is logged once (until a reading
// no longer finds it) and counted.
func (b *Board) load(st stamp, fi fs.FileInfo, statErr error) *snapshot {
	reloads.Inc()
	b.loads.Add(1)
	s := &snapshot{stamp: st}
	if st.exists {
		s.racy = b.fsNow().Sub(fi.ModTime()) < racyWindow
	}
	problems := map[string]string{}
	defer func() {
		b.report(problems)
		announced.Set(float64(s.count()))
	}()
	switch {
	case errors.Is(statErr, fs.ErrNotExist):
		return s // no wrapped plugin has announced anything
	case statErr != nil:
		problems[b.dir] = statErr.Error()
		return s
	}
	if reason := b.checkDir(fi); reason != "" {
		problems[b.dir] = reason
		return s
	}
	if parent, err := os.Lstat(filepath.Dir(b.dir)); err != nil {
		problems[filepath.Dir(b.dir)] = err.Error()
		return s
	} else if reason := b.checkDir(parent); reason != "" {
		problems[filepath.Dir(b.dir)] = reason
		return s
	}
	names, err := readNames(b.dir, 4*b.maxEntries+64)
	if err != nil {
		problems[b.dir] = err.Error()
		return s
	}
	now := b.clock.Now()
	var live []string
	for _, name := range names {
		if t, ok := parseEntryName(name); ok && now.Before(t.expires) {
			live = append(live, name)
		}
	}
	if len(live) == 0 {
		return s
	}
	key, reason := b.readFile(KeyFile, credential.KeySize, 0o077)
	if reason == "" {
		if s.hasher, err = credential.NewHasher(key); err != nil {
			reason = "not a hash key"
		}
	}
	if reason != "" {
		problems[filepath.Join(b.dir, KeyFile)] = reason
		return s
	}
	// Newest first, at most maxEntries.
	sort.Sort(sort.Reverse(sort.StringSlice(live)))
	if len(live) > b.maxEntries {
		live = live[:b.maxEntries]
	}
	s.byHash = map[credential.Hash][]*entry{}
	for _, name := range live {
		data, reason := b.readFile(name, MaxFileSize, 0o022)
		if reason != "" {
			problems[filepath.Join(b.dir, name)] = reason
			continue
		}
		a, err := Decode(data)
		if err != nil {
			problems[filepath.Join(b.dir, name)] = "invalid: " + err.Error()
			continue
		}
		s.add(a, now)
	}
	return s
}

// checkDir is why a directory on the way to the announcements cannot be
// trusted, or "".
func (b *Board) checkDir(fi fs.FileInfo) string {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return "a symbolic link"
	case !fi.IsDir():
		return "not a directory"
	case !b.trusted(fi):
		return b.ownerProblem(fi)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Sprintf("writable by others than its owner (mode %v)", fi.Mode().Perm())
	}
	return ""
}

// readFile reads a file of the directory, refusing one that is a
// symbolic link or not a regular file, is owned by someone not trusted,
// has a permission bit of forbidden set, or holds more than max bytes. It
// checks the file it opened (fstat), not its name.
func (b *Board) readFile(name string, max int64, forbidden fs.FileMode) ([]byte, string) {
	f, err := os.OpenFile(filepath.Join(b.dir, name), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, "a symbolic link"
		}
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "missing"
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, "cannot be opened: " + err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, "cannot be read"
	case !fi.Mode().IsRegular():
		return nil, "not a regular file"
	case !b.trusted(fi):
		return nil, b.ownerProblem(fi)
	case fi.Mode().Perm()&forbidden != 0:
		return nil, fmt.Sprintf("mode %v gives others access", fi.Mode().Perm())
	case fi.Size() > max:
		return nil, fmt.Sprintf("larger than %d bytes", max)
	}
	data, err := boundedread.Read(f, max)
	if err != nil {
		return nil, "cannot be read"
	}
	return data, ""
}

func (b *Board) trusted(fi fs.FileInfo) bool {
	sys, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	for _, uid := range b.owners {
		if sys.Uid == uid {
			return true
		}
	}
	return false
}

func (b *Board) ownerProblem(fi fs.FileInfo) string {
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("owned by uid %d, not root", sys.Uid)
	}
	return "owner unknown"
}

// report logs the problems a reading found that the previous one did not,
// and counts them.
func (b *Board) report(problems map[string]string) {
	for path, reason := range problems {
		if b.problems[path] == reason {
			continue
		}
		refused.Inc()
		b.logger.Error(nil, "Refusing node credential announcements: they count for nothing, and pulls with those credentials are filed as the pod's", "path", path, "reason", reason)
	}
	b.problems = problems
}

// add indexes a's credentials, unless it expired.
func (s *snapshot) add(a *Announcement, now time.Time) {
	if !now.Before(a.ExpiresAt) {
		return
	}
	im, err := keyring.ParseImage(a.Image)
	if err != nil {
		return // Decode checked it
	}
	var match []keyring.Pattern
	for _, m := range a.MatchImages {
		p, err := keyring.ParsePattern(m)
		if err != nil {
			return
		}
		match = append(match, p)
	}
	keys := make([]keyring.Pattern, len(a.Credentials))
	filed := make([]string, len(a.Credentials))
	for i, c := range a.Credentials {
		// As the kubelet files a plugin's auth key; Decode checked it.
		filed[i], _ = keyring.ConfigKey(c.Pattern)
		keys[i], _ = keyring.ParsePattern(filed[i]) // the zero Pattern, which matches nothing, if not
	}
	for i, c := range a.Credentials {
		s.byHash[c.Hash] = append(s.byHash[c.Hash], &entry{
			provider: a.Provider, pattern: keys[i], hub: filed[i] == "index.docker.io", keys: keys,
			match: match, scope: a.Scope, image: im, expiresAt: a.ExpiresAt,
		})
	}
}

// matchesAny reports whether one of ps matches im.
func matchesAny(ps []keyring.Pattern, im keyring.Image) bool {
	for i := range ps {
		if ps[i].Match(im) {
			return true
		}
	}
	return false
}

func (s *snapshot) count() int {
	n := 0
	for _, es := range s.byHash {
		n += len(es)
	}
	return n
}
