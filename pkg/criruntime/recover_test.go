package criruntime_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/criruntime"
)

// TestUnreadableIndexIsSetAsideAndRebuilt: whatever makes images.json
// unreadable, the runtime opens, keeps the damaged file aside, lists the
// stored images by ID (without names: names cannot be recovered), and a
// new pull of a name asks the registry for the manifest only.
func TestUnreadableIndexIsSetAsideAndRebuilt(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{name: "truncated", damage: func(t *testing.T, p string) { require.NoError(t, os.Truncate(p, 17)) }},
		{name: "empty", damage: func(t *testing.T, p string) { require.NoError(t, os.Truncate(p, 0)) }},
		{name: "binary garbage", damage: func(t *testing.T, p string) {
			require.NoError(t, os.WriteFile(p, []byte{0xff, 0x00, 0x1b, '[', '3', '1', 'm'}, 0o600))
		}},
		{name: "unknown kind", damage: func(t *testing.T, p string) {
			require.NoError(t, os.WriteFile(p, []byte(`{"apiVersion":"v9","kind":"Other"}`), 0o600))
		}},
		{name: "a name without its target", damage: func(t *testing.T, p string) {
			require.NoError(t, os.WriteFile(p, []byte(`{"apiVersion":"runtime.pullguard.io/v1alpha1","kind":"ImageIndex","names":{"a/b:c":"sha256:`+strings.Repeat("0", 64)+`"}}`), 0o600))
		}},
		{name: "a directory in its place", damage: func(t *testing.T, p string) {
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Mkdir(p, 0o700))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg, dir, e := storeWithTwoImages(t)
			before, err := e.ListImages(context.Background(), nil)
			require.NoError(t, err)
			require.Len(t, before, 2)
			require.NoError(t, e.Close(context.Background()))
			tt.damage(t, filepath.Join(dir, "images.json"))

			e = newEmbedded(t, dir)

			after, err := e.ListImages(context.Background(), nil)
			require.NoError(t, err)
			require.Len(t, after, len(before), "every stored image is rebuilt")
			for i := range before {
				assert.Equal(t, before[i].Id, after[i].Id)
				assert.Empty(t, after[i].RepoTags, "names are not recovered")
				assert.Empty(t, after[i].RepoDigests)
				assert.NotNil(t, status(t, e, before[i].Id), "found by ID")
			}
			aside, err := filepath.Glob(filepath.Join(dir, "images.json.unreadable-*"))
			require.NoError(t, err)
			assert.Len(t, aside, 1, "the damaged index is kept aside")

			reg.reset()
			_, err = e.PullImage(context.Background(), spec(reg.ref("public/tool:v1")), nil, nil)
			require.NoError(t, err)
			assert.Zero(t, reg.count(kindBlob), "the content was kept: a pull fetches the manifest only")
			assert.Equal(t, 1, reg.count(kindManifest))

			e = reopen(t, e, dir)
			assert.NotNil(t, status(t, e, reg.ref("public/tool:v1")), "the rebuilt index is durable")
			listed, err := e.ListImages(context.Background(), nil)
			require.NoError(t, err)
			assert.Len(t, listed, 2, "the unnamed recovered image stays")
			for _, img := range listed {
				require.NoError(t, e.RemoveImage(context.Background(), spec(img.Id)))
			}
			assert.Zero(t, usedBytes(t, e), "recovered images can be removed")
		})
	}
}

// TestOneEmbeddedPerDirectory: a second Embedded on the same directory fails
// at once, naming the holder, and does not touch the directory (an
// in-flight download's ingest file survives).
func TestOneEmbeddedPerDirectory(t *testing.T) {
	dir := t.TempDir()
	e := newEmbedded(t, dir)
	ingest := filepath.Join(dir, "content", "ingest", "in-flight")
	require.NoError(t, os.WriteFile(ingest, []byte("partial"), 0o600))

	_, err := criruntime.NewEmbedded(dir)

	require.ErrorIs(t, err, criruntime.ErrStateInUse)
	assert.Contains(t, err.Error(), "is held by process ")
	assert.FileExists(t, ingest, "the second opener touched nothing")
	require.NoError(t, e.Close(context.Background()))
	_, err = os.Stat(ingest)
	require.NoError(t, err)
	reopened := newEmbedded(t, dir)
	assert.NoFileExists(t, ingest, "the owner cleans up what a crash left")
	require.NoError(t, reopened.Close(context.Background()))
}

// FuzzOpenWithAnyIndex: whatever images.json holds, the runtime opens and
// never panics; when the index is unreadable it is set aside and the
// stored image comes back by ID.
func FuzzOpenWithAnyIndex(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"runtime.pullguard.io/v1alpha1","kind":"ImageIndex","names":{},"targets":{}}`))
	f.Add([]byte(`{"apiVersion":`))
	f.Add([]byte{0xff, 0xfe})
	f.Add([]byte(`{"apiVersion":"runtime.pullguard.io/v1alpha1","kind":"ImageIndex","targets":{"sha256:00":null}}`))
	img := randomImage(f, 1)
	id := configDigest(f, img)
	f.Fuzz(func(t *testing.T, index []byte) {
		dir := t.TempDir()
		e := newEmbedded(t, dir)
		_, err := e.Load(context.Background(), "example.com/a/b:v1", img)
		require.NoError(t, err)
		require.NoError(t, e.Close(context.Background()))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "images.json"), index, 0o600))

		e, err = criruntime.NewEmbedded(dir)
		require.NoError(t, err)
		t.Cleanup(func() { _ = e.Close(context.Background()) })
		_, err = e.ListImages(context.Background(), nil)
		require.NoError(t, err)
		_ = status(t, e, "example.com/a/b:v1")
		aside, err := filepath.Glob(filepath.Join(dir, "images.json.unreadable-*"))
		require.NoError(t, err)
		if len(aside) > 0 { // a readable index is believed, even an empty one
			assert.NotNil(t, status(t, e, id), "the stored image is still there by ID")
		}
	})
}
