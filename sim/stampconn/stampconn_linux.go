//go:build linux

package stampconn

import (
	"io"
	"net"
	"os"
	"syscall"

	"github.com/llmreplay/llmreplay/internal/rxstamp"
)

// enableStamps turns the kernel's receive timestamps on for the connection's socket.
func enableStamps(raw syscall.RawConn) bool {
	ok := false
	raw.Control(func(fd uintptr) { ok = rxstamp.Enable(int(fd)) == nil })
	return ok
}

// readStamped is Read through recvmsg: it waits for the socket in Go's netpoller as
// net.Conn.Read does (deadlines included) and returns the kernel's receive time of the
// bytes (0 when the kernel gave none: the first segments after the kernel's stamping is
// switched on, system-wide and from a work queue, come unstamped).
func (c *Conn) readStamped(b []byte) (n int, arrive int64, err error) {
	if c.oob == nil {
		c.oob = make([]byte, rxstamp.OOBSize)
	}
	var errno syscall.Errno
	rerr := c.raw.Read(func(fd uintptr) bool {
		for {
			n, arrive, errno = rxstamp.Recv(int(fd), b, c.oob)
			if errno != syscall.EINTR {
				return errno != syscall.EAGAIN
			}
		}
	})
	switch {
	case rerr != nil: // a deadline, or the conn closed
		return 0, 0, rerr
	case errno != 0:
		return 0, 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("recvmsg", errno)}
	case n == 0 && len(b) > 0:
		return 0, 0, io.EOF
	}
	return n, arrive, nil
}
