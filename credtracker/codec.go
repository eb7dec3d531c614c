package credtracker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/pullguard/pullguard/pkg/credential"
)

// Stored objects are versioned like Kubernetes objects: each value starts
// with a header naming its apiVersion and kind, and ends with a CRC-32C of
// everything before it. bbolt checksums only its meta pages, so the
// checksum is what turns a flipped bit in a value into a detected, untrusted
// record instead of a silently different one.
//
//	value   = magic "pgct" | version byte | kind byte | payload | crc32c (4 bytes, little endian)
//	string  = uvarint length | bytes
//	time    = varint Unix nanoseconds (0 for the zero time)
//
// The checksum covers the value's store key too (crc32c(key || value
// without its checksum)), so the key is not stored twice yet a damaged key
// is caught like a damaged value.
//
// Version 1 is apiVersion credtracker.pullguard.io/v1. The payloads are
// described beside each encoder below (the StoreSchema value's in
// schema.go); docs/architecture.md has the table. Which versions a store
// may hold is part of its schema version (schema.go): a store whose
// schema this pullguard reads holds no value of another version, so a
// value of another version is damage.
const (
	// APIVersion is the version of every object credtracker stores.
	APIVersion = "credtracker.pullguard.io/v1"

	magic         = "pgct"
	formatVersion = 1
	headerLen     = len(magic) + 2
	trailerLen    = 4
)

type kind byte

const (
	kindImagePulledRecord kind = 1
	kindImagePullIntent   kind = 2
	kindStoreStatus       kind = 3
	kindStoreSchema       kind = 4 // its encoding never changes: see schema.go
)

func (k kind) String() string {
	switch k {
	case kindImagePulledRecord:
		return "ImagePulledRecord"
	case kindImagePullIntent:
		return "ImagePullIntent"
	case kindStoreStatus:
		return "StoreStatus"
	case kindStoreSchema:
		return "StoreSchema"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// ErrCorruptRecord is wrapped by every decoding error: the bytes are not a
// record this version can trust.
var ErrCorruptRecord = errors.New("corrupt record")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Bounds a decoder enforces, so that corrupt lengths cannot make it
// allocate without limit.
const (
	maxStringLen = 4096
	maxListLen   = 1 << 16
)

type encoder struct{ buf []byte }

func newEncoder(k kind, sizeHint int) *encoder {
	e := &encoder{buf: make([]byte, 0, headerLen+sizeHint+trailerLen)}
	e.buf = append(e.buf, magic...)
	e.buf = append(e.buf, formatVersion, byte(k))
	return e
}

func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) str(s string)     { e.uvarint(uint64(len(s))); e.buf = append(e.buf, s...) }
func (e *encoder) bytes(b []byte)   { e.buf = append(e.buf, b...) }
func (e *encoder) flag(b bool) {
	if b {
		e.buf = append(e.buf, 1)
	} else {
		e.buf = append(e.buf, 0)
	}
}
func (e *encoder) time(t time.Time) {
	if t.IsZero() {
		e.buf = binary.AppendVarint(e.buf, 0)
		return
	}
	e.buf = binary.AppendVarint(e.buf, t.UnixNano())
}

// finish appends the checksum of key and the value so far.
func (e *encoder) finish(key string) []byte {
	return binary.LittleEndian.AppendUint32(e.buf, checksum(key, e.buf))
}

func checksum(key string, body []byte) uint32 {
	return crc32.Update(crc32.Checksum([]byte(key), castagnoli), castagnoli, body)
}

type decoder struct {
	buf []byte
	err error
}

// newDecoder checks the header and checksum of data, stored under key, and
// returns a decoder over its payload.
func newDecoder(key string, data []byte, want kind) (*decoder, error) {
	if len(data) < headerLen+trailerLen {
		return nil, fmt.Errorf("%w: %d bytes is too short", ErrCorruptRecord, len(data))
	}
	body, sum := data[:len(data)-trailerLen], binary.LittleEndian.Uint32(data[len(data)-trailerLen:])
	if got := checksum(key, body); got != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorruptRecord)
	}
	if string(body[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: not a credtracker object", ErrCorruptRecord)
	}
	if v := body[len(magic)]; v != formatVersion {
		return nil, fmt.Errorf("%w: unsupported format version %d", ErrCorruptRecord, v)
	}
	if k := kind(body[len(magic)+1]); k != want {
		return nil, fmt.Errorf("%w: kind %s, want %s", ErrCorruptRecord, k, want)
	}
	return &decoder{buf: body[headerLen:]}, nil
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorruptRecord}, args...)...)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("%s: malformed number", what)
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

