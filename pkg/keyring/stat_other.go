//go:build !linux

package keyring

import (
	"errors"
	"io/fs"
	"os"
)

// stampFile stats path (following symbolic links, as reading it does).
// Outside Linux only the portable fields are compared: existence, type,
// size and modification time.
func stampFile(path string) fileStamp {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fileStamp{errno: 2}
	case err != nil:
		return fileStamp{errno: 5}
	}
	t := fi.ModTime().UnixNano()
	return fileStamp{mode: uint32(fi.Mode().Type()), size: fi.Size(), mtime: t, ctime: t}
}
