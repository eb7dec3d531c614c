// Command crosscheck type-checks the packages of a module for other
// operating systems, from source, without compiling them: what
// `GOOS=darwin go build ./...` finds (a Linux-only identifier outside a
// _linux.go file, a missing build-tagged twin) in seconds instead of the
// minutes a cold cross-compile of every dependency takes.
//
// Usage, from this directory (make lint does):
//
//	go run . -C ../.. -goos darwin ./...
//
// It prints each error with its file and line and exits 1 if there is
// one, 2 if the packages cannot be loaded. A module of its own, so that
// golang.org/x/tools stays out of pullguard's go.mod.
package main
