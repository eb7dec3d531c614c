package announce

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/internal/durable"
	"github.com/pullguard/pullguard/pkg/credential"
	"github.com/pullguard/pullguard/pkg/keyring"
)

// Dir is the announcements' directory under serve's root directory.
const Dir = "node-credentials"

// KeyFile is the hash key's file in the directory.
const KeyFile = "key"

// DefaultMaxEntries is the most announcements the directory keeps (the
// oldest are removed first) and the most a Board reads.
const DefaultMaxEntries = 256

// DefaultGrace is added to how long the kubelet hands an answer out: the
// kubelet looks credentials up before a pull, and the pull may then wait
// behind others (serialized pulls), so a credential handed out just
// before its cache entry expired, or an answer the kubelet did not cache
// at all, still counts for the pull that follows.
const DefaultGrace = 5 * time.Minute

// staleTmp is when a leftover temporary file (a writer killed while
// writing) is removed by the next writer.
const staleTmp = time.Minute

// Answer is what a plugin answered the kubelet, in the clear. Writer.Write
// keeps only keyed hashes of it.
type Answer struct {
	// Provider is the plugin's name.
	Provider string
	// Image is the image the kubelet asked about.
	Image string
	// CacheKeyType is the response's (Image, Registry or Global).
	CacheKeyType Scope
	// CacheDuration is how long the kubelet caches the answer: the
	// response's cacheDuration, else the provider's defaultCacheDuration.
	// Zero: not cached, handed out for Image only.
	CacheDuration time.Duration
	// MatchImages are the provider's matchImages (may be empty).
	MatchImages []string
	// Auth maps the response's auth keys to their credentials.
	Auth map[string]credential.AuthConfig
}

// Writer writes announcements into a directory. It is what `pullguard
// credential-provider` uses, once per plugin run; several processes may
// write into one directory at once.
type Writer struct {
	dir        string
	hasher     *credential.Hasher
	clock      clock.PassiveClock
	maxEntries int
	grace      time.Duration
}

// WriterOption sets an optional parameter of NewWriter.
type WriterOption func(*Writer)

// WithWriterClock sets the clock of expiry (default: the real clock).
func WithWriterClock(c clock.PassiveClock) WriterOption { return func(w *Writer) { w.clock = c } }

// WithMaxEntries sets how many announcements the directory keeps
// (default DefaultMaxEntries).
func WithMaxEntries(n int) WriterOption { return func(w *Writer) { w.maxEntries = n } }

// WithGrace sets what is added to an answer's cache duration (default
// DefaultGrace).
func WithGrace(d time.Duration) WriterOption { return func(w *Writer) { w.grace = d } }

