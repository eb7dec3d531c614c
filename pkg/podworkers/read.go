package podworkers

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pullguard/pullguard/internal/boundedread"
)

// MaxInputBytes bounds every manifest and configuration file (and standard
// input) that pullguard reads: 8 MiB, far above any real set of pods and
// far below what would hurt a node's memory.
const MaxInputBytes = 8 << 20

// ErrInputTooLarge is wrapped by the error for an input over the limit.
var ErrInputTooLarge = errors.New("input too large")

// StdinName is the -f argument that means standard input, as for kubectl.
const StdinName = "-"

// manifestExts are the file extensions read from a directory, as kubectl
// reads them.
var manifestExts = []string{".yaml", ".yml", ".json"}

// ReadOptions says how ReadManifests finds and bounds its inputs.
type ReadOptions struct {
	// Recursive reads the subdirectories of a directory too (kubectl's -R).
	Recursive bool
	// Stdin is read for the name "-"; nil means os.Stdin.
	Stdin io.Reader
	// MaxBytes bounds each input; 0 means MaxInputBytes.
	MaxBytes int64
}

// ReadManifests reads manifests from paths as `kubectl apply -f` does: a
// file, "-" for standard input (at most once), or a directory, whose
// *.yaml, *.yml and *.json files are read in lexical order (with
// opts.Recursive, those of its subdirectories too). Each input is bounded
// by opts.MaxBytes; an input over it is an error naming it, read no
// further.
func ReadManifests(opts ReadOptions, paths ...string) (*Manifests, error) {
	if len(paths) == 0 {
		return nil, errors.New("no manifest files given")
	}
	m := &Manifests{Secrets: map[types.NamespacedName]*corev1.Secret{}, ServiceAccounts: map[types.NamespacedName]*corev1.ServiceAccount{}}
	stdinRead := false
	for _, p := range paths {
		if p == StdinName {
			if stdinRead {
				return nil, errors.New("standard input (-f -) can be read only once")
			}
			stdinRead = true
			in := opts.Stdin
			if in == nil {
				in = os.Stdin
			}
			data, err := ReadLimited(in, "standard input", opts.MaxBytes)
			if err != nil {
				return nil, err
			}
			if err := m.add("standard input", data); err != nil {
				return nil, err
			}
			continue
		}
		files, err := expand(p, opts.Recursive)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			data, err := ReadFileLimited(f, opts.MaxBytes)
			if err != nil {
				return nil, err
			}
			if err := m.add(f, data); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// expand returns path itself for a file, and the manifest files of a
// directory in lexical order. A directory with none is an error, as in
// kubectl, so that a wrong directory does not silently run nothing.
func expand(path string, recursive bool) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", path, err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("failed to read %s: %w", p, err)
		}
		if d.IsDir() {
			if p != path && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		if slices.Contains(manifestExts, strings.ToLower(filepath.Ext(p))) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: %s: no *.yaml, *.yml or *.json files in the directory", ErrInvalidManifest, path)
	}
	return files, nil
}

// ReadFileLimited reads the file at path, at most max bytes (0 means
// MaxInputBytes); a larger file is an error naming it.
func ReadFileLimited(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", path, err)
	}
	defer f.Close()
	return ReadLimited(f, path, max)
}

// ReadLimited reads r to its end, at most max bytes (0 means
// MaxInputBytes); name is used in errors.
func ReadLimited(r io.Reader, name string, max int64) ([]byte, error) {
	if max <= 0 {
		max = MaxInputBytes
	}
	data, err := boundedread.Read(r, max)
	switch {
	case errors.Is(err, boundedread.ErrTooLarge):
		return nil, fmt.Errorf("%w: %s is larger than the limit of %d bytes", ErrInputTooLarge, name, max)
	case err != nil:
		return nil, fmt.Errorf("failed to read %s: %w", name, err)
	}
	return data, nil
}

// withFinalNewline returns data ending in a newline. apimachinery's YAML
// reader drops a last line that is not newline-terminated when its length
// is a multiple of its 4096-byte buffer (bufio's ReadLine then returns the
// line, and io.EOF with it on the next call, and the document reader
// discards data that comes with io.EOF). A final newline never changes a
// document's meaning, and with it no line ends at io.EOF.
func withFinalNewline(data []byte) []byte {
	if len(data) == 0 || data[len(data)-1] == '\n' {
		return data
	}
	out := make([]byte, len(data)+1)
	copy(out, data)
	out[len(data)] = '\n'
	return out
}
