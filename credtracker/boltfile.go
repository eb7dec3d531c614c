package credtracker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// bbolt maps its file into memory and follows the page ids it finds there:
// one damaged id, or a file cut short, makes it touch memory past the end
// of the file, a SIGBUS or SIGSEGV that no recover catches. So the store
// is never handed to bbolt before parseBoltFile has walked a copy of the
// whole file, read with plain reads into a Go slice, and checked every
// page bbolt would touch: the meta page bbolt would pick, every branch and
// leaf page of every bucket, every inline bucket, the freelist page and
// every id it lists. Anything out of place is an error, never a fault: a
// slice index past the end is checked before it is made.
//
// The layout read here is bbolt's on-disk format version 2 (little endian,
// as bbolt writes it on every platform pullguard builds for):
//
//	page     = id u64 | flags u16 | count u16 | overflow u32 | elements...
//	meta     = magic u32 | version u32 | pageSize u32 | flags u32 |
//	           root bucket (root u64, sequence u64) | freelist u64 |
//	           high water mark u64 | txid u64 | fnv64a checksum u64
//	branch   = pos u32 | ksize u32 | child u64   (key at element + pos)
//	leaf     = flags u32 | pos u32 | ksize u32 | vsize u32
//	bucket   = root u64 | sequence u64 | inline leaf page when root is 0
//	freelist = count ids u64 (count 0xFFFF: the first u64 is the count)
const (
	boltMagic          = 0xED0CDAED
	boltVersion        = 2
	boltPageHeaderSize = 16
	boltElementSize    = 16
	boltBucketHeader   = 16
	boltMetaSize       = 64
	boltFlagBranch     = 0x01
	boltFlagLeaf       = 0x02
	boltFlagFreelist   = 0x10
	boltLeafBucket     = 0x01
	// boltMaxDepth bounds the tree walk, far above the depth of any
	// store the tracker writes.
	boltMaxDepth = 32
	// maxStoreSize bounds what start-up reads into memory; a larger file
	// is not read at all (every present image is then verified once more).
	maxStoreSize = 2 << 30
)

// errBoltFormat is wrapped by every structural error of parseBoltFile.
// Its messages name offsets and page ids, never stored bytes.
var errBoltFormat = errors.New("invalid store file")

// boltEntry is one key and value of a bucket.
type boltEntry struct{ key, value []byte }

// boltFile is what parseBoltFile found: every top-level bucket's entries,
// in key order (scanBoltFile leaves buckets nil and fills names).
type boltFile struct {
	buckets map[string][]boltEntry
	names   []string // the top-level buckets, in order
	txid    uint64
	pages   uint64 // the high-water mark: pages past it are never read
	used    []bool // the pages in use: reached by the walk, or the freelist's
}

// boltPages is where the walk reads the file's pages from: a copy of the
// whole file in memory (memPages), or the file itself (filePages), read a
// page at a time so that the walk never holds the whole store.
type boltPages interface {
	// size is the file's size in bytes.
	size() uint64
	// first returns the first page at off (its header and elements), valid
	// until the next call of first.
	first(off, pageSize uint64) ([]byte, error)
	// region returns the n bytes at off of a page whose first page the
	// last first call returned. A leaf page of a bucket (batch) may be
	// read into the pages' batch buffer: its bytes are then valid until
	// the next flush (filePages.flush), and the walk must not keep them.
	region(off, n uint64, batch bool) ([]byte, error)
}

// memPages are the pages of a file read whole into memory.
type memPages []byte

func (m memPages) size() uint64 { return uint64(len(m)) }

func (m memPages) first(off, pageSize uint64) ([]byte, error) {
	return m[off : off+pageSize], nil
}

func (m memPages) region(off, n uint64, _ bool) ([]byte, error) { return m[off : off+n], nil }

