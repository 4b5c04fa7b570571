//go:build linux

package rxstamp

import (
	"encoding/binary"
	"net"

	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/llmreplay/llmreplay/internal/socktest"
)

// pair returns a connected loopback TCP pair: the client's socket as a raw descriptor
// (a duplicate, non-blocking) and the server's net.Conn.
func pair(t *testing.T) (int, net.Conn) { return socktest.Pair(t, nil) }

// enable turns stamps on for fd and waits until the kernel stamps what arrives: the
// kernel switches its stamping on for the whole system when the first socket asks, from
// a work queue (net_enable_timestamp), so the first segments may come unstamped.
func enable(t *testing.T, fd int, s net.Conn) {
	t.Helper()
	if err := Enable(fd); err != nil {
		t.Fatal(err)
	}
	b, oob := make([]byte, 8), make([]byte, OOBSize)
	for range 1000 {
		s.Write([]byte("w"))
		if _, ns := recvWait(t, fd, b, oob); ns != 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no receive timestamps after 1000 tries")
}

// recvWait calls Recv until it does not return EAGAIN.
func recvWait(t *testing.T, fd int, b, oob []byte) (int, int64) {
	t.Helper()
	for range 5000 {
		n, ns, e := Recv(fd, b, oob)
		if e == syscall.EAGAIN {
			time.Sleep(time.Millisecond)
			continue
		}
		if e != 0 {
			t.Fatal(e)
		}
		return n, ns
	}
	t.Fatal("nothing to read after 5 s")
	return 0, 0
}

// The stamp is the kernel's, taken when the bytes arrived: after the write began and
// before the read, however late the read comes.
func TestRecvStampIsArrival(t *testing.T) {
	fd, s := pair(t)
	enable(t, fd, s)
	before := time.Now().UnixNano()
	if _, err := s.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixNano()
	time.Sleep(30 * time.Millisecond) // the reader is late; the stamp must not be
	b, oob := make([]byte, 64), make([]byte, OOBSize)
	n, ns := recvWait(t, fd, b, oob)
	read := time.Now().UnixNano()
	if string(b[:n]) != "hello" {
		t.Fatalf("read %q", b[:n])
	}
	if ns < before || ns > after {
		t.Fatalf("stamp %d not within the write [%d, %d] (read at %d, %.3f ms later)", ns, before, after, read, float64(read-ns)/1e6)
	}

	// Two writes read at once: the stamp is the later arrival's.
	s.Write([]byte("a"))
	time.Sleep(5 * time.Millisecond)
	mid := time.Now().UnixNano()
	s.Write([]byte("b"))
	time.Sleep(5 * time.Millisecond)
	n, ns = recvWait(t, fd, b, oob)
	if string(b[:n]) != "ab" || ns < mid {
		t.Fatalf("read %q stamped %d, want \"ab\" stamped after the second write began (%d)", b[:n], ns, mid)
	}

	// The peer's close: 0 bytes, no stamp needed.
	s.Close()
	n, _ = recvWait(t, fd, b, oob)
	if n != 0 {
		t.Fatalf("read %d bytes after close", n)
	}
}

func TestRecvWithoutEnableHasNoStamp(t *testing.T) {
	fd, s := pair(t)
	s.Write([]byte("x"))
	b, oob := make([]byte, 8), make([]byte, OOBSize)
	if n, ns := recvWait(t, fd, b, oob); n != 1 || ns != 0 {
		t.Fatalf("n %d stamp %d, want 1 and none", n, ns)
	}
	if _, _, e := Recv(fd, b, oob); e != syscall.EAGAIN {
		t.Fatalf("empty socket: %v, want EAGAIN", e)
	}
	if _, _, e := Recv(-1, b, oob); e != syscall.EBADF {
		t.Fatalf("bad descriptor: %v, want EBADF", e)
	}
}

func TestRecvDoesNotAllocate(t *testing.T) {
	fd, s := pair(t)
	enable(t, fd, s)
	b, oob := make([]byte, 64), make([]byte, OOBSize)
	s.Write(make([]byte, 100*len(b)))
	time.Sleep(10 * time.Millisecond)
	var stamped int
	allocs := testing.AllocsPerRun(50, func() {
		if _, ns, e := Recv(fd, b, oob); e == 0 && ns != 0 {
			stamped++
		}
	})
	if allocs != 0 || stamped == 0 {
		t.Fatalf("Recv allocates %.1f times a call (%d reads stamped)", allocs, stamped)
	}
}

func cmsg(level, typ int32, data []byte) []byte {
	hdr := int(unsafe.Sizeof(unix.Cmsghdr{}))
	b := make([]byte, (hdr+len(data)+7)&^7)
	binary.NativeEndian.PutUint64(b, uint64(hdr+len(data)))
	binary.NativeEndian.PutUint32(b[8:], uint32(level))
	binary.NativeEndian.PutUint32(b[12:], uint32(typ))
	copy(b[hdr:], data)
	return b
}

func TestParse(t *testing.T) {
	ts := make([]byte, 16)
	binary.NativeEndian.PutUint64(ts, 12)
	binary.NativeEndian.PutUint64(ts[8:], 345)
	want := int64(12e9 + 345)
	other := cmsg(unix.SOL_SOCKET, unix.SCM_RIGHTS, []byte{1, 2, 3, 4})
	stamp := cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ts)
	for _, c := range []struct {
		name string
		oob  []byte
		want int64
	}{
		{"empty", nil, 0},
		{"stamp", stamp, want},
		{"after another message", append(append([]byte{}, other...), stamp...), want},
		{"other level", cmsg(unix.IPPROTO_TCP, unix.SCM_TIMESTAMPNS, ts), 0},
		{"truncated data", cmsg(unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, ts[:8]), 0},
		{"length past the buffer", stamp[:20], 0},
		{"zero length", make([]byte, 32), 0},
	} {
		if got := Parse(c.oob); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// While Hold's stamping is on, a fresh socket's segments are stamped. (Not always its
// very first: the kernel's system-wide switch is reference-counted through a work queue,
// and sockets of earlier tests closing can make it flicker; a run falls back to its own
// clock for such a read.)
func TestHold(t *testing.T) {
	release, err := Hold(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	fd, s := pair(t)
	enable(t, fd, s)
}
