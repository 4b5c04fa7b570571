//go:build linux

package transport

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/rxstamp"
	"github.com/llmreplay/llmreplay/replay/results"
)

// TestRawSocketsOutsideGoNetpoller: a raw connection's socket is in no epoll while idle
// (not in the runtime's: the reactor's thread alone is woken by its data), and in its
// reactor's epoll alone while a response is read.
func TestRawSocketsOutsideGoNetpoller(t *testing.T) {
	srv := &vllmtest.Server{TTFT: 200 * time.Millisecond, ITL: time.Millisecond}
	base := vllmtest.Start(t, srv)
	c := newTestClient(t, base, func(o *ClientOptions) { o.HTTPClient = HTTPClientRaw })
	if c.Prewarm(context.Background(), 1) != 1 {
		t.Fatal("prewarm failed")
	}
	cn := c.raw.takeIdle()
	if cn == nil {
		t.Fatal("no pooled connection")
	}
	defer cn.close()
	if eps := epollsWatching(t, cn.fd); len(eps) != 0 {
		t.Fatalf("idle socket %d is in epoll %v", cn.fd, eps)
	}
	r, err := reactorFor(cn.fd)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.pending-- // only asked which reactor: no stream of this call's (else it would never retire)
	r.mu.Unlock()
	req := &Request{ID: 1, Body: []byte(`{"prompt":"a","max_tokens":2}`)}
	res := results.NewResult(1, 0, 0, 1, 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		st := c.raw.writeNow(Clock{Start: time.Now()}, cn, req)
		sse := NewSSEReader(nil, nil, 4<<10, DefaultMaxLine)
		c.raw.exchange(context.Background(), Clock{Start: time.Now()}, st, req, res, sse, nil, time.Time{}, make([]byte, rawReadBuf), false)
	}()
	time.Sleep(100 * time.Millisecond) // the server holds the first token 200 ms
	eps := epollsWatching(t, cn.fd)
	<-done
	if len(eps) != 1 || eps[0] != r.ep {
		t.Fatalf("socket %d in flight is in epolls %v, want only the reactor's %d", cn.fd, eps, r.ep)
	}
	if res.Status != results.StatusOK {
		t.Fatalf("status %s %q", res.Status, res.Error)
	}
}

// epollsWatching returns the process's epoll descriptors that watch fd
// (/proc/self/fdinfo: an epoll's lines "tfd: N events: ...").
func epollsWatching(t *testing.T, fd int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var eps []int
	for _, e := range ents {
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(info), "\n") {
			f := strings.Fields(l)
			if len(f) >= 2 && f[0] == "tfd:" && f[1] == strconv.Itoa(fd) {
				n, _ := strconv.Atoi(e.Name())
				eps = append(eps, n)
			}
		}
	}
	return eps
}

