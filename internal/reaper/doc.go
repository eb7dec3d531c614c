// Package reaper holds the reaper, a supervisor that runs a program so that
// nothing the program starts outlives it. On Linux the program runs under a
// reaper: the running executable started again (/proc/self/exe, marked by
// PULLGUARD_PLUGIN_REAPER=<parent pid>), which makes itself a child
// subreaper (PR_SET_CHILD_SUBREAPER), starts the program, and when the
// program exits, or when it is told to stop (SIGTERM, also sent when its
// parent dies), kills and reaps every process left below it. A descendant
// that called setsid or double-forked leaves the program's process group,
// but not the reaper's subtree: when its parent dies it is re-parented to
// the reaper, which kills it. No privileges and no cgroup delegation are
// needed.
//
// pkg/credentialprovider runs its plugins through it. The reaper is entered
// from this package's init, which depends on the standard library and x/sys
// only, so that it starts before the heavier packages of the executable
// initialize. Every executable that runs programs through Command must link
// this package (any importer does).
package reaper
