//go:build linux || darwin

package record

import (
	"net"
	"syscall"
)

// idleOpen reports whether an idle connection is still open, without reading from it: a
// peek that would block means open; an end (the upstream closed it while idle), an error,
// or bytes the upstream sent unasked mean it cannot carry a request.
func idleOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true // never wait for the socket
	})
	return err == nil && open
}