// filePages reads the pages of a file with plain reads (never a memory
// map). The leaf pages of the buckets go into one buffer of a fixed size;
// when it is full, flush is called (it must be done with every key and
// value the walk gave since the last flush) and the buffer is reused.
// Every other page (branches, the root bucket's, the freelist) has its own
// allocation; they are few.
type filePages struct {
	f       io.ReaderAt
	n       uint64
	scratch []byte
	buf     []byte
	flush   func() error
}

func newFilePages(f io.ReaderAt, size uint64, bufSize int, flush func() error) *filePages {
	return &filePages{f: f, n: size, buf: make([]byte, 0, bufSize), flush: flush}
}

func (p *filePages) size() uint64 { return p.n }

func (p *filePages) read(b []byte, off uint64) error {
	if _, err := p.f.ReadAt(b, int64(off)); err != nil {
		return fmt.Errorf("%w: failed to read %d bytes at offset %d: %v", errBoltFormat, len(b), off, err)
	}
	return nil
}

func (p *filePages) first(off, pageSize uint64) ([]byte, error) {
	if uint64(cap(p.scratch)) < pageSize {
		p.scratch = make([]byte, pageSize)
	}
	b := p.scratch[:pageSize]
	return b, p.read(b, off)
}

func (p *filePages) region(off, n uint64, batch bool) ([]byte, error) {
	var b []byte
	if batch && n <= uint64(cap(p.buf)) {
		if uint64(len(p.buf))+n > uint64(cap(p.buf)) {
			if err := p.flush(); err != nil {
				return nil, err
			}
			p.buf = p.buf[:0]
		}
		l := len(p.buf)
		p.buf = p.buf[:l+int(n)]
		b = p.buf[l:]
	} else {
		b = make([]byte, n)
	}
	first := copy(b, p.scratch)
	if uint64(first) < n {
		if err := p.read(b[first:], off+uint64(first)); err != nil {
			return nil, err
		}
	}
	return b, nil
}

type boltReader struct {
	src      boltPages
	pageSize uint64
	hwm      uint64 // pages in use, from the meta page
	used     []bool // pages reached by the tree walk or holding the freelist
	file     *boltFile
	// visit is called with every entry of every top-level bucket.
	visit func(bucket string, k, v []byte) error
}

