package credtracker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/pullguard/pullguard/pkg/credential"
)

// File names under Config.Dir.
const (
	StoreFile   = "records.db"
	HashKeyFile = "hashkey"
)

// Config configures an enabled tracker.
type Config struct {
	// Dir holds the record store and the hash key. Required.
	Dir string
	// Policy is the verification policy; empty means DefaultPolicy.
	Policy Policy
	// Allowlist is the preloadedImagesVerificationAllowlist, used with
	// NeverVerifyAllowlistedImages.
	Allowlist []string
	// CredentialMaxAge, when positive, makes a recorded credential older
	// than it count for nothing: its holders verify again. Off by default.
	CredentialMaxAge time.Duration
	// MaxEntries bounds each repository's secret and service account
	// lists; 0 means DefaultMaxEntries.
	MaxEntries int
}

// Option sets an optional dependency of New.
type Option func(*tracker)

// WithClock sets the clock (tests use a fake one).
func WithClock(c clock.PassiveClock) Option { return func(t *tracker) { t.clock = c } }

// WithLogger sets the logger.
func WithLogger(l klog.Logger) Option { return func(t *tracker) { t.logger = l } }

// Enabled is the Tracker New returns: it also exposes the hasher the
// records were made with.
type Enabled interface {
	Tracker
	// Hasher is the node-local credential hasher; keyrings must hash with it.
	Hasher() *credential.Hasher
}

// New opens (or creates) the record store under cfg.Dir and returns the
// tracker for the enabled feature gate. inv lists the runtime's images; it
// is used now, to turn leftover pull intents into records and to rebuild
// an unreadable store, and never again.
//
// An unreadable store is not an error: it is kept aside, a new store is
// seeded with a record of unknown origin for every present image, and the
// recovery is reported in the log, the metrics and Status. A store of an
// older schema version is migrated (schema.go). New fails for bad
// configuration, when the directory cannot be used at all, when a
// migration cannot be written (the store stays as it was), and for a
// store written by a newer pullguard (an error wrapping ErrStoreTooNew,
// which names both versions and what to do): New then changes nothing,
// and the caller must not run without the tracker, whose records would
// otherwise be lost or not kept.
func New(ctx context.Context, cfg Config, inv ImageInventory, opts ...Option) (Enabled, error) {
	if cfg.Dir == "" {
		return nil, errors.New("credential tracker: Dir is required")
	}
	policy, err := ParsePolicy(string(cfg.Policy))
	if err != nil {
		return nil, err
	}
	allowlist, err := NewAllowlist(cfg.Allowlist)
	if err != nil {
		return nil, err
	}
	if cfg.CredentialMaxAge < 0 {
		return nil, fmt.Errorf("credential tracker: CredentialMaxAge %s must not be negative", cfg.CredentialMaxAge)
	}
	t := &tracker{
		policy:     policy,
		allowlist:  allowlist,
		maxAge:     cfg.CredentialMaxAge,
		maxEntries: cfg.MaxEntries,
		clock:      clock.RealClock{},
		logger:     klog.Background(),
		intents:    map[string]int{},
		inflight:   map[string]int{},
		images:     newRecordIndex(),
	}
	if t.maxEntries <= 0 {
		t.maxEntries = DefaultMaxEntries
	}
	for _, o := range opts {
		o(t)
	}
	t.logger = t.logger.WithName("credtracker")

	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create credential tracker directory: %w", err)
	}
	hasher, created, err := credential.LoadOrCreateHasher(filepath.Join(cfg.Dir, HashKeyFile))
	if err != nil {
		return nil, err
	}
	t.hasher = hasher
	t.status.HashKeyCreated = created

	sl := newSealer(hasher)
	gen, err := openGenFile(filepath.Join(cfg.Dir, GenerationFile), sl, true)
	if err != nil {
		return nil, fmt.Errorf("credential tracker: %w", err)
	}
	c, err := t.openOrRecover(ctx, filepath.Join(cfg.Dir, StoreFile), sl, gen, created)
	if err != nil {
		gen.close()
		return nil, err
	}
	if n := c.numRecords(); created && n > 0 {
		t.logger.Info("Credential hash key was created; every recorded credential will be verified with its registry once more", "records", n)
	}
	if err := t.adopt(ctx, c, inv); err != nil {
		t.store.close()
		return nil, err
	}
	return t, nil
}

