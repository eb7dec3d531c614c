package credtracker

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// GenerationFile, under Config.Dir, holds the record store's generation
// outside the store: a store restored from an older copy has a lower
// generation than this file and is not trusted. The file is also the
// tracker's lock: a tracker holds it exclusively while it runs, and
// ReadRecords shares it.
//
// It has two slots, 64 bytes apart; a write goes to slot gen%2, so a write
// torn by a crash leaves the other slot, one generation older, intact:
//
//	slot = magic "pggn" | generation u64 | MAC(generation) [32]byte
const GenerationFile = "records.gen"

const (
	genMagic    = "pggn"
	genSlotLen  = len(genMagic) + 8 + 32
	genSlotSize = 64
	genDomain   = "pullguard.credtracker.generation.v1\x00"
)

// lockTimeout is how long a start waits for another process to release
// the store (a variable for the tests that hold it on purpose).
var lockTimeout = 2 * time.Second

// ErrLocked is wrapped by the error of a store that another process holds
// (a running tracker, while ReadRecords waits for it).
var ErrLocked = errors.New("locked by another process")

// genFile is the open, locked generation file.
type genFile struct {
	f      *os.File
	sealer *sealer
	// gen is the highest generation found in or written to the file.
	gen uint64
	// existed says the file had content when it was opened.
	existed bool
	// damaged says why its content could not be trusted, if it could not.
	damaged error
}

// openGenFile opens and locks the generation file at path: exclusively
// (creating it) for a tracker, shared and read-only otherwise. A missing
// file opened read-only is no error: it reads as generation 0.
func openGenFile(path string, sl *sealer, exclusive bool) (*genFile, error) {
	flag, how := os.O_RDONLY, syscall.LOCK_SH
	if exclusive {
		flag, how = os.O_RDWR|os.O_CREATE, syscall.LOCK_EX
	}
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		if !exclusive && errors.Is(err, fs.ErrNotExist) {
			return &genFile{sealer: sl}, nil
		}
		return nil, fmt.Errorf("failed to open %s: %w", path, err)
	}
	if err := lockFile(f, how); err != nil {
		f.Close()
		return nil, fmt.Errorf("failed to lock %s: %w", path, err)
	}
	g := &genFile{f: f, sealer: sl}
	var buf [2 * genSlotSize]byte
	n, err := f.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		f.Close()
		return nil, fmt.Errorf("failed to read %s: %w", path, err)
	}
	g.existed = n > 0
	valid := false
	for slot := 0; slot*genSlotSize+genSlotLen <= n; slot++ {
		if gen, ok := g.parse(buf[slot*genSlotSize : slot*genSlotSize+genSlotLen]); ok {
			valid = true
			g.gen = max(g.gen, gen)
		}
	}
	if g.existed && !valid {
		g.damaged = fmt.Errorf("the store's generation file %s is damaged or was made with another key", path)
	}
	return g, nil
}

func lockFile(f *os.File, how int) error {
	deadline := time.Now().Add(lockTimeout)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w (is another pullguard running on this directory?)", ErrLocked)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (g *genFile) mac(gen uint64) (d digest) {
	m := g.sealer.newMAC()
	m.Write([]byte(genDomain))
	m.Write(binary.LittleEndian.AppendUint64(nil, gen))
	m.Sum(d[:0])
	return d
}

func (g *genFile) parse(slot []byte) (uint64, bool) {
	if string(slot[:len(genMagic)]) != genMagic {
		return 0, false
	}
	gen := binary.LittleEndian.Uint64(slot[len(genMagic):])
	want := g.mac(gen)
	return gen, subtle.ConstantTimeCompare(want[:], slot[len(genMagic)+8:genSlotLen]) == 1
}

// write records gen, which must not be lower than g.gen; sync makes it
// durable before write returns.
func (g *genFile) write(gen uint64, sync bool) error {
	if gen < g.gen {
		return fmt.Errorf("generation %d is older than %d", gen, g.gen)
	}
	slot := make([]byte, 0, genSlotLen)
	slot = append(slot, genMagic...)
	slot = binary.LittleEndian.AppendUint64(slot, gen)
	m := g.mac(gen)
	slot = append(slot, m[:]...)
	if _, err := g.f.WriteAt(slot, int64(gen%2)*genSlotSize); err != nil {
		return fmt.Errorf("failed to write %s: %w", g.f.Name(), err)
	}
	if sync {
		// fdatasync, as bbolt syncs: the file's size changes only at its
		// first two writes, so this flushes the slot and no metadata.
		if err := datasync(g.f); err != nil {
			return fmt.Errorf("failed to sync %s: %w", g.f.Name(), err)
		}
	}
	g.gen, g.existed, g.damaged = gen, true, nil
	return nil
}

func (g *genFile) close() error {
	if g.f == nil {
		return nil
	}
	return g.f.Close()
}
