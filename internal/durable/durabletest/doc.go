// Package durabletest shows, in a caller's tests, how package durable
// writes its files: Record lists the operations in their order (the
// fsyncs a crash test cannot see, since the page cache survives a killed
// process), and Crash kills a child process after each of them and checks
// what is left.
//
// Only tests import it. Both install an FS with durable.SetFS for the
// whole process, so a test that uses them must not run in parallel with
// another that does.
package durabletest
