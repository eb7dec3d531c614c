//go:build !linux

package main

import (
	"fmt"
	"net"
	"runtime"
)

// unixPeerUID is the uid of the peer of a unix socket connection: read
// with SO_PEERCRED on Linux only; elsewhere no peer is trusted.
func unixPeerUID(net.Conn) (uint32, error) {
	return 0, fmt.Errorf("the peer's credentials cannot be read on %s", runtime.GOOS)
}
