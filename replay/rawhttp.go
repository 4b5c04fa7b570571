//go:build linux

package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/llmreplay/llmreplay/internal/raceio"
	"github.com/llmreplay/llmreplay/internal/rxstamp"
	"github.com/llmreplay/llmreplay/replay/results"
)

// The raw client is the replayer's own HTTP/1.1 client for plain-http endpoints, the
// usual case of an engine on the same host or network. It exists for cost and timing:
//
//   - a stream is read by the stream reactor (reactor_linux.go): a locked thread waiting
//     in epoll reads each ready connection once per readiness event and stamps the read
//     at once. net/http's body reader cannot wait before it reads, so every chunk costs
//     it a read that returns EAGAIN, a park, a wake-up and the read that gets the bytes;
//     with read(2) at ~1.7 µs on a virtual machine that was most of the replayer's CPU
//     per token (docs/replay.md, "Fidelity and cost"). The reactor ends a request the
//     dispatcher wrote whole itself (doRawAsync); any other request's goroutine waits
//     once per response, not once per chunk.
//   - a due request goes out in one writev from the dispatcher itself, on a pooled
//     connection, with no hand-off to a connection's writer goroutine and back.
//
// It speaks exactly what a streaming completion needs: POST with Content-Length, a
// response framed by chunked encoding, Content-Length or the connection's end, 1xx
// interim responses skipped, trailers read and dropped, keep-alive unless the server
// says close. HTTPS, proxies and HTTP/2 go through net/http (ClientOptions.HTTPClient).

// rawBuilt says the raw client is in this build: it reads and writes its sockets with
// Linux's read(2), writev(2) and epoll, on descriptors it owns (outside the runtime's
// netpoller), and is proven on Linux only (rawhttp_other.go stands in elsewhere).
const rawBuilt = true

const (
	rawReadBuf    = 16 << 10 // initial read buffer per request in flight
	rawMaxHead    = maxResponseHead
	rawDrainAfter = 2 * time.Second
	// rawMaxFullReads bounds the reads one readiness event gets while each fills the
	// buffer (1 MiB at 16 KiB): a server that sends faster than the stream is parsed never
	// lets the socket drain, and the reactor's other streams, deadlines and cancellations
	// are served only between events. (A FIN is an event of its own, EPOLLRDHUP: no probe
	// read is needed to see the end of a stream.)
	rawMaxFullReads = 64
	// rawRetryWithin bounds when a request that a reused connection loses before any byte
	// of a response is sent again. A connection the server closed while idle fails at once
	// (its FIN is there before the write); one that fails later was open when the request
	// arrived, the engine may be serving it, and a second send would have it served twice
	// and show the wait as the dispatcher's lateness (the soak saw 2 s with toxiproxy's
	// reset_peer). 1 s leaves room for a loaded machine's scheduling.
	rawRetryWithin = time.Second
)

var errRawHeadTooLarge = fmt.Errorf("response headers over %d bytes", rawMaxHead)

// rawTransport is the connection pool and request head of the raw client.
type rawTransport struct {
	addr    string // host:port
	head    []byte // request line and the headers every request has, each line ended by CRLF
	session string // the session-affinity header's name; "" = none
	models  []byte // a whole GET request for BASE/models (prewarm)
	dialer  net.Dialer
	maxIdle int

	mu   sync.Mutex
	idle []*rawConn // LIFO: the most recently used connection is the warmest

	// The spare filler (fillSpare): a goroutine that dials while the pool holds fewer
	// than rawSpare connections, so that the dispatcher finds one when a request is due.
	filling  bool               // it runs
	fillWake chan struct{}      // wakes it (buffered 1)
	gen      int                // closeIdle's count: a connection dialed before the last one is not pooled
	fillFail time.Time          // its last failed dial: it does not start again within rawSpareRetry
	fillStop context.CancelFunc // ends its dial in progress (closeIdle)
	open     atomic.Int64       // connections dialed and not yet closed, pooled or in use

	bufs sync.Pool // *[]byte read buffers

	readBatch int64 // ClientOptions.ReadBatch, ns
}

// rawConn is a connection's socket: a descriptor the raw client owns, non-blocking, in
// no epoll but a reactor's while a response is read from it. Whoever holds the rawConn
// (the pool, or one request) closes it, once.
type rawConn struct {
	fd     int
	reused bool
	open   *atomic.Int64 // the transport's count of open connections
}

// close closes the socket; a second call does nothing.
func (cn *rawConn) close() {
	if cn.fd >= 0 {
		syscall.Close(cn.fd)
		cn.fd = -1
		if cn.open != nil {
			cn.open.Add(-1)
		}
	}
}

// newRawTransport serves POSTs to u; modelsURL is GET BASE/models, for prewarm.
func newRawTransport(u, modelsURL *url.URL, header http.Header, maxIdle int, sessionHeader string) *rawTransport {
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	h := appendRawHead(nil, "POST", u, header)
	if maxIdle <= 0 {
		maxIdle = DefaultMaxInflight
	}
	t := &rawTransport{addr: addr, head: h, session: sessionHeader, maxIdle: maxIdle,
		dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}
	t.models = append(appendRawHead(nil, "GET", modelsURL, header), "\r\n"...)
	t.bufs.New = func() any { b := make([]byte, rawReadBuf); return &b }
	return t
}