func (d *decoder) length(what string, max uint64) int {
	n := d.uvarint(what)
	if n > max || n > uint64(len(d.buf)) {
		d.fail("%s: length %d out of range", what, n)
		return 0
	}
	return int(n)
}

func (d *decoder) str(what string) string {
	n := d.length(what, maxStringLen)
	if d.err != nil {
		return ""
	}
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}

func (d *decoder) flag(what string) bool {
	if d.err != nil {
		return false
	}
	if len(d.buf) < 1 || d.buf[0] > 1 {
		d.fail("%s: malformed flag", what)
		return false
	}
	b := d.buf[0] == 1
	d.buf = d.buf[1:]
	return b
}

func (d *decoder) time(what string) time.Time {
	if d.err != nil {
		return time.Time{}
	}
	v, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail("%s: malformed time", what)
		return time.Time{}
	}
	d.buf = d.buf[n:]
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}

func (d *decoder) hash(what string) (h credential.Hash) {
	if d.err != nil {
		return h
	}
	if len(d.buf) < len(h) {
		d.fail("%s: truncated hash", what)
		return h
	}
	copy(h[:], d.buf)
	d.buf = d.buf[len(h):]
	return h
}

func (d *decoder) end() error {
	if d.err == nil && len(d.buf) != 0 {
		d.fail("%d bytes of trailing data", len(d.buf))
	}
	return d.err
}

// encodeRecord encodes an ImagePulledRecord:
//
//	unknownOrigin string | updated time | count uvarint | repository*
//
// (the image ref is the store key)
//
//	repository = name string | nodeAccessible flag | updated time |
//	             count uvarint | (namespace, name, uid string | hash [32]byte | verified time)* |
//	             count uvarint | (namespace, name, uid string | verified time)*
func encodeRecord(r *ImageRecord) []byte {
	e := newEncoder(kindImagePulledRecord, 32+len(r.Repositories)*160)
	e.str(r.UnknownOrigin)
	e.time(r.Updated)
	e.uvarint(uint64(len(r.Repositories)))
	for _, name := range sortedKeys(r.Repositories) {
		rr := r.Repositories[name]
		e.str(name)
		e.flag(rr.NodeAccessible)
		e.time(rr.Updated)
		e.uvarint(uint64(len(rr.Secrets)))
		for _, s := range rr.Secrets {
			e.str(s.Namespace)
			e.str(s.Name)
			e.str(s.UID)
			e.bytes(s.Hash[:])
			e.time(s.Verified)
		}
		e.uvarint(uint64(len(rr.ServiceAccounts)))
		for _, sa := range rr.ServiceAccounts {
			e.str(sa.Namespace)
			e.str(sa.Name)
			e.str(sa.UID)
			e.time(sa.Verified)
		}
	}
	return e.finish(r.ImageRef)
}