// TestRawWriteAllWaitsForRoom: a message larger than the socket's buffer goes out whole,
// the writer waiting for room while the peer reads slowly; with no reader, the deadline
// and the context's end each stop it with os.ErrDeadlineExceeded (what exchange words as
// a timeout or a cancellation).
func TestRawWriteAllWaitsForRoom(t *testing.T) {
	pair := func() (int, int) {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fds[0], fds[1]
	}
	w, r := pair()
	defer syscall.Close(w)
	defer syscall.Close(r)
	head := bytes.Repeat([]byte("h"), 1000)
	body := make([]byte, 8<<20)
	for i := range body {
		body[i] = byte(i * 7)
	}
	got := make(chan []byte)
	go func() {
		var all []byte
		b := make([]byte, 64<<10)
		for len(all) < len(head)+len(body) {
			n, err := syscall.Read(r, b)
			if err == syscall.EAGAIN {
				time.Sleep(time.Millisecond)
				continue
			}
			if err != nil || n == 0 {
				break
			}
			all = append(all, b[:n]...)
		}
		got <- all
	}()
	if err := writeAll(context.Background(), w, [][]byte{head, body}, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if all := <-got; !bytes.Equal(all, append(head, body...)) {
		t.Fatalf("peer read %d bytes, not the %d written", len(all), len(head)+len(body))
	}

	w2, r2 := pair()
	defer syscall.Close(w2)
	defer syscall.Close(r2)
	if err := writeAll(context.Background(), w2, [][]byte{body}, time.Now().Add(100*time.Millisecond)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("no reader, deadline: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	if err := writeAll(ctx, w2, [][]byte{body}, time.Time{}); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("no reader, canceled: %v", err)
	}
}

// TestRawChunkStampIsArrival: a chunk is dated when its bytes reached the client's
// socket (the kernel's receive timestamp), not when the reactor got round to reading
// them. The test holds the reactor back (its lock) while the server writes, and lets it
// read 20 ms after the write returned: the chunk's time must fall inside the server's
// write call. (The kernel may, rarely, leave a segment unstamped just after stamping was
// switched on, and the read's return dates it then: three tries, one must be exact.)
func TestRawChunkStampIsArrival(t *testing.T) {
	ln := stampedListener(t)
	base, _ := url.Parse("http://" + ln.Addr().String() + "/v1")
	c := newTestClient(t, base, func(o *ClientOptions) { o.HTTPClient = HTTPClientRaw })
	const body = "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" tok\",\"finish_reason\":\"length\"}]}\n\n"
	resp := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n", len(body), body) + "e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"

	exact := 0
	for try := 0; try < 3 && exact == 0; try++ {
		cn, err := c.raw.dial(context.Background(), time.Time{}) // a new one: exchange pools it after
		if err != nil {
			t.Fatal(err)
		}
		type window struct{ before, after int64 }
		wrote := make(chan window, 1)
		write := make(chan struct{})
		go func() { // the server: one request, one response written when told
			s, err := ln.Accept()
			if err != nil {
				wrote <- window{}
				return
			}
			defer s.Close()
			req, err := http.ReadRequest(bufio.NewReader(s))
			if err == nil {
				io.Copy(io.Discard, req.Body)
			}
			<-write
			before := time.Now().UnixNano()
			s.Write([]byte(resp))
			wrote <- window{before, time.Now().UnixNano()}
			io.Copy(io.Discard, s) // until the client closes
		}()
		clk := Clock{Start: time.Now()}
		req := &Request{ID: 1, Body: []byte(`{"prompt":"a","max_tokens":1}`)}
		res := results.NewResult(1, 0, 0, 1, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			st := c.raw.writeNow(clk, cn, req)
			sse := NewSSEReader(nil, nil, 4<<10, DefaultMaxLine)
			c.raw.exchange(context.Background(), clk, st, req, res, sse, nil, time.Time{}, make([]byte, rawReadBuf), false)
		}()
		// Hold the reactor once it reads this stream.
		var r *reactor
		for wait := time.Now(); r == nil; {
			if time.Since(wait) > 5*time.Second {
				t.Fatal("the stream never reached a reactor")
			}
			reactorsMu.Lock()
			if reactors != nil {
				if rr := reactors[cn.fd%len(reactors)]; rr != nil {
					rr.mu.Lock()
					if rr.streams[int32(cn.fd)] != nil {
						r = rr
					} else {
						rr.mu.Unlock()
					}
				}
			}
			reactorsMu.Unlock()
			if r == nil {
				time.Sleep(time.Millisecond)
			}
		}
		close(write)
		w := <-wrote
		time.Sleep(20 * time.Millisecond)
		r.mu.Unlock()
		<-done
		if res.Status != results.StatusOK || res.FirstTokenNS == results.Null {
			t.Fatalf("status %s %q", res.Status, res.Error)
		}
		got := clk.Start.UnixNano() + res.FirstTokenNS
		const tol = 50_000 // ns: the wall and monotonic readings of one time.Now
		if got < w.before-tol {
			t.Fatalf("chunk dated %d ns before the server began writing it", w.before-got)
		}
		if got <= w.after+tol {
			exact++
		} else {
			t.Logf("try %d: chunk dated %.3f ms after the server's write returned (unstamped?)", try, float64(got-w.after)/1e6)
		}
	}
	if exact == 0 {
		t.Fatal("no try dated the chunk at its arrival: the reactor's read dated it")
	}
}

// rawResp.stamp puts the kernel's arrival on the run clock and never dates a chunk after
// the read, before the request's send, or before the stream's previous chunk.
func TestRawStampClamps(t *testing.T) {
	start := time.Now().Add(-time.Second)
	p := &rawResp{clk: Clock{Start: start}, res: &results.Result{SentNS: int64(500 * time.Millisecond)}}
	wall := func(run time.Duration) int64 { return start.UnixNano() + int64(run) }
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	if got := p.stamp(wall(900 * time.Millisecond)); got < int64(899*time.Millisecond) || got > int64(901*time.Millisecond) {
		t.Errorf("arrival at 900 ms stamped %.3f ms", ms(got))
	}
	if got := p.stamp(wall(800 * time.Millisecond)); got < int64(899*time.Millisecond) {
		t.Errorf("an arrival before the previous chunk's stamped %.3f ms, before it", ms(got))
	}
	p.lastStamp = 0
	if got := p.stamp(wall(100 * time.Millisecond)); got != p.res.SentNS {
		t.Errorf("an arrival before the send stamped %.3f ms, want the send's %.3f", ms(got), ms(p.res.SentNS))
	}
	before := int64(time.Since(start))
	if got := p.stamp(wall(time.Hour)); got < before || got > int64(time.Since(start)) {
		t.Errorf("an arrival in the future stamped %.3f ms, want the read's (%.3f ms or a little after)", ms(got), ms(before))
	}
	before = int64(time.Since(start))
	if got := p.stamp(0); got < before || got > int64(time.Since(start)) {
		t.Errorf("an unstamped read stamped %.3f ms, want the read's (%.3f ms or a little after)", ms(got), ms(before))
	}
}

// stampedListener holds the kernel's receive stamping on (rxstamp.Hold) and listens on
// loopback, both until the test ends.
func stampedListener(t *testing.T) net.Listener {
	t.Helper()
	release, err := rxstamp.Hold(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// A reactor lives reactorIdle past its last stream, whatever ends its waits early (a held
// wait ends at every preemption signal, each 10 ms): it is not stopped and started again
// between two requests a few milliseconds apart (each start and end also moves GOMAXPROCS,
// a stop of the world).
func TestReactorOutlivesShortIdle(t *testing.T) {
	// No reactor may read reactorIdle while it is changed: earlier tests' retire first.
	waitFor(t, "earlier reactors retired", func() bool {
		reactorsMu.Lock()
		defer reactorsMu.Unlock()
		return !slices.ContainsFunc(reactors, func(r *reactor) bool { return r != nil })
	})
	defer func(d time.Duration) { reactorIdle = d }(reactorIdle)
	reactorIdle = 300 * time.Millisecond
	base := vllmtest.Start(t, &vllmtest.Server{})
	c := newTestClient(t, base, func(o *ClientOptions) { o.HTTPClient = HTTPClientRaw })
	if c.Prewarm(context.Background(), 1) != 1 { // one response read by a reactor
		t.Fatal("prewarm failed")
	}
	time.Sleep(100 * time.Millisecond) // idle for a third of reactorIdle: ten preemption ticks
	reactorsMu.Lock()
	alive := slices.ContainsFunc(reactors, func(r *reactor) bool { return r != nil })
	reactorsMu.Unlock()
	if !alive {
		t.Fatal("the reactor retired within 100 ms of its last stream, reactorIdle 300 ms")
	}
	waitFor(t, "reactor retired", func() bool {
		reactorsMu.Lock()
		defer reactorsMu.Unlock()
		return !slices.ContainsFunc(reactors, func(r *reactor) bool { return r != nil })
	})
}
