package credtracker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// ReadIntents returns the images of the pull intents the store under dir
// holds, sorted, without changing anything (`pullguard records`). An intent
// left by a crash makes its image need verification under every name at
// the next start; intents carry no time. A missing store has none.
func ReadIntents(dir string) ([]string, error) {
	path := filepath.Join(dir, StoreFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	s, err := openStore(path, true)
	if err != nil {
		return nil, fmt.Errorf("failed to read pull intents in %s: %w", dir, err)
	}
	defer s.close()
	c, err := s.load()
	if err != nil {
		return nil, fmt.Errorf("failed to read pull intents in %s: %w", dir, err)
	}
	out := make([]string, 0, len(c.intents))
	for image := range c.intents {
		out = append(out, image)
	}
	slices.Sort(out)
	return out, nil
}