// openOrRecover opens the store at path, creating it at a node's first
// start, or recovers when it is missing or fails any integrity check. A
// store of a newer schema version is neither: the error says so.
func (t *tracker) openOrRecover(ctx context.Context, path string, sl *sealer, gen *genFile, keyCreated bool) (contents, error) {
	_ = os.Remove(path + compactSuffix) // a copy an interrupted compaction left
	_, statErr := os.Stat(path)
	switch {
	case errors.Is(statErr, fs.ErrNotExist):
		if cause := storeMissing(path, keyCreated, gen); cause != nil {
			return t.recover(path, sl, gen, cause)
		}
		if err := createStore(path, sl, gen, nil, false); err != nil {
			return contents{}, err
		}
	case statErr != nil:
		return contents{}, fmt.Errorf("failed to open record store: %w", statErr)
	}
	c, err := t.open(path, sl, gen)
	if errors.Is(err, errStoreCorrupt) {
		return t.recover(path, sl, gen, err)
	}
	return c, err
}

// open opens the store and reads it; a store that fails any integrity
// check is an error wrapping errStoreCorrupt.
func (t *tracker) open(path string, sl *sealer, gen *genFile) (contents, error) {
	s, err := openStore(path, sl, gen, false, t.images)
	if err != nil {
		return contents{}, err
	}
	if m := s.migrated; m != nil {
		t.logger.Info("Migrated the record store to this pullguard's schema version; every record was kept", "path", path, "from", m.from, "to", m.to, "took", m.took)
	}
	c, err := s.load()
	if err != nil {
		s.close()
		return contents{}, err
	}
	t.store = s
	return c, nil
}

// storeMissing reports, as an error to recover from, a store that should
// exist and does not: the node has state (a hash key or a generation file
// made at an earlier start, or a store set aside by an earlier recovery
// that did not finish). Starting over with an empty store would make every
// credential-pulled image look preloaded. It returns nil for a node's
// first start.
func storeMissing(path string, keyCreated bool, gen *genFile) error {
	aside, _ := filepath.Glob(path + ".unreadable-*")
	switch {
	case len(aside) > 0:
		return corrupt(checkMissing, path, errors.New("missing after it was set aside"))
	case !keyCreated:
		return corrupt(checkMissing, path, errors.New("missing but the node's hash key is not new"))
	case gen.existed:
		return corrupt(checkMissing, path, errors.New("missing but the node has written a store before (its generation file exists)"))
	}
	return nil
}

// recover sets an unreadable store aside (if there is one) and puts a new
// one in its place, seeded from the runtime's image list. The new store is
// made under a temporary name with its pending seed already committed, then
// renamed into place: a crash at any point leaves either no store (which
// the next start recovers again) or one that says it still owes the seed.
func (t *tracker) recover(path string, sl *sealer, gen *genFile, cause error) (contents, error) {
	now := t.clock.Now()
	aside := ""
	if _, err := os.Stat(path); err == nil {
		aside = fmt.Sprintf("%s.unreadable-%s", path, now.UTC().Format("20060102T150405.000000000Z"))
		if err := os.Rename(path, aside); err != nil {
			return contents{}, fmt.Errorf("record store is unreadable (%v) and could not be set aside: %w", cause, err)
		}
	}
	recoveriesTotal.Inc()
	check := checkStructure
	var ce *storeCorruptError
	if errors.As(cause, &ce) {
		check = ce.check
	}
	integrityFailuresTotal.WithLabelValues(check).Inc()
	t.logger.Error(cause, "Record store failed its integrity check; a new one is being seeded from the runtime's images, which will all require credential verification", "check", check, "asidePath", aside)
	st := storeStatus{RecoveredAt: now, RecoveryReason: truncate(cause.Error(), 1024), AsidePath: aside, SeedPending: true}
	if err := createStore(path, sl, gen, &st, false); err != nil {
		return contents{}, fmt.Errorf("failed to put a new record store in place: %w", err)
	}
	s, err := openStore(path, sl, gen, false, t.images)
	if err != nil {
		return contents{}, fmt.Errorf("failed to open the new record store: %w", err)
	}
	t.store = s
	return contents{unreadable: map[string]error{}, intents: map[string]bool{}, status: st}, nil
}