// appendRawHead appends a request line and the headers, each line ended by CRLF.
func appendRawHead(h []byte, method string, u *url.URL, header http.Header) []byte {
	h = append(h, method...)
	h = append(h, ' ')
	h = append(h, u.RequestURI()...)
	h = append(h, " HTTP/1.1\r\nHost: "...)
	h = append(h, u.Host...)
	h = append(h, "\r\n"...)
	keys := make([]string, 0, len(header))
	for k := range header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch http.CanonicalHeaderKey(k) {
		case "Host", "Content-Length", "Transfer-Encoding", "Connection":
			continue // the client's own
		}
		for _, v := range header[k] {
			h = append(h, k...)
			h = append(h, ": "...)
			h = append(h, v...)
			h = append(h, "\r\n"...)
		}
	}
	return h
}

// get returns an idle connection or dials a new one.
func (t *rawTransport) get(ctx context.Context, deadline time.Time) (*rawConn, error) {
	if cn := t.takeIdle(); cn != nil {
		return cn, nil
	}
	return t.dial(ctx, deadline)
}

// takeIdle returns the most recently pooled connection, or nil; it never dials.
func (t *rawTransport) takeIdle() *rawConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.idle)
	if n <= rawSpare/2 && t.open.Load() >= rawSpareMinOpen {
		t.wantSpareLocked()
	}
	if n == 0 {
		return nil
	}
	cn := t.idle[n-1]
	t.idle = t.idle[:n-1]
	cn.reused = true
	return cn
}

// rawSpare is how many idle connections the spare filler keeps ready once the pool has
// run low (half of it or fewer). Without it, a request due when the pool is empty (its
// in-flight count at a new high: every Poisson burst) is sent by a new goroutine that
// dials first, and that wait is its lateness: at 300 req/s of 100-token streams it was
// most of the dispatcher's lateness p99 (replaybench fidelity: p99 1.43 and 2.49 ms with
// the 64 prewarmed connections alone, 0.89 and 1.09 with 400; the C sleeper's floor
// 0.65 to 1.03 in the same runs).
const rawSpare = 8

// rawSpareMinOpen is how many connections must be open before the filler starts: a load
// of a few requests at a time (sequential ones: one connection, reused) needs no spares,
// and the server sees no connection it did not need.
const rawSpareMinOpen = 2 * rawSpare

// rawSpareRetry is how long the filler stays stopped after a failed dial (the endpoint
// down, or refusing connections): requests dial for themselves meanwhile, and their
// failures are what the run reports.
const rawSpareRetry = time.Second

// rawSpareIdle is how long the filler waits for a pool that runs low again before it
// ends: a run leaves the goroutines it found (a variable for tests).
// Atomic: fillers of earlier tests' clients may still read it when a test changes it.
var rawSpareIdle atomic.Int64 // ns

func init() { rawSpareIdle.Store(int64(time.Second)) }

// wantSpareLocked starts the filler, or wakes it; t.mu is held.
func (t *rawTransport) wantSpareLocked() {
	if t.filling {
		select {
		case t.fillWake <- struct{}{}:
		default:
		}
		return
	}
	if !t.fillFail.IsZero() && time.Since(t.fillFail) < rawSpareRetry {
		return
	}
	if t.fillWake == nil {
		t.fillWake = make(chan struct{}, 1)
	}
	t.filling = true
	ctx, cancel := context.WithCancel(context.Background())
	t.fillStop = cancel
	go t.fillSpare(ctx, cancel, t.gen)
}

// fillSpare dials, one connection at a time, until the pool holds rawSpare (or maxIdle)
// idle connections, then waits to be woken; it ends after rawSpareIdle without a wake,
// at a failed dial, or when closeIdle has run since it started (gen).
func (t *rawTransport) fillSpare(ctx context.Context, cancel context.CancelFunc, gen int) {
	defer cancel()
	idle := time.NewTimer(time.Duration(rawSpareIdle.Load()))
	defer idle.Stop()
	for {
		t.mu.Lock()
		if t.gen != gen {
			t.filling = false
			t.mu.Unlock()
			return
		}
		need := len(t.idle) < min(rawSpare, t.maxIdle)
		t.mu.Unlock()
		if !need {
			idle.Reset(time.Duration(rawSpareIdle.Load()))
			select {
			case <-t.fillWake:
				continue
			case <-idle.C:
			}
			t.mu.Lock()
			if len(t.fillWake) == 0 { // no wake raced the timer
				t.filling = false
				t.mu.Unlock()
				return
			}
			t.mu.Unlock()
			continue
		}
		cn, err := t.dial(ctx, time.Now().Add(10*time.Second))
		t.mu.Lock()
		switch {
		case t.gen != gen: // closeIdle ran (and canceled a dial in progress: not a failure)
			t.filling = false
		case err != nil:
			t.fillFail = time.Now()
			t.filling = false
		case len(t.idle) >= t.maxIdle:
			t.filling = false
		default:
			cn.reused = true // pooled: the server may close it while it waits, as any idle one
			t.idle = append(t.idle, cn)
			t.mu.Unlock()
			continue
		}
		t.mu.Unlock()
		if cn != nil {
			cn.close()
		}
		return
	}
}

