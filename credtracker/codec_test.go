package credtracker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pullguard/pullguard/pkg/credential"
)

const codecRef = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func sampleRecord() *ImageRecord {
	now := time.Date(2026, 11, 21, 12, 0, 0, 123, time.UTC)
	var h credential.Hash
	for i := range h {
		h[i] = byte(i)
	}
	r := (*ImageRecord)(nil).withPull(codecRef, "registry.example/team-a/app",
		credential.Source{Kind: credential.SourceSecret, Namespace: "team-a", Name: "regcred", UID: "6f1c2b8e-3d4a-4c5b-9e7f-0a1b2c3d4e5f"}, h, now, 100, 0)
	r = r.withPull(codecRef, "registry.example/team-a/app",
		credential.Source{Kind: credential.SourceServiceAccount, Namespace: "team-a", Name: "builder", UID: "sa-uid"}, credential.Hash{}, now, 100, 0)
	r = r.withPull(codecRef, "registry.example/public/app", credential.Source{}, credential.Hash{}, now, 100, 0)
	return r
}

func TestRecordRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		rec  *ImageRecord
	}{
		{name: "secrets, service accounts and node-accessible", rec: sampleRecord()},
		{name: "unknown origin, no repositories", rec: &ImageRecord{ImageRef: codecRef, UnknownOrigin: "record store was rebuilt", Repositories: map[string]*RepositoryRecord{}}},
		{name: "pulled with no known credential", rec: (*ImageRecord)(nil).withPulledUnknown(codecRef, "docker.io/library/alpine", time.Unix(0, 1).UTC())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := encodeRecord(tt.rec)
			got, err := decodeRecord(codecRef, data)
			require.NoError(t, err)
			assert.Equal(t, tt.rec, got)
		})
	}
}

func TestRecordDecodeRejects(t *testing.T) {
	good := encodeRecord(sampleRecord())
	tests := []struct {
		name string
		key  string
		data []byte
		msg  string
	}{
		{name: "empty", key: codecRef, data: nil, msg: "too short"},
		{name: "stored under another key", key: "sha256:other", data: good, msg: "checksum"},
		{name: "truncated", key: codecRef, data: good[:len(good)-10], msg: "checksum"},
		{name: "intent where a record belongs", key: codecRef, data: encodeIntent(codecRef, time.Time{}), msg: "kind ImagePullIntent"},
		{name: "future version", key: codecRef, data: withHeader(good, 4, 2), msg: "format version 2"},
		{name: "not ours", key: codecRef, data: withHeader(good, 0, 'x'), msg: "not a credtracker object"},
		{name: "node-accessible with credentials", key: codecRef, data: encodeRecord(&ImageRecord{ImageRef: codecRef, Repositories: map[string]*RepositoryRecord{
			"registry.example/a": {NodeAccessible: true, Secrets: []SecretEntry{{Namespace: "n", Name: "s"}}},
		}}), msg: "node-accessible and lists credentials"},
		{name: "unnormalized repository", key: codecRef, data: encodeRecord(&ImageRecord{ImageRef: codecRef, Repositories: map[string]*RepositoryRecord{
			"alpine": {NodeAccessible: true},
		}}), msg: "not a normalized repository name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeRecord(tt.key, tt.data)
			require.ErrorIs(t, err, ErrCorruptRecord)
			assert.Contains(t, err.Error(), tt.msg)
		})
	}
}

// withHeader rewrites byte i of data's header to b and fixes the checksum,
// so that only the header check can reject it.
func withHeader(data []byte, i int, b byte) []byte {
	out := append([]byte(nil), data[:len(data)-trailerLen]...)
	out[i] = b
	e := &encoder{buf: out}
	return e.finish(codecRef)
}

func TestEveryFlippedBitIsDetected(t *testing.T) {
	good := encodeRecord(sampleRecord())
	for i := range len(good) * 8 {
		data := append([]byte(nil), good...)
		data[i/8] ^= 1 << (i % 8)
		_, err := decodeRecord(codecRef, data)
		require.ErrorIs(t, err, ErrCorruptRecord, "bit %d", i)
	}
}

func TestIntentAndStatusRoundTrip(t *testing.T) {
	since := time.Unix(1700000000, 42).UTC()
	img, gotSince, err := decodeIntent("docker.io/library/alpine:3", encodeIntent("docker.io/library/alpine:3", since))
	require.NoError(t, err)
	assert.Equal(t, "docker.io/library/alpine:3", img)
	assert.Equal(t, since, gotSince)
	_, _, err = decodeIntent("docker.io/library/other:3", encodeIntent("docker.io/library/alpine:3", since))
	assert.ErrorIs(t, err, ErrCorruptRecord, "an intent moved to another key is caught")

	// An intent written before the start time was recorded: the image alone.
	e := newEncoder(kindImagePullIntent, 32)
	e.str("docker.io/library/alpine:3")
	img, gotSince, err = decodeIntent("docker.io/library/alpine:3", e.finish("docker.io/library/alpine:3"))
	require.NoError(t, err)
	assert.Equal(t, "docker.io/library/alpine:3", img)
	assert.True(t, gotSince.IsZero())

	st := storeStatus{RecoveredAt: time.Unix(100, 5).UTC(), RecoveryReason: "invalid database", AsidePath: "/x/records.db.unreadable", SeedPending: true}
	got, err := decodeStatus(encodeStatus(st))
	require.NoError(t, err)
	assert.Equal(t, st, got)
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(sampleRecord()))
	f.Add(encodeRecord(&ImageRecord{ImageRef: codecRef, UnknownOrigin: "x", Repositories: map[string]*RepositoryRecord{}}))
	f.Add(encodeIntent("docker.io/library/alpine:3", time.Unix(1, 0)))
	f.Add([]byte("pgct\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRecord(codecRef, data)
		if err != nil {
			return
		}
		// Whatever decodes must survive a round trip unchanged and be valid.
		again, err := decodeRecord(codecRef, encodeRecord(r))
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if len(again.Repositories) != len(r.Repositories) || again.ImageRef != r.ImageRef || again.UnknownOrigin != r.UnknownOrigin {
			t.Fatalf("round trip changed the record")
		}
		for name, rr := range r.Repositories {
			if err := validateRepository(name, rr); err != nil {
				t.Fatalf("decoded an invalid repository: %v", err)
			}
		}
	})
}