// NewWriter opens dir for writing: it creates it (mode 0700) when it does
// not exist, and the hash key in it (credential.LoadOrCreateSharedHasher).
// A dir that is not a directory is an error.
func NewWriter(dir string, opts ...WriterOption) (*Writer, error) {
	w := &Writer{dir: dir, clock: clock.RealClock{}, maxEntries: DefaultMaxEntries, grace: DefaultGrace}
	for _, o := range opts {
		o(w)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("failed to create the announcement directory %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("failed to open the announcement directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("the announcement directory %s is not a directory", dir)
	}
	if w.hasher, err = credential.LoadOrCreateSharedHasher(filepath.Join(dir, KeyFile)); err != nil {
		return nil, err
	}
	return w, nil
}

// Write announces a: the keyed hash of each credential that is not
// anonymous, with its pattern, the scope the kubelet hands it out for
// (Image when it does not cache it), and an expiry of now +
// CacheDuration + grace. The file is written under a temporary name and
// renamed into place, so a reader sees all of it or nothing. Then expired
// announcements, leftover temporary files and the oldest beyond the
// directory's bound are removed. An answer with no credential, or more
// than MaxCredentials, is not written (an error for the latter).
func (w *Writer) Write(ans Answer) error {
	now := w.clock.Now()
	a := Announcement{
		Provider: ans.Provider, Image: ans.Image, Scope: ans.CacheKeyType,
		ExpiresAt: now.Add(ans.CacheDuration + w.grace),
	}
	// A matchImages entry that can never match (a wildcard in the path,
	// a scheme: keyring.Pattern.Unmatchable), which the kubelet loads and
	// never matches, is left out. If that leaves none, the kubelet hands
	// the answer out for no image.
	for _, m := range ans.MatchImages {
		if p, err := keyring.ParsePattern(m); err == nil && p.Unmatchable() == "" {
			a.MatchImages = append(a.MatchImages, m)
		}
	}
	if len(ans.MatchImages) > 0 && len(a.MatchImages) == 0 {
		return nil
	}
	if ans.CacheDuration <= 0 {
		// The kubelet hands an answer it does not cache out only for the
		// look-up that ran the plugin.
		a.Scope = ScopeImage
		a.ExpiresAt = now.Add(w.grace)
	}
	keys := make([]string, 0, len(ans.Auth))
	for k, auth := range ans.Auth {
		// What the kubelet presents of a plugin's credential.
		if (credential.AuthConfig{Username: auth.Username, Password: auth.Password}).Empty() {
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil
	}
	if len(keys) > MaxCredentials {
		return fmt.Errorf("the answer holds %d credentials, more than the %d an announcement may", len(keys), MaxCredentials)
	}
	sort.Strings(keys)
	for _, k := range keys {
		auth := ans.Auth[k]
		a.Credentials = append(a.Credentials, Credential{
			Pattern: k,
			Hash:    w.hasher.HashAuth(credential.AuthConfig{Username: auth.Username, Password: auth.Password}),
		})
	}
	data, err := Encode(a)
	if err != nil {
		return fmt.Errorf("failed to encode the announcement of %s: %w", ans.Provider, err)
	}
	if len(data) > MaxFileSize {
		return fmt.Errorf("the announcement of %s is larger than %d bytes", ans.Provider, MaxFileSize)
	}
	if err := w.put(entryName(now, a.ExpiresAt), data); err != nil {
		return fmt.Errorf("failed to write an announcement into %s: %w", w.dir, err)
	}
	w.prune(now)
	return nil
}

// put writes data under name, through a temporary file renamed into place
// (a reader sees all of it or nothing). No fsync (durable.NoSync): after a
// crash of the node the kubelet's cache is gone too, so it runs the plugin
// again and announces anew; a torn file is refused by the Board.
func (w *Writer) put(name string, data []byte) error {
	return durable.WriteFile(filepath.Join(w.dir, name), data, 0o600, durable.NoSync())
}

// prune removes expired announcements, leftover temporary files, and the
// oldest announcements beyond maxEntries. It reads names only (the write
// and expiry times are in them) and ignores what it cannot remove: another
// writer may have removed it first.
func (w *Writer) prune(now time.Time) {
	names, err := readNames(w.dir, 4*w.maxEntries+64)
	if err != nil {
		return
	}
	var live []entryTimes
	for _, name := range names {
		path := filepath.Join(w.dir, name)
		if durable.IsTemp(name) {
			// A file time: compared with the wall clock.
			if fi, err := os.Lstat(path); err == nil && time.Since(fi.ModTime()) > staleTmp {
				_ = os.Remove(path)
			}
			continue
		}
		t, ok := parseEntryName(name)
		if !ok {
			continue
		}
		if !now.Before(t.expires) {
			_ = os.Remove(path)
			continue
		}
		live = append(live, t)
	}
	if len(live) <= w.maxEntries {
		return
	}
	sort.Slice(live, func(i, j int) bool { return live[i].name < live[j].name })
	for _, t := range live[:len(live)-w.maxEntries] {
		_ = os.Remove(filepath.Join(w.dir, t.name))
	}
}

// entryTimes are the times in an announcement's file name.
type entryTimes struct {
	name             string
	written, expires time.Time
}

// entryName is "<written>-<expires>-<random>.json", the times in Unix
// nanoseconds as 16 hex digits: names sort by write time, and expiry is
// known without opening the file.
func entryName(written, expires time.Time) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return fmt.Sprintf("%016x-%016x-%08x.json", uint64(written.UnixNano()), uint64(expires.UnixNano()), binary.BigEndian.Uint32(r[:]))
}

// parseEntryName reads entryName's times, or false for another name.
func parseEntryName(name string) (entryTimes, bool) {
	const n = 16 + 1 + 16 + 1 + 8
	if len(name) != n+len(".json") || !strings.HasSuffix(name, ".json") || name[16] != '-' || name[33] != '-' {
		return entryTimes{}, false
	}
	written, err1 := strconv.ParseUint(name[:16], 16, 64)
	expires, err2 := strconv.ParseUint(name[17:33], 16, 64)
	_, err3 := strconv.ParseUint(name[34:n], 16, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return entryTimes{}, false
	}
	return entryTimes{name: name, written: time.Unix(0, int64(written)), expires: time.Unix(0, int64(expires))}, true
}

// readNames lists up to max names of dir.
func readNames(dir string, max int) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(max)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return names, nil
}