// parseBoltFile checks the whole structure of a bbolt file and returns its
// buckets. It allows no nested buckets and no keys outside a bucket, as
// the store makes neither.
func parseBoltFile(data []byte) (*boltFile, error) {
	buckets := map[string][]boltEntry{}
	f, err := scanBoltFile(memPages(data), func(bucket string, k, v []byte) error {
		buckets[bucket] = append(buckets[bucket], boltEntry{k, v})
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, name := range f.names {
		if buckets[name] == nil {
			buckets[name] = []boltEntry{}
		}
	}
	f.buckets = buckets
	return f, nil
}

// scanBoltFile checks the whole structure of the bbolt file src, as
// parseBoltFile does, and calls visit with every entry of every top-level
// bucket, in the file's order: buckets by name, keys in order. With
// filePages, a key and value of a bucket are valid until the pages' next
// flush.
func scanBoltFile(src boltPages, visit func(bucket string, k, v []byte) error) (*boltFile, error) {
	r := &boltReader{src: src, pageSize: uint64(os.Getpagesize()), file: &boltFile{}, visit: visit}
	if src.size() < 2*r.pageSize {
		return nil, fmt.Errorf("%w: %d bytes is shorter than two pages", errBoltFormat, src.size())
	}
	m, err := r.meta()
	if err != nil {
		return nil, err
	}
	r.file.txid, r.file.pages = m.txid, m.hwm
	r.used = make([]bool, r.hwm)
	r.used[0], r.used[1] = true, true
	if err := r.walkRoot(m.root); err != nil {
		return nil, err
	}
	if err := r.freelist(m.freelist); err != nil {
		return nil, err
	}
	r.file.used = r.used
	return r.file, nil
}

type boltMeta struct {
	pageSize, root, freelist, hwm, txid uint64
	valid                               bool
}

func readBoltMeta(b []byte) boltMeta {
	le := binary.LittleEndian
	m := b[boltPageHeaderSize : boltPageHeaderSize+boltMetaSize]
	h := fnv.New64a()
	h.Write(m[:56])
	return boltMeta{
		pageSize: uint64(le.Uint32(m[8:])),
		root:     le.Uint64(m[16:]),
		freelist: le.Uint64(m[32:]),
		hwm:      le.Uint64(m[40:]),
		txid:     le.Uint64(m[48:]),
		valid:    le.Uint32(m[0:]) == boltMagic && le.Uint32(m[4:]) == boltVersion && le.Uint64(m[56:]) == h.Sum64(),
	}
}

// meta picks the meta page as bbolt does (the one with the higher txid if
// it is valid, else the other) and checks it.
func (r *boltReader) meta() (boltMeta, error) {
	p0, err := r.src.first(0, r.pageSize)
	if err != nil {
		return boltMeta{}, err
	}
	a := readBoltMeta(p0)
	p1, err := r.src.first(r.pageSize, r.pageSize)
	if err != nil {
		return boltMeta{}, err
	}
	b := readBoltMeta(p1)
	if b.txid > a.txid {
		a, b = b, a
	}
	m := a
	if !m.valid {
		m = b
	}
	switch {
	case !m.valid:
		return m, fmt.Errorf("%w: no valid meta page", errBoltFormat)
	case m.pageSize != r.pageSize:
		return m, fmt.Errorf("%w: page size %d, want %d", errBoltFormat, m.pageSize, r.pageSize)
	case m.hwm < 3 || m.hwm > r.src.size()/r.pageSize:
		return m, fmt.Errorf("%w: %d pages in use but the file holds %d (truncated?)", errBoltFormat, m.hwm, r.src.size()/r.pageSize)
	}
	r.hwm = m.hwm
	return m, nil
}

// page returns the header fields and the bytes of page id, marking its
// pages used; a page reached twice is an error (a cycle or a shared page).
// A leaf page of a bucket (depth > 0) may go into the pages' batch buffer.
func (r *boltReader) page(id uint64, depth int) (flags uint16, count int, region []byte, err error) {
	if id < 2 || id >= r.hwm {
		return 0, 0, nil, fmt.Errorf("%w: page id %d out of range [2, %d)", errBoltFormat, id, r.hwm)
	}
	off := id * r.pageSize
	first, err := r.src.first(off, r.pageSize)
	if err != nil {
		return 0, 0, nil, err
	}
	hdr := first[:boltPageHeaderSize]
	le := binary.LittleEndian
	if got := le.Uint64(hdr); got != id {
		return 0, 0, nil, fmt.Errorf("%w: page %d says it is page %d", errBoltFormat, id, got)
	}
	overflow := uint64(le.Uint32(hdr[12:]))
	if id+overflow >= r.hwm {
		return 0, 0, nil, fmt.Errorf("%w: page %d overflows past page %d", errBoltFormat, id, r.hwm)
	}
	for p := id; p <= id+overflow; p++ {
		if r.used[p] {
			return 0, 0, nil, fmt.Errorf("%w: page %d is reached twice", errBoltFormat, p)
		}
		r.used[p] = true
	}
	flags, count = le.Uint16(hdr[8:]), int(le.Uint16(hdr[10:]))
	region, err = r.src.region(off, (1+overflow)*r.pageSize, depth > 0 && flags == boltFlagLeaf)
	if err != nil {
		return 0, 0, nil, err
	}
	return flags, count, region, nil
}

// element returns the key (and value) an element of a page points at,
// checking that they lie inside the page.
func element(region []byte, i int, branch bool) (flags uint32, key, value []byte, child uint64, err error) {
	le := binary.LittleEndian
	e := uint64(boltPageHeaderSize + i*boltElementSize)
	if e+boltElementSize > uint64(len(region)) {
		return 0, nil, nil, 0, fmt.Errorf("%w: element %d is past the end of its page", errBoltFormat, i)
	}
	el := region[e : e+boltElementSize]
	var pos, ksize, vsize uint64
	if branch {
		pos, ksize, child = uint64(le.Uint32(el)), uint64(le.Uint32(el[4:])), le.Uint64(el[8:])
	} else {
		flags, pos, ksize, vsize = le.Uint32(el), uint64(le.Uint32(el[4:])), uint64(le.Uint32(el[8:])), uint64(le.Uint32(el[12:]))
	}
	start := e + pos
	if ksize == 0 || start+ksize+vsize > uint64(len(region)) {
		return 0, nil, nil, 0, fmt.Errorf("%w: element %d points past the end of its page", errBoltFormat, i)
	}
	return flags, region[start : start+ksize], region[start+ksize : start+ksize+vsize], child, nil
}

// walkRoot reads the root bucket, whose keys are the top-level buckets,
// and visits each one's entries.
func (r *boltReader) walkRoot(root uint64) error {
	seen := map[string]bool{}
	return r.walkPage(root, 0, nil, nil, func(flags uint32, k, v []byte) error {
		if flags != boltLeafBucket {
			return fmt.Errorf("%w: a key outside any bucket", errBoltFormat)
		}
		name := string(k)
		if seen[name] {
			return fmt.Errorf("%w: a bucket appears twice", errBoltFormat)
		}
		seen[name] = true
		r.file.names = append(r.file.names, name)
		return r.walkBucket(v, func(flags uint32, k, v []byte) error {
			if flags != 0 {
				return fmt.Errorf("%w: a nested bucket", errBoltFormat)
			}
			return r.visit(name, k, v)
		})
	})
}

// walkBucket reads a bucket from its value: a root page id, or an inline
// leaf page.
func (r *boltReader) walkBucket(v []byte, fn func(flags uint32, k, v []byte) error) error {
	if len(v) < boltBucketHeader {
		return fmt.Errorf("%w: a bucket header of %d bytes", errBoltFormat, len(v))
	}
	if root := binary.LittleEndian.Uint64(v); root != 0 {
		return r.walkPage(root, 1, nil, nil, fn)
	}
	inline := v[boltBucketHeader:]
	if len(inline) < boltPageHeaderSize {
		return fmt.Errorf("%w: an inline bucket of %d bytes", errBoltFormat, len(inline))
	}
	if flags := binary.LittleEndian.Uint16(inline[8:]); flags != boltFlagLeaf {
		return fmt.Errorf("%w: an inline bucket of page type %#x", errBoltFormat, flags)
	}
	// bbolt writes an inline page with id 0 and no overflow, and frees
	// the page its header names when it rewrites the bucket: any other id
	// would make it touch that page (FuzzStoreFile found this).
	if id, overflow := binary.LittleEndian.Uint64(inline), binary.LittleEndian.Uint32(inline[12:]); id != 0 || overflow != 0 {
		return fmt.Errorf("%w: an inline bucket's page header names page %d (+%d)", errBoltFormat, id, overflow)
	}
	var prev []byte
	return r.leaf(inline, int(binary.LittleEndian.Uint16(inline[10:])), nil, nil, &prev, fn)
}

// walkPage reads the subtree at id. Every key in it must lie in [lo, hi)
// (nil for no bound), which is what bbolt's search relies on, and leaf
// keys must increase strictly.
func (r *boltReader) walkPage(id uint64, depth int, lo, hi []byte, fn func(flags uint32, k, v []byte) error) error {
	var prev []byte
	return r.walk(id, depth, lo, hi, &prev, fn)
}

func (r *boltReader) walk(id uint64, depth int, lo, hi []byte, prev *[]byte, fn func(flags uint32, k, v []byte) error) error {
	if depth > boltMaxDepth {
		return fmt.Errorf("%w: tree deeper than %d levels", errBoltFormat, boltMaxDepth)
	}
	flags, count, region, err := r.page(id, depth)
	if err != nil {
		return err
	}
	switch flags {
	case boltFlagLeaf:
		return r.leaf(region, count, lo, hi, prev, fn)
	case boltFlagBranch:
		if count == 0 {
			return fmt.Errorf("%w: page %d is an empty branch", errBoltFormat, id)
		}
		for i := range count {
			_, key, _, child, err := element(region, i, true)
			if err != nil {
				return fmt.Errorf("page %d: %w", id, err)
			}
			// bbolt's search sends keys below the first branch key to
			// the first child, so only the keys after it bound a child
			// from below.
			childLo := lo
			if i > 0 {
				if bytes.Compare(key, lo) <= 0 || !inRange(key, lo, hi) {
					return fmt.Errorf("%w: page %d: branch keys out of order", errBoltFormat, id)
				}
				childLo = key
			}
			childHi := hi
			if i+1 < count {
				_, next, _, _, err := element(region, i+1, true)
				if err != nil {
					return fmt.Errorf("page %d: %w", id, err)
				}
				childHi = next
			}
			if err := r.walk(child, depth+1, childLo, childHi, prev, fn); err != nil {
				return err
			}
			lo = key
		}
		return nil
	}
	return fmt.Errorf("%w: page %d has type %#x where a branch or leaf belongs", errBoltFormat, id, flags)
}

func (r *boltReader) leaf(region []byte, count int, lo, hi []byte, prev *[]byte, fn func(flags uint32, k, v []byte) error) error {
	for i := range count {
		flags, k, v, _, err := element(region, i, false)
		if err != nil {
			return err
		}
		if flags&^boltLeafBucket != 0 {
			return fmt.Errorf("%w: element %d has flags %#x", errBoltFormat, i, flags)
		}
		if !inRange(k, lo, hi) || (*prev != nil && bytes.Compare(k, *prev) <= 0) {
			return fmt.Errorf("%w: leaf keys out of order", errBoltFormat)
		}
		*prev = k
		if err := fn(flags, k, v); err != nil {
			return err
		}
	}
	if count > 0 {
		// The page may be in the pages' batch buffer, reused after a
		// flush: the next page's first key is checked against a copy.
		*prev = bytes.Clone(*prev)
	}
	return nil
}

func inRange(k, lo, hi []byte) bool {
	return (lo == nil || bytes.Compare(k, lo) >= 0) && (hi == nil || bytes.Compare(k, hi) < 0)
}

// freelist checks the freelist page and that no page it lists is in use.
func (r *boltReader) freelist(id uint64) error {
	flags, count, region, err := r.page(id, 0)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	if flags != boltFlagFreelist {
		return fmt.Errorf("%w: freelist page %d has type %#x", errBoltFormat, id, flags)
	}
	ids := region[boltPageHeaderSize:]
	n := uint64(count)
	if count == 0xFFFF {
		n = binary.LittleEndian.Uint64(ids)
		ids = ids[8:]
	}
	if n > uint64(len(ids))/8 {
		return fmt.Errorf("%w: freelist of %d ids does not fit its page", errBoltFormat, n)
	}
	free := make([]bool, r.hwm)
	for i := range n {
		p := binary.LittleEndian.Uint64(ids[i*8:])
		switch {
		case p < 2 || p >= r.hwm:
			return fmt.Errorf("%w: freelist lists page %d, out of range", errBoltFormat, p)
		case r.used[p]:
			return fmt.Errorf("%w: freelist lists page %d, which is in use", errBoltFormat, p)
		case free[p]:
			return fmt.Errorf("%w: freelist lists page %d twice", errBoltFormat, p)
		}
		free[p] = true
	}
	return nil
}