func (t *rawTransport) dial(ctx context.Context, deadline time.Time) (*rawConn, error) {
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	c, err := t.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	fd, err := ownSocket(c.(*net.TCPConn))
	c.Close()
	if err != nil {
		return nil, err
	}
	// The kernel's receive timestamps date each chunk (rawResp.stamp); without them
	// (an old kernel, a seccomp filter) the read's return does.
	rxstamp.Enable(fd)
	t.open.Add(1)
	return &rawConn{fd: fd, open: &t.open}, nil
}

// ownSocket returns a duplicate of c's socket (close-on-exec, non-blocking as c's: the
// flag is the socket's). Closing c then takes c's descriptor out of the runtime's
// netpoller (it deregisters a descriptor before closing it) and leaves the socket open
// through the duplicate, which no epoll but a reactor's will hold. Dialing with net.Dialer
// keeps its name resolution, address fallback, timeout, context and keep-alive settings.
func ownSocket(c *net.TCPConn) (int, error) {
	sc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	cerr := sc.Control(func(s uintptr) {
		r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			err = os.NewSyscallError("fcntl", e)
			return
		}
		fd = int(r)
	})
	if cerr != nil {
		return -1, cerr
	}
	return fd, err
}

// put returns a connection whose last response ended cleanly to the pool.
func (t *rawTransport) put(cn *rawConn) {
	t.mu.Lock()
	if len(t.idle) >= t.maxIdle {
		t.mu.Unlock()
		cn.close()
		return
	}
	t.idle = append(t.idle, cn)
	t.mu.Unlock()
}

// closeIdle closes the idle connections.
func (t *rawTransport) closeIdle() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.gen++ // the spare filler pools nothing it dialed before this
	if t.filling {
		t.fillStop() // its dial in progress ends
		select {
		case t.fillWake <- struct{}{}:
		default:
		}
	}
	t.mu.Unlock()
	for _, cn := range idle {
		cn.close()
	}
}

// prewarm opens up to n connections at once, each with a GET BASE/models, and pools
// those that answer 200; it returns how many did.
func (t *rawTransport) prewarm(ctx context.Context, n int) int {
	n = min(n, t.maxIdle)
	conns := make(chan *rawConn, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(10 * time.Second)
			cn, err := t.dial(ctx, deadline)
			if err != nil {
				return
			}
			if err := writeAll(ctx, cn.fd, [][]byte{t.models}, deadline); err != nil {
				cn.close()
				return
			}
			bp := t.bufs.Get().(*[]byte)
			defer t.bufs.Put(bp)
			p := &rawResp{buf: *bp, res: &results.Result{}, conn: cn, deadline: deadline, discard: true}
			err = p.run(ctx)
			if err != nil || p.state != rsDone || p.closeConn || p.status != http.StatusOK || p.lo != p.hi {
				cn.close()
				return
			}
			conns <- cn
		}()
	}
	wg.Wait()
	close(conns)
	got := 0
	for cn := range conns {
		t.put(cn)
		got++
	}
	return got
}

