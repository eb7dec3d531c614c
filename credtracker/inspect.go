package credtracker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ReadRecords reads the records under dir without changing anything, for
// inspection (`pullguard records`). It opens the store read-only; while a
// tracker holds the store open it fails after two seconds with an error
// saying the store is locked. A missing store reads as empty; an unreadable
// one is an error that says so. Unreadable records are returned
// as records of unknown origin, as the tracker would treat them.
func ReadRecords(dir string) ([]ImageRecord, Status, error) {
	path := filepath.Join(dir, StoreFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, Status{}, nil
	}
	s, err := openStore(path, true)
	if err != nil {
		return nil, Status{}, fmt.Errorf("failed to read records in %s: %w", dir, err)
	}
	defer s.close()
	c, err := s.load()
	if err != nil {
		return nil, Status{}, fmt.Errorf("failed to read records in %s: %w", dir, err)
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
