// Package boundedread holds the readers for inputs that may be hostile or
// corrupt (manifests, configuration files, the kubelet's records): they
// never hold more than a bound of an input in memory.
//
// pkg/podworkers, pkg/nodeconfig and pkg/criproxy read their files through
// it; it depends on the standard library only.
package boundedread

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is returned for an input longer than its bound.
var ErrTooLarge = errors.New("input too large")

// Read reads r to its end, at most max bytes: one byte more is read to
// tell an input of exactly max bytes from a longer one.
func Read(r io.Reader, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrTooLarge, max)
	}
	return data, nil
}

// ReadFile reads the file at path with Read.
func ReadFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f, max)
}
