#!/bin/sh
# Rebuilds the fixture in this directory: a record store of schema version 1
# (records.db, records.gen, hashkey), written by the tracker of a commit
# from before the schema version was recorded, and expected.json, what that
# tracker made of it at its next start (records and decisions under every
# policy). TestSchema1StoreIsMigrated opens it with today's tracker.
#
#   credtracker/testdata/schema1/generate.sh [commit]    (default 3340569)
#
# It exports the commit with git archive into a temporary directory (no
# worktree, nothing in the repository changes), adds this package's
# schema1_fixture_test.go (TestWriteSchema1Fixture) to its credtracker
# package and runs it there.
set -eu
commit=${1:-3340569}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$repo" archive "$commit" | tar -x -C "$tmp"
if grep -rqs keySchema "$tmp/credtracker/"; then
	echo "$commit already records the schema version: give a commit that writes schema version 1" >&2
	exit 1
fi
cp "$here/../../schema1_fixture_test.go" "$tmp/credtracker/zz_schema1_fixture_test.go"
cd "$tmp"
PULLGUARD_SCHEMA1_OUT="$here" PULLGUARD_SCHEMA1_COMMIT="$(git -C "$repo" rev-parse "$commit")" \
	go test -count=1 -run '^TestWriteSchema1Fixture$' ./credtracker/
