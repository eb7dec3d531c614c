// Package boundedread holds the readers for inputs that may be hostile or
// corrupt (manifests, configuration files, the kubelet's records, a
// registry's answers): they never hold more than a bound of an input in
// memory.
//
// pkg/podworkers, pkg/nodeconfig and pkg/criproxy read their files through
// it, and pkg/criruntime the bodies of registry answers; it depends on the
// standard library only.
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
	data, err := io.ReadAll(NewReader(r, max))
	if err != nil {
		return nil, err
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

// NewReader returns a reader of the first max bytes of r that, where
// io.LimitReader would end quietly, fails with an error wrapping
// ErrTooLarge once r holds more: a stream (a network answer) is cut at its
// bound and never taken for complete. It reads one byte past max to tell
// an input of exactly max bytes from a longer one.
func NewReader(r io.Reader, max int64) io.Reader {
	return &reader{r: r, left: max, max: max}
}

type reader struct {
	r    io.Reader
	left int64 // bytes that may still be returned
	max  int64
	err  error // ErrTooLarge, once seen
}

func (l *reader) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if l.left == 0 {
		// At the bound: one byte more is an input too large.
		var probe [1]byte
		n, err := l.r.Read(probe[:])
		if n > 0 {
			l.err = fmt.Errorf("%w: larger than %d bytes", ErrTooLarge, l.max)
			return 0, l.err
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
