package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCrosscheck runs the check on small modules: what a darwin build
// refuses is reported with its file and line, what it accepts passes.
func TestCrosscheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		files  map[string]string
		goos   string
		status int
		errs   []string
	}{
		{
			name:   "a Linux-only identifier in a file of every system",
			files:  map[string]string{"a.go": "package a\n\nimport \"syscall\"\n\nvar _ = syscall.PR_SET_CHILD_SUBREAPER\n"},
			goos:   "darwin",
			status: 1,
			errs:   []string{"a.go:5:17: undefined: syscall.PR_SET_CHILD_SUBREAPER"},
		},
		{
			name:   "the same identifier in a _linux.go file",
			files:  map[string]string{"a_linux.go": "package a\n\nimport \"syscall\"\n\nvar _ = syscall.PR_SET_CHILD_SUBREAPER\n", "a.go": "package a\n"},
			goos:   "darwin",
			status: 0,
		},
		{
			name: "a function defined for Linux only, called everywhere",
			files: map[string]string{
				"a_linux.go": "package a\n\nfunc lock() error { return nil }\n",
				"a.go":       "package a\n\nfunc Lock() error { return lock() }\n",
			},
			goos:   "darwin,linux",
			status: 1,
			errs:   []string{"GOOS=darwin example.com/a: ", "a.go:3:28: undefined: lock"},
		},
		{
			name: "the same function with its twin for other systems",
			files: map[string]string{
				"a_linux.go": "package a\n\nfunc lock() error { return nil }\n",
				"a_other.go": "//go:build !linux\n\npackage a\n\nfunc lock() error { return nil }\n",
				"a.go":       "package a\n\nfunc Lock() error { return lock() }\n",
			},
			goos:   "darwin,linux,windows",
			status: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/a\n\ngo 1.22\n"), 0o644))
			for name, src := range tc.files {
				require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644))
			}
			var stdout, stderr bytes.Buffer
			status := run([]string{"-C", dir, "-goos", tc.goos, "./..."}, &stdout, &stderr)
			assert.Equal(t, tc.status, status, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
			for _, e := range tc.errs {
				assert.Contains(t, stderr.String(), e)
			}
			if tc.status == 0 {
				assert.Empty(t, stderr.String())
				assert.Contains(t, stdout.String(), "0 errors")
			}
		})
	}
}

// TestCrosscheckUnloadable: a module that cannot be loaded is status 2,
// not a pass.
func TestCrosscheckUnloadable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	status := run([]string{"-C", filepath.Join(t.TempDir(), "missing"), "./..."}, &stdout, &stderr)
	assert.Equal(t, 2, status, "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	assert.Contains(t, stderr.String(), "crosscheck: GOOS=darwin:")
}