// appendHead appends r's request head for a body of n bytes: the constant part, r's
// X-Request-Id and session header, and Content-Length. With placeholder set, the run id
// is not known yet: runIDLen zeros stand in for it, and r.runIDAt says where (the runner
// writes it over them at dispatch). Else r.runID is written ("": no X-Request-Id).
func (t *rawTransport) appendHead(b []byte, r *request, n int, placeholder bool) []byte {
	b = append(b, t.head...)
	if placeholder || r.runID != "" {
		b = append(b, RequestIDHeader+": "...)
		r.runIDAt = len(b)
		if placeholder {
			b = append(b, runIDPlaceholder...)
		} else {
			b = append(b, r.runID...)
		}
		b = append(b, '-')
		b = strconv.AppendInt(b, r.id, 10)
		b = append(b, "\r\n"...)
	}
	if r.hasSession && t.session != "" {
		b = append(b, t.session...)
		b = append(b, ": "...)
		b = strconv.AppendInt(b, r.session, 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "\r\n\r\n"...)
}

// headCap is a capacity that holds any request head appendHead builds with t.
func (t *rawTransport) headCap() int {
	return len(t.head) + len(RequestIDHeader) + len(t.session) + runIDLen + 3*20 + 32
}

// headOf returns r's request head, building it if the preparer did not.
func (t *rawTransport) headOf(r *request) []byte {
	if r.head == nil {
		r.head = t.appendHead(make([]byte, 0, t.headCap()), r, len(r.body), false)
	}
	return r.head
}

// rawStart is a request the dispatcher has begun sending itself, on a pooled
// connection, when it was due: written bytes of the message went out at once.
type rawStart struct {
	cn      *rawConn
	written int
	sentNS  int64 // just before the writev, which wrote the whole message if written says so
	err     error
}

// startNow begins sending r from the dispatcher if the raw client has a pooled
// connection (it never dials: the dispatcher must not wait); nil when it has none.
func (c *Client) startNow(clk clock, r *request) *rawStart {
	if c.raw == nil {
		return nil
	}
	cn := c.raw.takeIdle()
	if cn == nil {
		return nil
	}
	return c.writeNow(clk, cn, r)
}

// startAt takes a pooled connection and sends r on it at r's due time from the
// dispatcher's thread (threadWaiter.sendAt: the writev leaves as the thread wakes, stamped
// just before it); nil when the pool has no idle connection.
func (c *Client) startAt(w *threadWaiter, r *request) *rawStart {
	cn := c.raw.takeIdle()
	if cn == nil {
		return nil
	}
	st := &rawStart{cn: cn}
	head := c.raw.headOf(r)
	iov, cnt := messageIovec(head, r.body)
	sent, n, e := w.sendAt(r.dueNS, cn.fd, &iov[0], cnt)
	st.sentNS = sent
	switch e {
	case 0:
		st.written = n
	case syscall.EAGAIN: // nothing went: exchange writes it all
	default:
		st.err = os.NewSyscallError("writev", e)
	}
	runtime.KeepAlive(head)
	runtime.KeepAlive(r.body)
	return st
}

// messageIovec is the writev vector of a request's head and body (cnt entries).
func messageIovec(head, body []byte) (iov [2]syscall.Iovec, cnt int) {
	iov[0].Base = &head[0]
	iov[0].SetLen(len(head))
	cnt = 1
	if len(body) > 0 {
		iov[1].Base = &body[0]
		iov[1].SetLen(len(body))
		cnt = 2
	}
	return iov, cnt
}

// writeNow writes what cn's socket takes of r's message at once, never waiting: one
// writev(2). exchange writes any rest.
//
// The send is stamped just before the writev, not after. On one host the writev wakes
// the server's thread, and the kernel may switch to it as the call returns; and a
// goroutine returning from a syscall may wait for a P. A stamp taken after could fall
// after the server had read the request: TestRunOpenLoopRecordsEveryChunk measured TTFTs
// 0.15 to 3 ms under the server's own with both CPUs busy. Stamped before, a measured
// TTFT is never shorter than the server's.
func (c *Client) writeNow(clk clock, cn *rawConn, r *request) *rawStart {
	st := &rawStart{cn: cn}
	head := c.raw.headOf(r)
	iov, cnt := messageIovec(head, r.body)
	raceio.Release(cn.fd)
	st.sentNS = clk.now()
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(cn.fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(cnt))
		switch e {
		case 0:
			st.written = int(n)
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
		default:
			st.err = os.NewSyscallError("writev", e)
		}
		return st
	}
}

// rawWriteWait bounds one wait for a socket's room in writeAll: the request's deadline
// and its context are checked between waits.
const rawWriteWait = 50 * time.Millisecond

// writeAll writes bufs to the non-blocking socket fd, waiting in poll(2) while the socket
// is full (a message larger than the socket's buffer: a huge prompt). It fails with
// os.ErrDeadlineExceeded, as a connection's deadline would, when deadline passes or ctx
// ends first.
func writeAll(ctx context.Context, fd int, bufs [][]byte, deadline time.Time) error {
	for {
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
		if len(bufs) == 0 {
			return nil
		}
		var iov [2]syscall.Iovec
		cnt := 0
		for _, b := range bufs {
			if cnt == len(iov) {
				break
			}
			if len(b) > 0 {
				iov[cnt].Base = &b[0]
				iov[cnt].SetLen(len(b))
				cnt++
			}
		}
		raceio.Release(fd)
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(cnt))
		switch e {
		case 0:
			for w := int(n); w > 0 && len(bufs) > 0; {
				k := min(w, len(bufs[0]))
				bufs[0] = bufs[0][k:]
				w -= k
				if len(bufs[0]) == 0 {
					bufs = bufs[1:]
				}
			}
		case syscall.EINTR:
		case syscall.EAGAIN:
			wait := rawWriteWait
			if !deadline.IsZero() {
				wait = min(wait, time.Until(deadline))
			}
			if ctx.Err() != nil || wait <= 0 {
				return os.ErrDeadlineExceeded
			}
			pfd := struct {
				fd             int32
				events, revent int16
			}{fd: int32(fd), events: 0x4} // POLLOUT
			ts := syscall.NsecToTimespec(int64(wait))
			syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		default:
			return os.NewSyscallError("writev", e)
		}
	}
}

// doRaw is Client.do over the raw client; pre, when set, is the send the dispatcher
// began. A request that a reused connection loses within rawRetryWithin of its send and
// before any byte of a response (the server closed it while idle) is sent once more on a
// new connection, as net/http does; its send time is then the second send's.
func (c *Client) doRaw(ctx context.Context, clk clock, r *request, res *results.Result, sse *sseReader, onTokens func(int), pre *rawStart) {
	var deadline time.Time
	if c.opts.Timeout > 0 {
		deadline = time.Now().Add(c.opts.Timeout)
	}
	bp := c.raw.bufs.Get().(*[]byte)
	defer c.raw.bufs.Put(bp)
	c.rawAttempts(ctx, clk, r, res, sse, onTokens, pre, deadline, *bp, 0)
}

