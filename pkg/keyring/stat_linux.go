package keyring

import "syscall"

// stampFile stats path (following symbolic links, as reading it does).
// The conversions are for the architectures whose Stat_t fields differ.
func stampFile(path string) fileStamp {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		errno, ok := err.(syscall.Errno) // syscall.Stat returns its Errno as it is
		if !ok || errno == 0 {
			errno = syscall.EIO
		}
		return fileStamp{errno: uintptr(errno)}
	}
	return fileStamp{
		mode:  uint32(st.Mode),
		size:  int64(st.Size),
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
		ino:   uint64(st.Ino),
		dev:   uint64(st.Dev),
	}
}
