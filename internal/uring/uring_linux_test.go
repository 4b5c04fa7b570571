//go:build linux

package uring

import (
	"bytes"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/llmreplay/llmreplay/internal/rxstamp"
	"github.com/llmreplay/llmreplay/internal/socktest"
)

// tcpPair returns a loopback connection's two ends: the client's socket as a descriptor
// of its own (non-blocking, receive timestamps on) and the server's net.Conn.
func tcpPair(t *testing.T, ln net.Listener) (int, net.Conn) {
	t.Helper()
	fd, s := socktest.Pair(t, ln)
	if err := rxstamp.Enable(fd); err != nil {
		t.Fatal(err)
	}
	return fd, s
}

type read struct {
	m   rxstamp.Msg
	buf [64]byte
}

// TestRingRecvmsgBatch: one Submit reads every socket of a batch: the bytes each peer
// wrote, each with the kernel's receive stamp, and EAGAIN for the one with nothing.
func TestRingRecvmsgBatch(t *testing.T) {
	r, err := New(8)
	if err != nil {
		t.Skip("no io_uring here:", err)
	}
	defer r.Close()
	release, err := rxstamp.Hold(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = 5 // the last one is sent nothing
	fds := make([]int, n)
	for i := range fds {
		var s net.Conn
		fds[i], s = tcpPair(t, ln)
		if i < n-1 {
			if _, err := fmt.Fprintf(s, "stream %d", i); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := time.Now().UnixNano()
	time.Sleep(20 * time.Millisecond) // the bytes are in the sockets (loopback delivers at once)
	reads := make([]read, n)
	for round := range 2 { // the ring's slots are reused
		for i := range reads {
			rd := &reads[i]
			if !r.PrepRecvmsg(fds[i], rd.m.Header(rd.buf[:]), uint64(100+i)) {
				t.Fatal("no slot")
			}
		}
		if got, err := r.Submit(); err != nil || got != n {
			t.Fatalf("round %d: Submit = %d, %v", round, got, err)
		}
		seen := map[uint64]bool{}
		r.Reap(func(ud uint64, res int32) {
			i := int(ud) - 100
			seen[ud] = true
			switch {
			case round == 1 || i == n-1:
				if syscall.Errno(-res) != syscall.EAGAIN {
					t.Errorf("round %d, socket %d: result %d, want EAGAIN", round, i, res)
				}
			default:
				want := fmt.Sprintf("stream %d", i)
				if res != int32(len(want)) || !bytes.Equal(reads[i].buf[:res], []byte(want)) {
					t.Errorf("socket %d: read %d %q, want %q", i, res, reads[i].buf[:max(res, 0)], want)
				}
				stamp := reads[i].m.Stamp()
				if stamp < before-int64(time.Second) || stamp > time.Now().UnixNano() {
					t.Errorf("socket %d: receive stamp %d not around %d", i, stamp, before)
				}
			}
		})
		if len(seen) != n {
			t.Fatalf("round %d: %d completions, want %d", round, len(seen), n)
		}
	}
}

// TestRingFull: a ring takes no more operations than it has slots until they are
// submitted.
func TestRingFull(t *testing.T) {
	r, err := New(2)
	if err != nil {
		t.Skip("no io_uring here:", err)
	}
	defer r.Close()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	var msgs [3]unix.Msghdr
	for i := range msgs {
		ok := r.PrepRecvmsg(fds[0], &msgs[i], uint64(i))
		if ok != (i < r.Entries()) {
			t.Fatalf("operation %d of a %d-slot ring: taken %v", i, r.Entries(), ok)
		}
	}
	if got, err := r.Submit(); err != nil || got != r.Entries() {
		t.Fatalf("Submit = %d, %v", got, err)
	}
	if n := r.Reap(func(uint64, int32) {}); n != r.Entries() {
		t.Fatalf("%d completions", n)
	}
	if !r.PrepRecvmsg(fds[0], &msgs[0], 9) {
		t.Fatal("no slot after the submit")
	}
}

// TestLayout: the structures written out in uring_linux.go have the sizes and the field
// offsets of include/uapi/linux/io_uring.h (x/sys/unix has none of them), so the kernel
// reads and writes the fields this package means.
func TestLayout(t *testing.T) {
	var s sqe
	var p params
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(io_uring_sqe)", unsafe.Sizeof(s), 64},
		{"sizeof(io_uring_cqe)", unsafe.Sizeof(cqe{}), 16},
		{"sizeof(io_uring_params)", unsafe.Sizeof(p), 120},
		{"sizeof(io_sqring_offsets)", unsafe.Sizeof(sqringOffsets{}), 40},
		{"sizeof(io_cqring_offsets)", unsafe.Sizeof(cqringOffsets{}), 40},
		{"io_uring_sqe.fd", unsafe.Offsetof(s.fd), 4},
		{"io_uring_sqe.off", unsafe.Offsetof(s.off), 8},
		{"io_uring_sqe.addr", unsafe.Offsetof(s.addr), 16},
		{"io_uring_sqe.len", unsafe.Offsetof(s.len), 24},
		{"io_uring_sqe.msg_flags", unsafe.Offsetof(s.msgFlags), 28},
		{"io_uring_sqe.user_data", unsafe.Offsetof(s.userData), 32},
		{"io_uring_sqe.addr3", unsafe.Offsetof(s.addr3), 48},
		{"io_uring_params.features", unsafe.Offsetof(p.features), 20},
		{"io_uring_params.sq_off", unsafe.Offsetof(p.sqOff), 40},
		{"io_uring_params.cq_off", unsafe.Offsetof(p.cqOff), 80},
		{"io_cqring_offsets.cqes", unsafe.Offsetof(p.cqOff.cqes), 20},
		{"io_cqring_offsets.user_addr", unsafe.Offsetof(p.cqOff.userAddr), 32},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}
