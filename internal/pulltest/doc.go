// Package pulltest holds the pull cases both of pullguard's front ends must
// pass alike (the image manager's EnsureImageExists and the CRI proxy's
// PullImage, both over package guardedpull), with a fake runtime
// (internal/fakeruntime's, its registry serving Image to one user) and a
// fake registry verifier to play them. Each front end's tests run the table
// through Run with a small adapter; the table asserts the same outcome
// class, records, intents and redaction on both.
//
// Only the tests of imagemanager and pkg/criproxy import it; it depends on
// pkg/guardedpull, credtracker, pkg/criruntime, internal/fakeruntime,
// internal/leak and testify.
package pulltest