// decodeRecord decodes and validates a stored record; key is the store key
// it was found under, which must be its image ref.
func decodeRecord(key string, data []byte) (*ImageRecord, error) {
	if key == "" {
		return nil, fmt.Errorf("%w: empty image ref", ErrCorruptRecord)
	}
	d, err := newDecoder(key, data, kindImagePulledRecord)
	if err != nil {
		return nil, err
	}
	r := &ImageRecord{ImageRef: key, UnknownOrigin: d.str("unknownOrigin"), Updated: d.time("updated")}
	n := d.length("repositories", maxListLen)
	r.Repositories = make(map[string]*RepositoryRecord, n)
	for i := 0; i < n && d.err == nil; i++ {
		name := d.str("repository name")
		rr := &RepositoryRecord{NodeAccessible: d.flag("nodeAccessible"), Updated: d.time("repository updated")}
		if ns := d.length("secrets", maxListLen); ns > 0 {
			rr.Secrets = make([]SecretEntry, ns)
			for j := range rr.Secrets {
				rr.Secrets[j] = SecretEntry{Namespace: d.str("secret namespace"), Name: d.str("secret name"), UID: d.str("secret uid"), Hash: d.hash("secret hash"), Verified: d.time("secret verified")}
			}
		}
		if ns := d.length("serviceAccounts", maxListLen); ns > 0 {
			rr.ServiceAccounts = make([]ServiceAccountEntry, ns)
			for j := range rr.ServiceAccounts {
				rr.ServiceAccounts[j] = ServiceAccountEntry{Namespace: d.str("serviceAccount namespace"), Name: d.str("serviceAccount name"), UID: d.str("serviceAccount uid"), Verified: d.time("serviceAccount verified")}
			}
		}
		if d.err != nil {
			break
		}
		if err := validateRepository(name, rr); err != nil {
			return nil, fmt.Errorf("%w: repositories[%d]: %v", ErrCorruptRecord, i, err)
		}
		if _, dup := r.Repositories[name]; dup {
			return nil, fmt.Errorf("%w: repositories[%d]: %q is duplicated", ErrCorruptRecord, i, name)
		}
		r.Repositories[name] = rr
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	return r, nil
}

func validateRepository(name string, rr *RepositoryRecord) error {
	if norm, err := RepositoryName(name); err != nil || norm != name {
		return fmt.Errorf("%q is not a normalized repository name", name)
	}
	if rr.NodeAccessible && (len(rr.Secrets) > 0 || len(rr.ServiceAccounts) > 0) {
		return errors.New("node-accessible and lists credentials")
	}
	for j, s := range rr.Secrets {
		if s.Namespace == "" || s.Name == "" {
			return fmt.Errorf("secrets[%d] has no namespace or name", j)
		}
	}
	for j, sa := range rr.ServiceAccounts {
		if sa.Namespace == "" || sa.Name == "" {
			return fmt.Errorf("serviceAccounts[%d] has no namespace or name", j)
		}
	}
	return nil
}

// encodeIntent encodes an ImagePullIntent: image string (also its key) |
// since time (when the pull started; stores written before it was added
// end after the image).
func encodeIntent(image string, since time.Time) []byte {
	e := newEncoder(kindImagePullIntent, len(image)+12)
	e.str(image)
	e.time(since)
	return e.finish(image)
}

// decodeIntent returns the image of a stored intent; key is the store key,
// which must be the intent's normalized image.
func decodeIntent(key string, data []byte) (image string, since time.Time, err error) {
	d, err := newDecoder(key, data, kindImagePullIntent)
	if err != nil {
		return "", time.Time{}, err
	}
	image = d.str("image")
	if d.err == nil && len(d.buf) > 0 {
		since = d.time("since")
	}
	if err := d.end(); err != nil {
		return "", time.Time{}, err
	}
	if image != key {
		return "", time.Time{}, fmt.Errorf("%w: intent image %q does not match its key %q", ErrCorruptRecord, image, key)
	}
	return image, since, nil
}

// storeStatus is kept in the store once it has been recovered.
type storeStatus struct {
	RecoveredAt    time.Time
	RecoveryReason string
	AsidePath      string
	SeedPending    bool
}

// encodeStatus encodes a StoreStatus:
//
//	recoveredAt time | recoveryReason string | asidePath string | seedPending flag
func encodeStatus(s storeStatus) []byte {
	e := newEncoder(kindStoreStatus, 64+len(s.RecoveryReason)+len(s.AsidePath))
	e.time(s.RecoveredAt)
	e.str(s.RecoveryReason)
	e.str(s.AsidePath)
	e.flag(s.SeedPending)
	return e.finish(string(keyStatus))
}

func decodeStatus(data []byte) (storeStatus, error) {
	d, err := newDecoder(string(keyStatus), data, kindStoreStatus)
	if err != nil {
		return storeStatus{}, err
	}
	s := storeStatus{RecoveredAt: d.time("recoveredAt"), RecoveryReason: d.str("recoveryReason"), AsidePath: d.str("asidePath"), SeedPending: d.flag("seedPending")}
	return s, d.end()
}
