//go:build linux

// Package rxstamp reads a socket together with the kernel's receive timestamp of the
// bytes read: SO_TIMESTAMPNS, the CLOCK_REALTIME instant the network stack took the
// segment in (for TCP, of the last segment the read consumed). A stamp taken in user space
// when read(2) returns also holds the time the reading thread took to wake, to get a CPU
// and (in Go) to get a P back: milliseconds at the tail on a busy machine. The kernel's
// stamp holds none of that, so a client's chunk times and a server's arrival times are
// those of the bytes, not of the process that read them.
package rxstamp

import (
	"errors"
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/llmreplay/llmreplay/internal/raceio"
)

// Supported reports whether this platform has receive timestamps.
const Supported = true

// OOBSize is the control buffer Recv needs: one cmsghdr and one timespec.
const OOBSize = 64

// Enable turns receive timestamps on for the socket fd.
func Enable(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return &syscallError{"setsockopt SO_TIMESTAMPNS", err}
	}
	return nil
}

type syscallError struct {
	call string
	err  error
}

func (e *syscallError) Error() string { return e.call + ": " + e.err.Error() }
func (e *syscallError) Unwrap() error { return e.err }

// Recv is read(2) on the non-blocking socket fd through recvmsg(2), with oob (at least
// OOBSize bytes) for the control message. It returns the bytes read and the kernel's
// receive time of the last segment they came in, CLOCK_REALTIME ns (0 when the kernel
// gave none: timestamps not enabled, or n == 0). It is a raw system call: it never blocks
// and never gives up the P (call it on a socket epoll said is ready, or handle EAGAIN).
func Recv(fd int, b, oob []byte) (n int, ns int64, errno syscall.Errno) {
	// Built here, not by a helper that Msg shares: a pointer stored through a parameter
	// escapes, and Recv must not allocate (TestRecvDoesNotAllocate).
	var iov unix.Iovec
	if len(b) > 0 {
		iov.Base = &b[0]
		iov.SetLen(len(b))
	}
	var msg unix.Msghdr
	msg.Iov = &iov
	msg.SetIovlen(1)
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_DONTWAIT)
	if e != 0 {
		return 0, 0, e
	}
	raceio.Acquire(fd)
	return int(r), Parse(oob[:msg.Controllen]), 0
}

// Msg is the recvmsg(2) message Recv builds on its stack, in memory of its own: for a read
// submitted elsewhere (an io_uring) whose stamp is read back once it has completed.
type Msg struct {
	hdr unix.Msghdr
	iov unix.Iovec
	oob [OOBSize]byte
}

// Header points m at b and returns the message to read into it; m and b must stay live
// until the read has completed.
func (m *Msg) Header(b []byte) *unix.Msghdr {
	m.iov = unix.Iovec{}
	if len(b) > 0 {
		m.iov.Base = &b[0]
		m.iov.SetLen(len(b))
	}
	m.hdr = unix.Msghdr{Iov: &m.iov, Control: &m.oob[0]}
	m.hdr.SetIovlen(1)
	m.hdr.SetControllen(len(m.oob))
	return &m.hdr
}

// Stamp is the kernel's receive time of the last segment the completed read took,
// CLOCK_REALTIME ns (0: none), as Recv returns it.
func (m *Msg) Stamp() int64 { return Parse(m.oob[:m.hdr.Controllen]) }

// Parse returns the SCM_TIMESTAMPNS instant (ns) in the control messages oob, 0 if none.
func Parse(oob []byte) int64 {
	const hdr = int(unsafe.Sizeof(unix.Cmsghdr{}))
	for len(oob) >= hdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			return 0
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && l-hdr >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := (*unix.Timespec)(unsafe.Pointer(&oob[hdr]))
			return ts.Nano()
		}
		const a = int(unsafe.Sizeof(uintptr(0))) // cmsg alignment
		next := (l + a - 1) &^ (a - 1)
		if next >= len(oob) {
			return 0
		}
		oob = oob[next:]
	}
	return 0
}

// Hold switches the kernel's receive stamping on and returns once it stamps segments,
// keeping it on until release is called. The kernel stamps arriving segments only while
// some socket of the system has asked for timestamps, and switches that on (and off, once
// the last such socket closes) from a work queue, so the first segments after the first
// Enable can come unstamped; Recv then returns 0 and callers fall back to their own
// clock. Tests that want segments stamped hold it for their length (the switch is counted
// through the same work queue, so a segment may still, rarely, come unstamped).
func Hold(timeout time.Duration) (release func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		return nil, err
	}
	release = func() { c.Close(); s.Close() }
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		release()
		return nil, err
	}
	b, oob := make([]byte, 64), make([]byte, OOBSize)
	end := time.Now().Add(timeout)
	for stamped := false; !stamped; {
		if time.Now().After(end) {
			release()
			return nil, errors.New("rxstamp: the kernel did not stamp received segments within " + timeout.String())
		}
		if _, err := s.Write([]byte{1}); err != nil {
			release()
			return nil, err
		}
		var cerr error
		rerr := raw.Read(func(fd uintptr) bool {
			if cerr == nil {
				cerr = Enable(int(fd)) // again each time: cheap, and the socket is at hand
			}
			_, ns, e := Recv(int(fd), b, oob)
			if e == syscall.EAGAIN {
				return false
			}
			stamped = e == 0 && ns != 0
			return true
		})
		if err := errors.Join(rerr, cerr); err != nil {
			release()
			return nil, err
		}
		if !stamped {
			time.Sleep(time.Millisecond)
		}
	}
	return release, nil
}
