package credtracker

import (
	"encoding/binary"
	"encoding/hex"
	"hash/maphash"
	"time"

	"github.com/pullguard/pullguard/pkg/credential"
)

// The in-memory form of a record, in the index's arena (see index.go). All
// integers are little-endian; times are Unix nanoseconds, 0 for the zero
// time (as on disk).
//
//	group: kind u8 | refKind u8 | pad [2] | refLen u32 | nRepos u32 |
//	       unknownLen u32 | updated i64 | size u32 | ref? | unknownOrigin | entry*
//	entry: kind u8 | flags u8 | refKind u8 | pad u8 | refLen u32 | repoLen u32 |
//	       nSecrets u32 | nSAs u32 | back u32 | updated i64 | ref | repo |
//	       (hash [32] | verified i64 | coords u32)*nSecrets |
//	       (verified i64 | coords u32)*nSAs
//
// A ref of the usual form "sha256:<64 lower-case hex digits>" is kept as
// its 32 bytes (refKind refDigest), any other as it is (refRaw). Every
// entry holds its record's ref, so that a decision compares its key (ref
// and repository) in full in the entry it finds; the group holds it only
// when it has no entry (refInEntries otherwise). back is the entry's
// distance from its group. A secret's or service account's coordinates are
// kept once in the coordinates arena (coordinates.go); coords is their
// offset there.
const (
	kindGroup = 1
	kindEntry = 2

	refRaw       = 0
	refDigest    = 1
	refInEntries = 2

	groupHeader = 32
	entryHeader = 32
	secretSize  = 32 + 8 + 4
	saSize      = 8 + 4

	// Offsets in a secret: its verification time, its coordinates'
	// offset; in a service account: its coordinates' offset.
	secretVerifiedAt = 32
	secretCoordsAt   = 40
	saCoordsAt       = 8

	flagNodeAccessible = 1

	digestPrefix = "sha256:"
	digestRefLen = len(digestPrefix) + 64
)

func u32(b []byte, i int) int         { return int(binary.LittleEndian.Uint32(b[i:])) }
func i64(b []byte, i int) int64       { return int64(binary.LittleEndian.Uint64(b[i:])) }
func putU32(b []byte, i, v int)       { binary.LittleEndian.PutUint32(b[i:], uint32(v)) }
func putI64(b []byte, i int, v int64) { binary.LittleEndian.PutUint64(b[i:], uint64(v)) }

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}

// storedRef is how a ref is kept: its kind and bytes.
func storedRef(ref string) (kind byte, n int) {
	if len(ref) == digestRefLen && ref[:len(digestPrefix)] == digestPrefix && lowerHex(ref[len(digestPrefix):]) {
		return refDigest, 32
	}
	return refRaw, len(ref)
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if unhex[s[i]] > 15 {
			return false
		}
	}
	return true
}

// unhex maps a lower-case hex digit to its value, anything else to 0xff.
var unhex = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
	}
	return t
}()

func putRef(b []byte, kind byte, ref string) int {
	if kind == refRaw {
		return copy(b, ref)
	}
	h := ref[len(digestPrefix):]
	for i := range 32 {
		b[i] = unhex[h[2*i]]<<4 | unhex[h[2*i+1]]
	}
	return 32
}

