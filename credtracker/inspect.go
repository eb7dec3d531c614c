package credtracker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pullguard/pullguard/pkg/credential"
)

// ReadRecords reads the records under dir without changing anything, for
// inspection (`pullguard records`). It reads the store with plain reads and
// checks its integrity as a start-up does, with the node's hash key; while
// a tracker runs on dir it fails after two seconds with an error saying
// the store is locked. A missing store reads as empty; one that fails a
// check is an error that says which; one of another schema version is a
// *StoreVersionError (a newer one: ErrStoreTooNew; an older one, which
// only a tracker's start migrates: ErrStoreMigrationPending). Unreadable
// records are returned as records of unknown origin, as the tracker would
// treat them.
func ReadRecords(dir string) ([]ImageRecord, Status, error) {
	c, found, err := inspectStore(dir)
	if err != nil || !found {
		return nil, Status{}, wrapInspect("records", dir, err)
	}
	out := make([]ImageRecord, 0, len(c.records)+len(c.unreadable))
	for _, r := range c.records {
		out = append(out, *r)
	}
	for ref, cause := range c.unreadable {
		out = append(out, ImageRecord{ImageRef: ref, UnknownOrigin: "record unreadable: " + cause.Error(), Repositories: map[string]*RepositoryRecord{}})
	}
	slices.SortFunc(out, func(a, b ImageRecord) int { return strings.Compare(a.ImageRef, b.ImageRef) })
	st := Status{
		Records:           len(out),
		Intents:           len(c.intents),
		UnreadableRecords: len(c.unreadable),
		RecoveredAt:       c.status.RecoveredAt,
		RecoveryReason:    c.status.RecoveryReason,
		AsidePath:         c.status.AsidePath,
		Degraded:          c.status.SeedPending,
	}
	return out, st, nil
}

// inspectStore reads the store under dir as a start-up does (plain reads,
// its structure and seal checked with the node's hash key, its generation
// compared with records.gen), under a shared lock, changing nothing. found
// is false when dir holds no store.
func inspectStore(dir string) (c contents, found bool, err error) {
	path := filepath.Join(dir, StoreFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return contents{}, false, nil
	}
	key, err := os.ReadFile(filepath.Join(dir, HashKeyFile))
	if err != nil {
		return contents{}, true, fmt.Errorf("cannot check the store without the node's hash key: %w", err)
	}
	h, err := credential.NewHasher(key)
	if err != nil {
		return contents{}, true, err
	}
	sl := newSealer(h)
	gen, err := openGenFile(filepath.Join(dir, GenerationFile), sl, false)
	if err != nil {
		return contents{}, true, err
	}
	defer gen.close()
	s, err := openStore(path, sl, gen, true, nil)
	if err != nil {
		return contents{}, true, err
	}
	defer s.close()
	c, _ = s.load()
	return c, true, nil
}

func wrapInspect(what, dir string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("failed to read %s in %s: %w", what, dir, err)
}