// rawAttempts is doRaw's loop from attempt on.
func (c *Client) rawAttempts(ctx context.Context, clk clock, r *request, res *results.Result, sse *sseReader, onTokens func(int),
	pre *rawStart, deadline time.Time, buf []byte, attempt int) {
	for ; ; attempt++ {
		st := pre
		pre = nil
		if st == nil {
			cn, err := c.raw.get(ctx, deadline)
			if err != nil {
				res.Status, res.Error = c.rawBeforeResponse(ctx, err)
				return
			}
			st = c.writeNow(clk, cn, r)
		}
		if !c.exchange(ctx, clk, st, r, res, sse, onTokens, deadline, buf, attempt == 0 && st.cn.reused) {
			return
		}
		res.SentNS = results.Null
	}
}

// doRawAsync is doRaw for a request whose whole message the dispatcher has written (pre,
// rawAsyncOK): no goroutine waits for its response. The reactor that reads it finishes
// the exchange on its own thread and calls done (res complete, the client done with r and
// sse). A goroutine per request, parked on its response and woken by the reactor, cost two
// wake-ups of a thread per request (its start, its end: each a futex wake, another
// thread's spin and its sleep), the largest part of the replayer's CPU outside the reactor
// (issue 18). What may take long goes to a goroutine still: a send again on a new
// connection (a dial) and counting the output with the tokenizer.
func (c *Client) doRawAsync(ctx context.Context, clk clock, r *request, res *results.Result, sse *sseReader, onTokens func(int),
	pre *rawStart, done func()) {
	var deadline time.Time
	if c.opts.Timeout > 0 {
		deadline = time.Now().Add(c.opts.Timeout)
	}
	bp := c.raw.bufs.Get().(*[]byte)
	end := func() {
		c.raw.bufs.Put(bp)
		c.scrub(res)
		done()
	}
	mayRetry := pre.cn.reused
	// p is the closures' argument, never a captured variable: the reactor may be done with
	// p before exchangeStart returns it.
	finish := func(p *rawResp) {
		if c.exchangeEnd(ctx, clk, p, res, mayRetry) {
			res.SentNS = results.Null
			go func() {
				c.rawAttempts(ctx, clk, r, res, sse, onTokens, nil, deadline, *bp, 1)
				end()
			}()
			return
		}
		end()
	}
	p, started := c.exchangeStart(ctx, clk, pre, r, res, sse, onTokens, deadline, *bp, func(p *rawResp) {
		if p.st.mustCount() {
			go finish(p)
			return
		}
		finish(p)
	})
	if !started {
		finish(p)
	}
}

// rawAsyncOK reports whether doRawAsync can take st: the dispatcher wrote r's whole
// message.
func (c *Client) rawAsyncOK(st *rawStart, r *request) bool {
	return st != nil && st.err == nil && st.written == len(c.raw.headOf(r))+len(r.body)
}

// exchange finishes sending r on st.cn and reads the response into res. It returns true
// when the request should be sent again on another connection (st.cn is closed then).
func (c *Client) exchange(ctx context.Context, clk clock, st *rawStart, r *request, res *results.Result, sse *sseReader,
	onTokens func(int), deadline time.Time, buf []byte, mayRetry bool) (retry bool) {
	cn := st.cn
	head := c.raw.headOf(r)
	err := st.err
	sent := st.sentNS
	if err == nil && st.written < len(head)+len(r.body) {
		var bufs [][]byte
		if w := st.written; w < len(head) {
			bufs = [][]byte{head[w:], r.body}
		} else {
			bufs = [][]byte{r.body[w-len(head):]}
		}
		err = writeAll(ctx, cn.fd, bufs, deadline)
		sent = clk.now()
	}
	if err != nil {
		cn.close()
		if mayRetry && ctx.Err() == nil && connLost(err) {
			return true
		}
		res.Status, res.Error = c.rawBeforeResponse(ctx, err)
		return false
	}
	st = &rawStart{cn: cn, written: st.written, sentNS: sent}
	p, started := c.exchangeStart(ctx, clk, st, r, res, sse, onTokens, deadline, buf, nil)
	if started {
		<-p.done
	}
	return c.exchangeEnd(ctx, clk, p, res, mayRetry)
}

// exchangeStart hands the response to r, whose message st wrote whole, to a reactor.
// With onDone nil the reactor closes p.done when the response is over; else it calls
// onDone on its thread. started is false when the response could not be handed over
// (p.startErr says why): exchangeEnd is then the caller's to call at once.
func (c *Client) exchangeStart(ctx context.Context, clk clock, st *rawStart, r *request, res *results.Result, sse *sseReader,
	onTokens func(int), deadline time.Time, buf []byte, onDone func(*rawResp)) (p *rawResp, started bool) {
	res.SentNS = st.sentNS
	p = &rawResp{buf: buf, res: res, sse: sse, clk: clk, conn: st.cn, deadline: deadline, onDone: onDone}
	if onDone != nil { // nothing waits for the response's end: its reads may be batched
		p.batch = c.raw.readBatch
	}
	p.st.begin(c, res, onTokens)
	p.st.answer = r.answerBuf()
	sse.reset(nil)
	if err := p.start(ctx); err != nil {
		p.startErr = err
		return p, false
	}
	return p, true
}