// refIs reports whether the stored ref b of kind is ref.
func refIs(kind byte, b []byte, ref string) bool {
	if kind == refRaw {
		return string(b) == ref
	}
	if len(ref) != digestRefLen || ref[:len(digestPrefix)] != digestPrefix {
		return false
	}
	h := ref[len(digestPrefix):digestRefLen]
	for i, c := range b[:32] {
		if h[2*i] != hexDigits[c>>4] || h[2*i+1] != hexDigits[c&15] {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// appendRef appends the stored ref b of kind in its string form.
func appendRef(dst []byte, kind byte, b []byte) []byte {
	if kind == refRaw {
		return append(dst, b...)
	}
	return hex.AppendEncode(append(dst, digestPrefix...), b[:32])
}

// groupView is a record's group in an arena, with the coordinates arena
// its entries refer to.
type groupView struct{ b, coords []byte }

func (g groupView) refKind() byte   { return g.b[1] }
func (g groupView) refLen() int     { return u32(g.b, 4) }
func (g groupView) repos() int      { return u32(g.b, 8) }
func (g groupView) unknownLen() int { return u32(g.b, 12) }
func (g groupView) updated() int64  { return i64(g.b, 16) }
func (g groupView) size() int       { return u32(g.b, 24) }
func (g groupView) unknownOrigin() bool {
	return g.unknownLen() > 0
}

// firstEntry is the offset of the group's first entry.
func (g groupView) firstEntry() int { return groupHeader + g.refLen() + g.unknownLen() }

// refIs reports whether the record is ref's.
func (g groupView) refIs(ref string) bool {
	if k := g.refKind(); k != refInEntries {
		return refIs(k, g.b[groupHeader:groupHeader+g.refLen()], ref)
	}
	return entryAt(g.b[g.firstEntry():], nil).refIs(ref)
}

// appendRef appends the record's ref in its string form.
func (g groupView) appendRef(dst []byte) []byte {
	if k := g.refKind(); k != refInEntries {
		return appendRef(dst, k, g.b[groupHeader:groupHeader+g.refLen()])
	}
	e := entryAt(g.b[g.firstEntry():], nil)
	return appendRef(dst, e.b[2], e.ref())
}

func (g groupView) refString() string { return string(g.appendRef(nil)) }

// refHash is maphash's hash of the record's ref in its string form.
func (g groupView) refHash(seed maphash.Seed) uint64 {
	var buf [digestRefLen]byte
	return maphash.Bytes(seed, g.appendRef(buf[:0]))
}

// entryIter walks a group's entries; pos is the current entry's offset in
// the group.
type entryIter struct {
	g        groupView
	pos, idx int
	e        repoView
}

func (g groupView) entries() entryIter {
	return entryIter{g: g, pos: g.firstEntry(), idx: -1}
}

func (it *entryIter) next() bool {
	if it.idx >= 0 {
		it.pos += it.e.size()
	}
	it.idx++
	if it.idx >= it.g.repos() {
		return false
	}
	it.e = entryAt(it.g.b[it.pos:], it.g.coords)
	return true
}

// repoView is one repository's entry in an arena, with the coordinates
// arena it refers to; sec is the offset of its secrets.
type repoView struct {
	b, coords []byte
	sec       int
}

func entryAt(b, coords []byte) repoView {
	return repoView{b: b, coords: coords, sec: entryHeader + u32(b, 4) + u32(b, 8)}
}

func (v repoView) nodeAccessible() bool { return v.b[1]&flagNodeAccessible != 0 }
func (v repoView) refLen() int          { return u32(v.b, 4) }
func (v repoView) repoLen() int         { return u32(v.b, 8) }
func (v repoView) secrets() int         { return u32(v.b, 12) }
func (v repoView) serviceAccounts() int { return u32(v.b, 16) }
func (v repoView) back() int            { return u32(v.b, 20) }
func (v repoView) updated() int64       { return i64(v.b, 24) }

// hashIs reports whether secret i's hash is h.
func (v repoView) hashIs(i int, h *credential.Hash) bool {
	o := v.sec + i*secretSize
	return [32]byte(v.b[o:o+32]) == *h
}

func (v repoView) secretHash(i int) credential.Hash {
	o := v.sec + i*secretSize
	return credential.Hash(v.b[o : o+32])
}

func (v repoView) secretVerified(i int) int64 { return i64(v.b, v.sec+i*secretSize+secretVerifiedAt) }

// secretCoords is the offset of secret i's coordinates in the coordinates
// arena.
func (v repoView) secretCoords(i int) int { return u32(v.b, v.sec+i*secretSize+secretCoordsAt) }

// sa is the offset of service account j in the entry.
func (v repoView) sa(j int) int { return v.sec + v.secrets()*secretSize + j*saSize }

func (v repoView) saVerified(j int) int64 { return i64(v.b, v.sa(j)) }
func (v repoView) saCoords(j int) int     { return u32(v.b, v.sa(j)+saCoordsAt) }

func (v repoView) ref() []byte { return v.b[entryHeader : entryHeader+v.refLen()] }

func (v repoView) refIs(ref string) bool { return refIs(v.b[2], v.ref(), ref) }

func (v repoView) repo() []byte {
	o := entryHeader + v.refLen()
	return v.b[o : o+v.repoLen()]
}

// eachCoords calls fn with the coordinates of each secret (sa false) and then
// each service account (sa true) until fn returns true; it reports
// whether one did.
func (v repoView) eachCoords(fn func(i int, sa bool, ns, name, uid []byte) bool) bool {
	for i := range v.secrets() {
		if ns, name, uid := coordsAt(v.coords, v.secretCoords(i)); fn(i, false, ns, name, uid) {
			return true
		}
	}
	for j := range v.serviceAccounts() {
		if ns, name, uid := coordsAt(v.coords, v.saCoords(j)); fn(j, true, ns, name, uid) {
			return true
		}
	}
	return false
}

// size is the entry's length in bytes.
func (v repoView) size() int { return v.sa(v.serviceAccounts()) }

// sameObject reports whether coordinates are those of src.
func sameObject(src credential.Source, ns, name, uid []byte) bool {
	return string(ns) == src.Namespace && string(name) == src.Name && string(uid) == src.UID
}

// listsSecret reports whether a secret at src's coordinates is listed.
func (v *repoView) listsSecret(src *credential.Source) bool {
	for i := range v.secrets() {
		if ns, name, uid := coordsAt(v.coords, v.secretCoords(i)); string(uid) == src.UID && string(name) == src.Name && string(ns) == src.Namespace {
			return true
		}
	}
	return false
}

// findSecret reports whether fn holds for a secret at src's coordinates.
func (v repoView) findSecret(src credential.Source, fn func(i int) bool) bool {
	return v.eachCoords(func(i int, sa bool, ns, name, uid []byte) bool {
		return !sa && sameObject(src, ns, name, uid) && fn(i)
	})
}

// findServiceAccount reports whether fn holds for a service account at
// src's coordinates.
func (v repoView) findServiceAccount(src credential.Source, fn func(j int) bool) bool {
	return v.eachCoords(func(j int, sa bool, ns, name, uid []byte) bool {
		return sa && sameObject(src, ns, name, uid) && fn(j)
	})
}

// groupIs reports whether the group at off in arena is ref's.
func groupIs(arena []byte, off int, ref string) bool {
	b := arena[off:]
	return b[0] == kindGroup && groupView{b: b}.refIs(ref)
}

// entryIs returns the entry at off in t's arena if it is the one for
// (ref, repo): its key is compared in full.
func entryIs(t *table, off int, ref, repo string) (repoView, bool) {
	b := t.arena[off:]
	if b[0] != kindEntry {
		return repoView{}, false
	}
	v := entryAt(b, t.coords)
	return v, string(v.repo()) == repo && v.refIs(ref)
}

func entrySize(refLen int, repo string, rr *RepositoryRecord) int {
	return entryHeader + refLen + len(repo) + len(rr.Secrets)*secretSize + len(rr.ServiceAccounts)*saSize
}

// groupSize is the arena bytes r takes.
func groupSize(r *ImageRecord) int {
	_, refLen := storedRef(r.ImageRef)
	n := groupHeader + len(r.UnknownOrigin)
	if len(r.Repositories) == 0 {
		n += refLen
	}
	for repo, rr := range r.Repositories {
		n += entrySize(refLen, repo, rr)
	}
	return n
}

// appendGroup appends r's group (of groupSize(r) bytes: size) to arena,
// with its entries in the order of repos (r's repository names, sorted),
// and its coordinates to coords; it appends to offs the offsets of the
// group and of its entries.
func appendGroup(arena []byte, r *ImageRecord, repos []string, size int, offs []int, coords *coordSet) ([]byte, []int) {
	kind, refLen := storedRef(r.ImageRef)
	start := len(arena)
	arena = growArena(arena, size)
	arena = arena[:start+size]
	clear(arena[start:])
	b := arena[start:]
	b[0] = kindGroup
	b[1] = refInEntries
	putU32(b, 8, len(repos))
	putU32(b, 12, len(r.UnknownOrigin))
	putI64(b, 16, unixNano(r.Updated))
	putU32(b, 24, size)
	o := groupHeader
	if len(repos) == 0 {
		b[1] = kind
		putU32(b, 4, refLen)
		o += putRef(b[o:], kind, r.ImageRef)
	}
	o += copy(b[o:], r.UnknownOrigin)
	offs = append(offs, start)
	for _, repo := range repos {
		rr := r.Repositories[repo]
		offs = append(offs, start+o)
		e := b[o:]
		e[0] = kindEntry
		if rr.NodeAccessible {
			e[1] = flagNodeAccessible
		}
		e[2] = kind
		putU32(e, 4, refLen)
		putU32(e, 8, len(repo))
		putU32(e, 12, len(rr.Secrets))
		putU32(e, 16, len(rr.ServiceAccounts))
		putU32(e, 20, o)
		putI64(e, 24, unixNano(rr.Updated))
		p := entryHeader
		p += putRef(e[p:], kind, r.ImageRef)
		p += copy(e[p:], repo)
		for _, s := range rr.Secrets {
			copy(e[p:], s.Hash[:])
			putI64(e, p+secretVerifiedAt, unixNano(s.Verified))
			putU32(e, p+secretCoordsAt, coords.intern(s.Namespace, s.Name, s.UID))
			p += secretSize
		}
		for _, sa := range rr.ServiceAccounts {
			putI64(e, p, unixNano(sa.Verified))
			putU32(e, p+saCoordsAt, coords.intern(sa.Namespace, sa.Name, sa.UID))
			p += saSize
		}
		o += p
	}
	return arena, offs
}

// record decodes the group into a new ImageRecord.
func (g groupView) record() *ImageRecord {
	o := groupHeader + g.refLen()
	r := &ImageRecord{
		ImageRef:      g.refString(),
		UnknownOrigin: string(g.b[o : o+g.unknownLen()]),
		Updated:       fromUnixNano(g.updated()),
		Repositories:  make(map[string]*RepositoryRecord, g.repos()),
	}
	for it := g.entries(); it.next(); {
		r.Repositories[string(it.e.repo())] = it.e.record()
	}
	return r
}

func (v repoView) record() *RepositoryRecord {
	rr := &RepositoryRecord{NodeAccessible: v.nodeAccessible(), Updated: fromUnixNano(v.updated())}
	if n := v.secrets(); n > 0 {
		rr.Secrets = make([]SecretEntry, n)
		for i := range rr.Secrets {
			rr.Secrets[i].Hash = v.secretHash(i)
			rr.Secrets[i].Verified = fromUnixNano(v.secretVerified(i))
		}
	}
	if n := v.serviceAccounts(); n > 0 {
		rr.ServiceAccounts = make([]ServiceAccountEntry, n)
		for j := range rr.ServiceAccounts {
			rr.ServiceAccounts[j].Verified = fromUnixNano(v.saVerified(j))
		}
	}
	v.eachCoords(func(i int, sa bool, ns, name, uid []byte) bool {
		if sa {
			rr.ServiceAccounts[i].Namespace, rr.ServiceAccounts[i].Name, rr.ServiceAccounts[i].UID = string(ns), string(name), string(uid)
		} else {
			rr.Secrets[i].Namespace, rr.Secrets[i].Name, rr.Secrets[i].UID = string(ns), string(name), string(uid)
		}
		return false
	})
	return rr
}

// relinkCoords rewrites the coordinates' offsets of g's entries with fn;
// g is a copy no reader can see yet.
func relinkCoords(g groupView, fn func(off int) int) {
	for it := g.entries(); it.next(); {
		v := it.e
		for i := range v.secrets() {
			o := v.sec + i*secretSize + secretCoordsAt
			putU32(v.b, o, fn(u32(v.b, o)))
		}
		for j := range v.serviceAccounts() {
			o := v.sa(j) + saCoordsAt
			putU32(v.b, o, fn(u32(v.b, o)))
		}
	}
}

// coordsBound is at most the bytes r's coordinates add to a coordinates
// arena.
func coordsBound(r *ImageRecord) int {
	n := 0
	for _, rr := range r.Repositories {
		for _, s := range rr.Secrets {
			n += 3*binary.MaxVarintLen64 + len(s.Namespace) + len(s.Name) + len(s.UID)
		}
		for _, sa := range rr.ServiceAccounts {
			n += 3*binary.MaxVarintLen64 + len(sa.Namespace) + len(sa.Name) + len(sa.UID)
		}
	}
	return n
}
