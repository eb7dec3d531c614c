package criruntime_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/internal/durable/durabletest"
	"github.com/pullguard/pullguard/pkg/criruntime"
)

// TestStoreWritesAreDurable shows the order of the embedded runtime's
// writes: each blob written, fsynced and renamed from ingest/ into blobs/;
// blobs/ fsynced once, before the index that names them is replaced (written,
// fsynced, renamed, its directory fsynced); and an unreadable index
// rebuilt the same way.
func TestStoreWritesAreDurable(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before prepares dir; do is recorded.
		before func(t *testing.T, reg *testRegistry, dir string)
		do     func(t *testing.T, reg *testRegistry, dir string)
		// wantBlobs says do writes every blob.
		wantBlobs bool
	}{{
		name: "a pull",
		do: func(t *testing.T, reg *testRegistry, dir string) {
			_, err := newEmbedded(t, dir).PullImage(context.Background(), spec(reg.ref("public/app:v1")), nil, nil)
			require.NoError(t, err)
		},
		wantBlobs: true,
	}, {
		name: "an unreadable index rebuilt",
		before: func(t *testing.T, reg *testRegistry, dir string) {
			e := newEmbedded(t, dir)
			_, err := e.PullImage(context.Background(), spec(reg.ref("public/app:v1")), nil, nil)
			require.NoError(t, err)
			require.NoError(t, e.Close(context.Background()))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "images.json"), []byte("{torn"), 0o600))
		},
		do: func(t *testing.T, reg *testRegistry, dir string) {
			assert.Len(t, imagesOf(t, newEmbedded(t, dir)), 1, "the image is rebuilt")
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			reg := newTestRegistry(t)
			reg.makePublic("public/app")
			reg.push(reg.ref("public/app:v1"), randomImage(t, 2))
			dir := t.TempDir()
			if tc.before != nil {
				tc.before(t, reg, dir)
			}
			rec := durabletest.Record(t, dir)
			tc.do(t, reg, dir)

			blobs := filepath.Join(dir, "content", "blobs", "sha256")
			index := filepath.Join(dir, "images.json")
			assert.Equal(t, [][]string{durabletest.Durable}, rec.Writes(index), "the index: %v", rec.Ops())
			if !tc.wantBlobs {
				return
			}
			names, _ := durabletest.List(t, blobs)
			require.Len(t, names, 4, "manifest, config, two layers")
			syncBlobs := rec.Index(durabletest.StepSyncDir, blobs, 0)
			for _, name := range names {
				assert.Equal(t, [][]string{durabletest.Durable}, rec.Writes(filepath.Join(blobs, name)), "blob %s: %v", name, rec.Ops())
				assert.Less(t, rec.Index(durabletest.StepRename, filepath.Join(blobs, name), 0), syncBlobs, "blob %s renamed before blobs/ is fsynced", name)
			}
			assert.Equal(t, -1, rec.Index(durabletest.StepSyncDir, blobs, syncBlobs+1), "blobs/ is fsynced once for the pull")
			assert.Less(t, syncBlobs, rec.Index(durabletest.StepRename, index, 0), "the blobs are durable before the index names them")
		})
	}
}

func imagesOf(t *testing.T, e *criruntime.Embedded) []string {
	t.Helper()
	imgs, err := e.ListImages(context.Background(), nil)
	require.NoError(t, err)
	var ids []string
	for _, img := range imgs {
		ids = append(ids, img.Id)
	}
	return ids
}

// TestPullCrash kills a pull after each of its steps (a child process:
// the registry is the child's own) and opens the state again: the image
// is there, whole, or not at all; every blob holds what its name says; and
// the ingest directory, where a killed pull leaves its temporary files, is
// emptied.
func TestPullCrash(t *testing.T) {
	reg := newTestRegistry(t)
	reg.makePublic("public/app")
	reg.push(reg.ref("public/app:v1"), randomImage(t, 1))
	completed, seen := false, false
	durabletest.Crash(t, durabletest.CrashCase{
		Write: func(dir string) error {
			e, err := criruntime.NewEmbedded(dir, criruntime.WithTransport(http.DefaultTransport))
			if err != nil {
				return err
			}
			_, err = e.PullImage(context.Background(), spec(reg.ref("public/app:v1")), nil, nil)
			return err
		},
		Check: func(t *testing.T, dir string, o durabletest.Outcome) {
			if o.Steps == 0 {
				return // killed before the state directory was made
			}
			e := newEmbedded(t, dir)
			images := imagesOf(t, e)
			switch {
			case !o.Killed:
				completed = true
				assert.Len(t, images, 1, "the completed pull")
			case len(images) == 1:
				seen = true
			default:
				assert.Empty(t, images)
				assert.False(t, seen, "the image was there after an earlier step")
			}
			for _, img := range images {
				st, err := e.ImageStatus(context.Background(), spec(img), false)
				require.NoError(t, err)
				assert.NotNil(t, st.Image, "the listed image %s is there", img)
			}
			blobs, tmp := durabletest.List(t, filepath.Join(dir, "content", "blobs", "sha256"))
			assert.Empty(t, tmp, "temporary files in blobs/")
			for _, name := range blobs {
				data, err := os.ReadFile(filepath.Join(dir, "content", "blobs", "sha256", name))
				require.NoError(t, err)
				sum := sha256.Sum256(data)
				assert.Equal(t, name, hex.EncodeToString(sum[:]), "blob %s holds other bytes", name)
			}
			files, tmp := durabletest.List(t, filepath.Join(dir, "content", "ingest"))
			assert.Empty(t, append(files, tmp...), "opened again, the runtime empties ingest/")
		},
	})
	assert.True(t, completed)
	assert.True(t, seen, "some kill came after the index was in place")
}