// exchangeEnd completes res from p's response once it is over, and returns the connection
// to the pool or closes it. It returns true when the request should be sent again on
// another connection.
func (c *Client) exchangeEnd(ctx context.Context, clk clock, p *rawResp, res *results.Result, mayRetry bool) (retry bool) {
	cn := p.conn
	err := p.startErr
	if err == nil {
		err = p.result()
	}
	reusable := p.state == rsDone && !p.closeConn && err == nil && p.lo == p.hi && !p.canceled
	switch {
	case p.mode == modeSSE:
		switch {
		case p.st.over() || p.state == rsDone:
			p.st.end()
		default:
			res.Status, res.Error = midStream(ctx.Err() != nil, isTimeout(err), c.opts.Timeout, len(res.ChunkNS), err)
		}
	case p.mode == modeErrBody:
		res.Status = results.StatusHTTPError
		if p.encoding != "" {
			res.Error = httpErrorEncoded(p.status, p.encoding)
		} else {
			res.Error = httpErrorText(p.status, p.errBody)
		}
	case p.mode == modeNotStream:
		// res was filled when the head arrived
	default: // no complete head
		if mayRetry && !p.gotBytes && ctx.Err() == nil && connLost(err) && clk.now()-res.SentNS < int64(rawRetryWithin) {
			cn.close()
			res.HTTPStatus = results.Null
			return true
		}
		res.Status, res.Error = c.rawBeforeResponse(ctx, err)
	}
	if reusable {
		c.raw.put(cn)
	} else {
		cn.close()
	}
	return false
}

// connLost reports an error by which a reused keep-alive connection shows that the
// server had closed it: the request never reached a handler.
func connLost(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// rawBeforeResponse words an error of the raw client before a response head arrived,
// as the net/http path words it, and names a connection the server closed unanswered.
func (c *Client) rawBeforeResponse(ctx context.Context, err error) (results.Status, string) {
	canceled, timedOut := ctx.Err() != nil, isTimeout(err)
	if !canceled && !timedOut && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		return results.StatusTransportError, "server closed the connection before responding"
	}
	return beforeResponse(canceled, timedOut, c.opts.Timeout, err)
}

// isTimeout reports a deadline error: a connection's (the raw client's timeout) or a
// context's (a dial's).
func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)
}

// Response parser states.
const (
	rsHead      = iota // status line and headers
	rsChunkSize        // a chunk-size line
	rsChunkData        // chunk data
	rsChunkEnd         // the CRLF after chunk data
	rsTrailer          // trailer lines up to the blank one
	rsBodyLen          // a Content-Length body
	rsBodyEOF          // a body that ends with the connection
	rsDone             // the response is complete
)

// What the body is for.
const (
	modeNone      = iota // no head yet
	modeSSE              // a 2xx event stream: into sse and st
	modeErrBody          // a non-2xx answer: its first bytes make the message
	modeNotStream        // 2xx but not an event stream: recorded, body not read
	modeDiscard          // read only to find the body's end (prewarm's GET)
)

// rawResp reads one response from a connection, pushing an event stream's bytes through
// the SSE reader into the stream state as they arrive.
type rawResp struct {
	conn *rawConn
	clk  clock
	res  *results.Result
	sse  *sseReader
	st   streamState

	fd       int            // the connection's socket, while the reactor reads it
	done     chan struct{}  // closed by the reactor when the response is over or failed
	onDone   func(*rawResp) // when set, called by the reactor instead (done is nil)
	stop     func() bool    // stops the context.AfterFunc that cancels the read
	startErr error          // the response could not be handed to a reactor
	batch    int64          // ClientOptions.ReadBatch when the reactor may batch its reads; 0: read at once
	opErr    error          // a read's error
	timedOut bool           // the deadline passed, or the context ended (canceled)
	canceled bool           // the context ended while the response was read

	buf       []byte // raw bytes; unconsumed are buf[lo:hi]
	lo, hi    int
	eof       bool
	gotBytes  bool
	err       error // a protocol error that ended the read
	state     int
	mode      int
	status    int
	remaining int64
	closeConn bool
	drainSet  bool // a short deadline for the body's end is set after [DONE]
	errBody   []byte
	encoding  string    // the response's Content-Encoding, when not identity
	deadline  time.Time // the request's (zero: none)
	discard   bool      // read the body only to its end (prewarm's GET)
	lastStamp int64     // the last read's stamp (run clock): stamps never go back
}

