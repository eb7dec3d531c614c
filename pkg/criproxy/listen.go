package criproxy

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// SocketMode is the mode of the proxy's socket: the owner (root) and its
// group may connect.
const SocketMode = 0o660

// LockFile is the file under the root directory that one running proxy
// holds locked (flock) for its whole life.
const LockFile = "serve.lock"

// ErrInUse says another process holds the root directory or serves on the
// socket.
var ErrInUse = errors.New("in use by another process")

// Listener is the proxy's unix socket. Close removes the socket.
type Listener struct {
	net.Listener
	path string
}

// Listen replaces a stale socket at socketPath (only a socket nobody
// answers on) and listens there with SocketMode. The caller must hold the
// lock of its root directory (LockRoot) from before Listen until after
// Close, so that two instances never replace each other's socket.
//
// The socket is bound in a new directory only the owner can enter, given
// its mode there, and only then linked at socketPath: whatever the
// process's umask, no other user can connect before the mode is set (a
// connection made in that moment would outlive the chmod).
func Listen(socketPath string) (*Listener, error) {
	return listen(socketPath, SocketMode)
}

// PrivateSocketMode is the mode of a socket only its owner (root) may
// connect to: serve's admin socket.
const PrivateSocketMode = 0o600

// ListenPrivate is Listen with PrivateSocketMode.
func ListenPrivate(socketPath string) (*Listener, error) {
	return listen(socketPath, PrivateSocketMode)
}

func listen(socketPath string, mode os.FileMode) (*Listener, error) {
	dir := filepath.Dir(socketPath)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("failed to create the socket's directory: %w", err)
	}
	if err := removeStale(socketPath); err != nil {
		return nil, err
	}
	private, err := os.MkdirTemp(dir, ".pullguard-bind-")
	if err != nil {
		return nil, fmt.Errorf("failed to create a private directory beside %s: %w", socketPath, err)
	}
	defer os.RemoveAll(private)
	if err := os.Chmod(private, 0o700); err != nil {
		return nil, fmt.Errorf("failed to set the mode of %s: %w", private, err)
	}
	bound := filepath.Join(private, "s")
	l, err := net.Listen("unix", bound)
	if err != nil {
		return nil, fmt.Errorf("failed to listen on %s: %w", socketPath, err)
	}
	// The socket's name at bound goes with the private directory; Close
	// removes socketPath.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if afterBind != nil {
		afterBind(bound)
	}
	if err := os.Chmod(bound, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("failed to set the mode of %s: %w", socketPath, err)
	}
	// A link, unlike a rename, never replaces what another process may
	// have put at socketPath since the check for a stale socket.
	if err := os.Link(bound, socketPath); err != nil {
		l.Close()
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("socket %s: %w", socketPath, ErrInUse)
		}
		return nil, fmt.Errorf("failed to listen on %s: %w", socketPath, err)
	}
	return &Listener{Listener: l, path: socketPath}, nil
}

// afterBind, when set (by this package's tests only), is called with the
// path the socket was bound at, before its mode is set.
var afterBind func(bound string)

// LockRoot takes the lock of rootDir (creating it), or fails with
// ErrInUse when another process holds it.
func LockRoot(rootDir string) (*os.File, error) {
	if err := os.MkdirAll(rootDir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create the root directory: %w", err)
	}
	path := filepath.Join(rootDir, LockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("failed to open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("root directory %s: %w (another pullguard serve?)", rootDir, ErrInUse)
		}
		return nil, fmt.Errorf("failed to lock %s: %w", path, err)
	}
	return f, nil
}

// removeStale removes a socket left by a process that is gone. Anything
// that is not a socket, or a socket that accepts connections, is left
// alone and is an error.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to check %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; not replacing it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("socket %s: %w", path, ErrInUse)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("failed to remove the stale socket %s: %w", path, err)
	}
	return nil
}

// Close stops listening and removes the socket.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil // the gRPC server closed it
	}
	if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}
