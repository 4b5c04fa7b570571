//go:build unix

package raceio

import (
	"syscall"
	"testing"
	"unsafe"
)

// TestOrderThroughRawSocketIO: a value set before a raw write is read after the raw read
// of those bytes on the other end. Under -race, without Release and Acquire the detector
// reports a race here (the test fails); without -race the test checks only the value.
func TestOrderThroughRawSocketIO(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])

	var state int // written by the test goroutine, read by the reader: ordered by the socket only
	got := make(chan int)
	go func() {
		var b [1]byte
		for {
			n, _, e := syscall.Syscall(syscall.SYS_READ, uintptr(fds[1]), uintptr(unsafe.Pointer(&b[0])), 1)
			if e == syscall.EINTR {
				continue
			}
			if e != 0 || n != 1 {
				got <- -1
				return
			}
			break
		}
		Acquire(fds[1])
		got <- state
	}()
	state = 42
	Release(fds[0])
	b := [1]byte{'x'}
	if _, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fds[0]), uintptr(unsafe.Pointer(&b[0])), 1); e != 0 {
		t.Fatal(e)
	}
	if v := <-got; v != 42 {
		t.Fatalf("reader saw %d, want 42", v)
	}
	// The zero-length calls (under -race; no calls otherwise) leave the stream as it was.
	Release(fds[0])
	Acquire(fds[1])
	b[0] = 'y'
	syscall.Write(fds[0], b[:])
	var r [4]byte
	if n, err := syscall.Read(fds[1], r[:]); err != nil || n != 1 || r[0] != 'y' {
		t.Fatalf("read %q, %v after the zero-length calls, want \"y\"", r[:n], err)
	}
}