// run reads until the response is complete, fails, or the deadline passes: it hands p
// to the connection's reactor, which reads and parses the stream on its thread, and waits
// once for the reactor to be done with it. ctx's end (the run's hard stop) ends the read
// at once, as a passed deadline would.
func (p *rawResp) run(ctx context.Context) error {
	if err := p.start(ctx); err != nil {
		return err
	}
	<-p.done
	return p.result()
}

// start hands p to its connection's reactor. From then until the reactor closes p.done
// (or, with p.onDone set, calls it) p belongs to the reactor's thread; a stop of ctx
// ends the read at once.
func (p *rawResp) start(ctx context.Context) error {
	r, err := reactorFor(p.conn.fd)
	if err != nil {
		return err
	}
	p.fd = p.conn.fd
	if p.onDone == nil {
		p.done = make(chan struct{})
	}
	// Before add: once added, p may be over (onDone called) before add returns. A stop
	// of ctx before add finds p not yet read and is lost (reactor.cancel), hence the
	// check after it.
	p.stop = context.AfterFunc(ctx, func() { r.cancel(p) })
	if err := r.add(p); err != nil {
		p.stop()
		return err
	}
	if ctx.Err() != nil {
		r.cancel(p)
	}
	return nil
}

// result is the error that ended p's read, once the reactor is done with p.
func (p *rawResp) result() error {
	p.canceled = !p.stop()
	switch {
	case p.err != nil:
		return p.err
	case p.opErr != nil:
		return p.opErr
	case p.timedOut:
		return os.ErrDeadlineExceeded // as the connection's deadline said
	}
	return nil
}

// makeRoom moves unconsumed bytes to the front and grows the buffer for a long head. A
// buffer read to its end is read into from its start again: a stream's reads then land on
// the same few cache lines, which the reactor touched one token gap ago, instead of
// walking the whole buffer (300 streams' 16 KiB do not fit a core's cache, and the
// kernel's copy and the parse each paid the misses).
func (p *rawResp) makeRoom() bool {
	if p.lo == p.hi {
		p.lo, p.hi = 0, 0
	}
	if p.hi < len(p.buf) {
		return true
	}
	if p.lo > 0 {
		p.hi = copy(p.buf, p.buf[p.lo:p.hi])
		p.lo = 0
		return true
	}
	if len(p.buf) >= rawMaxHead {
		return false
	}
	nb := make([]byte, min(2*len(p.buf), rawMaxHead))
	copy(nb, p.buf[:p.hi])
	p.buf = nb
	return true
}

// line returns the next LF-terminated line in the buffer, without CRLF or LF.
func (p *rawResp) line() ([]byte, bool) {
	i := bytes.IndexByte(p.buf[p.lo:p.hi], '\n')
	if i < 0 {
		return nil, false
	}
	l := p.buf[p.lo : p.lo+i]
	p.lo += i + 1
	return bytes.TrimSuffix(l, []byte{'\r'}), true
}

// process consumes what the buffer holds; true means stop reading (done or failed).
func (p *rawResp) process(stamp int64) bool {
	for {
		switch p.state {
		case rsHead:
			end := headEnd(p.buf[p.lo:p.hi])
			if end < 0 {
				if p.eof {
					p.err = io.ErrUnexpectedEOF
					return true
				}
				return false
			}
			if err := p.parseHead(p.buf[p.lo : p.lo+end]); err != nil {
				p.err = err
				return true
			}
			p.lo += end
			if p.state == rsHead { // a 1xx interim response
				continue
			}
			if p.mode == modeNotStream || p.state == rsDone {
				return true
			}
		case rsChunkSize, rsChunkEnd, rsTrailer:
			if p.state == rsChunkEnd && p.lo < p.hi && p.buf[p.lo] != '\r' && p.buf[p.lo] != '\n' {
				p.err = errors.New("malformed chunked encoding: no CRLF after chunk data")
				return true
			}
			l, ok := p.line()
			if !ok {
				if p.hi-p.lo > 4096 {
					p.err = errors.New("malformed chunked encoding: line too long")
					return true
				}
				if p.eof {
					p.err = io.ErrUnexpectedEOF
					return true
				}
				return false
			}
			switch p.state {
			case rsChunkSize:
				if i := bytes.IndexByte(l, ';'); i >= 0 {
					l = l[:i]
				}
				size, err := strconv.ParseUint(string(bytes.TrimSpace(l)), 16, 63)
				if err != nil {
					p.err = fmt.Errorf("malformed chunked encoding: chunk size %q", shortText(l))
					return true
				}
				if size == 0 {
					p.state = rsTrailer
				} else {
					p.remaining, p.state = int64(size), rsChunkData
				}
			case rsChunkEnd:
				if len(l) != 0 {
					p.err = errors.New("malformed chunked encoding: no CRLF after chunk data")
					return true
				}
				p.state = rsChunkSize
			case rsTrailer:
				if len(l) == 0 {
					p.state = rsDone
				}
			}
		case rsChunkData, rsBodyLen:
			if p.lo == p.hi {
				if p.eof {
					p.err = io.ErrUnexpectedEOF
					return true
				}
				return false
			}
			n := int(min(int64(p.hi-p.lo), p.remaining))
			stop := p.deliver(p.buf[p.lo:p.lo+n], stamp)
			p.lo += n
			p.remaining -= int64(n)
			if p.remaining == 0 {
				if p.state == rsChunkData {
					p.state = rsChunkEnd
				} else {
					p.state = rsDone
				}
			}
			if stop {
				return true
			}
		case rsBodyEOF:
			stop := p.deliver(p.buf[p.lo:p.hi], stamp)
			p.lo = p.hi
			if p.eof {
				p.state = rsDone
			}
			if stop || !p.eof {
				return stop
			}
		case rsDone:
			return true
		}
	}
}

