//go:build unix

// Package socktest gives tests of raw-socket code a loopback TCP connection whose client
// end is a plain descriptor, as the raw client and the stream reactor hold theirs.
package socktest

import (
	"net"
	"syscall"
	"testing"
)

// Pair returns a connected loopback TCP pair, accepted from ln (nil: a listener of its
// own): the client's socket as a raw descriptor (a duplicate, non-blocking, outside Go's
// netpoller) and the server's net.Conn. Both are closed when the test ends.
func Pair(t testing.TB, ln net.Listener) (int, net.Conn) {
	t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	f, err := c.(*net.TCPConn).File()
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	syscall.SetNonblock(fd, true)
	t.Cleanup(func() { syscall.Close(fd) })
	return fd, s
}