// adopt installs what was read, quarantines unreadable records, resolves
// leftover intents and completes a pending seed.
func (t *tracker) adopt(ctx context.Context, c contents, inv ImageInventory) error {
	now := t.clock.Now()
	if c.prepared != nil {
		if err := t.images.install(c.prepared); err != nil {
			return fmt.Errorf("failed to load the records: %w", err)
		}
	} else {
		t.images.storeAll(c.records)
	}
	t.status.RecoveredAt, t.status.RecoveryReason, t.status.AsidePath = c.status.RecoveredAt, c.status.RecoveryReason, c.status.AsidePath

	for ref, cause := range c.unreadable {
		unreadableTotal.Inc()
		r := &ImageRecord{ImageRef: ref, UnknownOrigin: truncate("record unreadable: "+cause.Error(), 512), Repositories: map[string]*RepositoryRecord{}, Updated: now}
		t.logger.Error(cause, "Image record is unreadable; it was set aside and the image requires credential verification under every name", "imageRef", ref)
		t.images.store(r)
		if err := t.write("quarantine", func() error { return t.store.quarantine(r) }); err != nil {
			return fmt.Errorf("failed to set aside an unreadable record: %w", err)
		}
	}
	t.status.UnreadableRecords = len(c.unreadable)

	var images []Image
	var listErr error
	listed := false
	list := func() ([]Image, error) {
		if !listed {
			images, listErr = listImages(ctx, inv)
			listed = true
		}
		return images, listErr
	}

	if c.status.SeedPending {
		imgs, err := list()
		if err != nil {
			t.degraded.Store(true)
			t.logger.Error(err, "Cannot list the runtime's images to rebuild the record store; every present image requires credential verification until a restart succeeds")
		} else if err := t.seed(imgs, c.status, now); err != nil {
			return err
		}
	}

	if len(c.intents) > 0 {
		imgs, err := list()
		if err != nil {
			// Keep the intents: their names stay "in flight" and require
			// verification until a later start can resolve them.
			t.logger.Error(err, "Cannot list the runtime's images to resolve leftover pull intents; their images require credential verification", "intents", len(c.intents))
			for key := range c.intents {
				repo, _ := RepositoryName(key)
				// Pinned: a later pull of the image must not remove it.
				t.pinIntent(key, repo)
			}
			t.status.Intents = len(c.intents)
		} else if err := t.resolveIntents(c.intents, imgs, now); err != nil {
			return err
		}
	}

	t.compact("start-up")

	n := t.images.len()
	t.count.Store(int64(n))
	t.setMemoryCount(int64(n))
	t.setDiskCount(n)
	intentsGauge.Set(float64(t.status.Intents))
	t.logger.V(1).Info("Credential tracker started", "records", n, "policy", t.policy, "unreadable", t.status.UnreadableRecords)
	return nil
}

// seed writes a record of unknown origin for every present image (after a
// recovery) and clears the pending mark, in one transaction each.
func (t *tracker) seed(imgs []Image, st storeStatus, now time.Time) error {
	var put []*ImageRecord
	for _, img := range imgs {
		r := &ImageRecord{ImageRef: img.Ref, UnknownOrigin: "record store was rebuilt at " + now.UTC().Format(time.RFC3339), Repositories: map[string]*RepositoryRecord{}, Updated: now}
		if cur := t.images.load(img.Ref); cur != nil {
			r = cur.clone()
			if r.UnknownOrigin == "" {
				r.UnknownOrigin = "record store was rebuilt at " + now.UTC().Format(time.RFC3339)
			}
		}
		t.images.store(r)
		put = append(put, r)
	}
	// The records and the cleared mark in one transaction: a crash leaves
	// the seed either done or still owed.
	st.SeedPending = false
	if err := t.write("seed", func() error { return t.store.seed(put, st) }); err != nil {
		return fmt.Errorf("failed to seed the new record store: %w", err)
	}
	t.logger.Info("Seeded the new record store from the runtime's images", "images", len(imgs))
	return nil
}

// resolveIntents turns each leftover intent whose image is present into a
// record with no known credentials for its repository name, and removes
// all leftover intents.
func (t *tracker) resolveIntents(intents map[string]bool, imgs []Image, now time.Time) error {
	byName := map[string]string{}
	for _, img := range imgs {
		for _, n := range img.Names {
			if key, _, err := normalizedImage(n); err == nil {
				byName[key] = img.Ref
			}
		}
	}
	var put []*ImageRecord
	var keys []string
	for key := range intents {
		keys = append(keys, key)
		ref, ok := byName[key]
		if !ok {
			continue
		}
		repo, _ := RepositoryName(key)
		cur := t.images.load(ref)
		next := cur.withPulledUnknown(ref, repo, now)
		if next != cur {
			t.images.store(next)
			put = append(put, next)
		}
		t.logger.Info("A pull was interrupted before it was recorded; the image requires credential verification", "image", key, "imageRef", ref)
	}
	err := t.write("intent", func() error { return t.store.apply(put, nil, keys) })
	if err != nil {
		return fmt.Errorf("failed to resolve leftover pull intents: %w", err)
	}
	return nil
}

// compact gives the store's free pages back when they are a large part
// of its file (store.compactIfSparse), after a write that rewrote most
// records (when). A compaction that fails leaves the store as it was,
// which is no reason to stop: it is logged.
func (t *tracker) compact(when string) {
	c, err := t.store.compactIfSparse()
	if err != nil {
		t.logger.Error(err, "Could not compact the record store; it keeps its free pages", "after", when)
		return
	}
	if c.done {
		t.logger.Info("Compacted the record store", "after", when, "bytesBefore", c.before, "bytes", c.size)
	}
}

func listImages(ctx context.Context, inv ImageInventory) ([]Image, error) {
	if inv == nil {
		return nil, errors.New("no image inventory was given")
	}
	return inv.ListImages(ctx)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