// deliver hands body bytes on; true means stop reading.
func (p *rawResp) deliver(b []byte, stamp int64) bool {
	switch p.mode {
	case modeErrBody:
		p.errBody = append(p.errBody, b[:min(len(b), rawErrBody-len(p.errBody))]...)
		return len(p.errBody) >= rawErrBody
	case modeSSE:
		for len(b) > 0 && !p.st.over() {
			if data, n := p.sse.direct(b); n > 0 {
				b = b[n:]
				p.st.event(stamp, nil, data) // an end or failure shows in p.st.over
				continue
			}
			n := p.sse.write(b, stamp)
			b = b[n:]
			for p.sse.nextBuffered() {
				if p.st.event(p.sse.Stamp(), p.sse.Event(), p.sse.Data()) {
					break
				}
			}
			if err := p.sse.Err(); err != nil && !p.st.over() {
				p.st.fail(results.StatusStreamError, err.Error())
			}
			if n == 0 && !p.st.over() {
				p.st.fail(results.StatusStreamError, io.ErrNoProgress.Error())
			}
		}
		if p.st.failed {
			return true
		}
		if p.st.done && !p.drainSet {
			// The record is complete; the body's end is awaited only to reuse the
			// connection, and not for long.
			p.drainSet = true
			if d := time.Now().Add(rawDrainAfter); p.deadline.IsZero() || d.Before(p.deadline) {
				p.deadline = d
			}
		}
	}
	return false
}

// headEnd returns the length of the head through its blank line, or -1.
func headEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		e := i + j + 1
		if k := i + j; k > 0 && (b[k-1] == '\n' || (b[k-1] == '\r' && k > 1 && b[k-2] == '\n')) {
			return e
		}
		i = e
	}
}

// parseHead reads the status line and the headers that matter, and chooses the body's
// framing and purpose.
func (p *rawResp) parseHead(h []byte) error {
	l, rest, _ := bytes.Cut(h, []byte{'\n'})
	l = bytes.TrimSuffix(l, []byte{'\r'})
	proto, status, ok := bytes.Cut(l, []byte{' '})
	if !ok || !bytes.HasPrefix(proto, []byte("HTTP/1.")) || len(status) < 3 {
		return fmt.Errorf("malformed HTTP response %q", shortText(l))
	}
	code, err := strconv.Atoi(string(status[:3]))
	if err != nil || code < 100 || code > 999 {
		return fmt.Errorf("malformed HTTP status line %q", shortText(l))
	}
	if code < 200 { // interim (100 Continue, 103 Early Hints): the real head follows
		return nil
	}
	p.status = code
	p.res.HTTPStatus = int32(code)
	http10 := string(proto) == "HTTP/1.0"
	p.closeConn = http10
	var contentType []byte
	contentLength := int64(-1)
	chunked := false
	for len(rest) > 0 {
		l, rest, _ = bytes.Cut(rest, []byte{'\n'})
		l = bytes.TrimSuffix(l, []byte{'\r'})
		name, value, ok := bytes.Cut(l, []byte{':'})
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Type")):
			contentType = value
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
		case bytes.EqualFold(name, []byte("Content-Encoding")):
			if encoded(string(value)) {
				p.encoding = string(value)
			}
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("malformed Content-Length %q", shortText(value))
			}
			contentLength = n
		case bytes.EqualFold(name, []byte("Connection")):
			v := bytes.ToLower(value)
			if bytes.Contains(v, []byte("close")) {
				p.closeConn = true
			} else if http10 && bytes.Contains(v, []byte("keep-alive")) {
				p.closeConn = false
			}
		}
	}
	switch {
	case code == 204 || code == 304:
		p.state = rsDone
	case chunked:
		p.state = rsChunkSize
	case contentLength >= 0:
		p.state, p.remaining = rsBodyLen, contentLength
		if contentLength == 0 {
			p.state = rsDone
		}
	default:
		p.state, p.closeConn = rsBodyEOF, true
	}
	switch {
	case p.discard:
		p.mode = modeDiscard
	case code > 299:
		p.mode = modeErrBody
	case p.encoding != "":
		p.mode = modeNotStream
		p.res.Status, p.res.Error = results.StatusStreamError, streamEncoded(p.encoding)
	case !bytes.HasPrefix(contentType, []byte("text/event-stream")):
		p.mode = modeNotStream
		p.res.Status = results.StatusStreamError
		p.res.Error = fmt.Sprintf("response is not an event stream (Content-Type %q)", contentType)
	default:
		p.mode = modeSSE
	}
	return nil
}
