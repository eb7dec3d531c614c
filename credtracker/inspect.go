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
// check is an error that says which. Unreadable records are returned as
// records of unknown origin, as the tracker would treat them.
func ReadRecords(dir string) ([]ImageRecord, Status, error) {
	path := filepath.Join(dir, StoreFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, Status{}, nil
	}
	key, err := os.ReadFile(filepath.Join(dir, HashKeyFile))
	if err != nil {
		return nil, Status{}, fmt.Errorf("failed to read records in %s: cannot check the store without the node's hash key: %w", dir, err)
	}
	h, err := credential.NewHasher(key)
	if err != nil {
		return nil, Status{}, fmt.Errorf("failed to read records in %s: %w", dir, err)
	}
	sl := newSealer(h)
	gen, err := openGenFile(filepath.Join(dir, GenerationFile), sl, false)
	if err != nil {
		return nil, Status{}, fmt.Errorf("failed to read records in %s: %w", dir, err)
	}
	defer gen.close()
	s, err := openStore(path, sl, gen, true)
	if err != nil {
		return nil, Status{}, fmt.Errorf("failed to read records in %s: %w", dir, err)
	}
	c, _ := s.load()
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
