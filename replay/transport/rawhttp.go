//go:build linux

package transport

import (
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/llmreplay/llmreplay/internal/raceio"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"
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

// RawBuilt says the raw client is in this build: it reads and writes its sockets with
// Linux's read(2), writev(2) and epoll, on descriptors it owns (outside the runtime's
// netpoller), and is proven on Linux only (rawhttp_other.go stands in elsewhere).
const RawBuilt = true

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

	// c is the client the transport serves: its timeout, tokenizer and secrets.
	c *Client
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

// X-Request-Id and session header, and Content-Length. With placeholder set, the run id
// is not known yet: runIDLen zeros stand in for it, and r.runIDAt says where (the runner
// writes it over them at dispatch). Else r.runID is written ("": no X-Request-Id).
func (t *rawTransport) appendHead(b []byte, r *Request, n int, placeholder bool) []byte {
	b = append(b, t.head...)
	if placeholder || r.RunID != "" {
		b = append(b, RequestIDHeader+": "...)
		r.RunIDAt = len(b)
		if placeholder {
			b = append(b, RunIDPlaceholder...)
		} else {
			b = append(b, r.RunID...)
		}
		b = append(b, '-')
		b = strconv.AppendInt(b, r.ID, 10)
		b = append(b, "\r\n"...)
	}
	if r.HasSession && t.session != "" {
		b = append(b, t.session...)
		b = append(b, ": "...)
		b = strconv.AppendInt(b, r.Session, 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "\r\n\r\n"...)
}

// headCap is a capacity that holds any request head appendHead builds with t.
func (t *rawTransport) headCap() int {
	return len(t.head) + len(RequestIDHeader) + len(t.session) + RunIDLen + 3*20 + 32
}

// headOf returns r's request head, building it if the preparer did not.
func (t *rawTransport) headOf(r *Request) []byte {
	if r.Head == nil {
		r.Head = t.appendHead(make([]byte, 0, t.headCap()), r, r.BodyLen(), false)
	}
	return r.Head
}

// rawStart is a send the dispatcher began itself (splitTransport.begin), on a pooled
// connection, when the request was due: written bytes of the message went out at once.
type rawStart struct {
	cn      *rawConn
	written int
	total   int   // the message's length: head and body
	sentNS  int64 // just before the writev, which wrote the whole message if written says so
	err     error
}

func (st *rawStart) SentAt() int64 { return st.sentNS }

func (st *rawStart) Whole() bool { return st.err == nil && st.written == st.total }

// rawStartOf returns the raw client's state of a send it began; nil for none.
func rawStartOf(st SendStart) *rawStart {
	pre, _ := st.(*rawStart)
	return pre
}

// rawTransport is a SplitTransport: the dispatcher finds that out at run time (a type
// assertion), so that a renamed method would silently lose the split send; say it here.
var _ SplitTransport = (*rawTransport)(nil)

// Prepare builds req's request head with its body, in the preparer.
func (t *rawTransport) Prepare(req *Request, placeholder bool) {
	req.Head = t.appendHead(make([]byte, 0, t.headCap()), req, req.BodyLen(), placeholder)
}

// RoundTrip is doRaw, with the client's secrets taken out of the record's error.
func (t *rawTransport) RoundTrip(ctx context.Context, clk Clock, req *Request, res *results.Result, sse *SSEReader, onTokens func(int), st SendStart) {
	t.doRaw(ctx, clk, req, res, sse, onTokens, rawStartOf(st))
	t.c.Scrub(res)
}

// RoundTripAsync is doRawAsync.
func (t *rawTransport) RoundTripAsync(ctx context.Context, clk Clock, req *Request, res *results.Result, sse *SSEReader, onTokens func(int),
	st SendStart, done func()) {
	t.doRawAsync(ctx, clk, req, res, sse, onTokens, rawStartOf(st), done)
}

// Begin begins sending r from the dispatcher if the pool has an idle connection (it
// never dials: the dispatcher must not wait); nil when it has none.
func (t *rawTransport) Begin(clk Clock, r *Request) SendStart {
	cn := t.takeIdle()
	if cn == nil {
		return nil
	}
	return t.writeNow(clk, cn, r)
}

// BeginAt takes a pooled connection and sends r on it at r's due time from the
// dispatcher's thread (DueWriter.WriteAt: the writev leaves as the thread wakes, stamped
// just before it); nil when the pool has no idle connection.
func (t *rawTransport) BeginAt(w DueWriter, r *Request) SendStart {
	cn := t.takeIdle()
	if cn == nil {
		return nil
	}
	head := t.headOf(r)
	st := &rawStart{cn: cn, total: len(head) + r.BodyLen()}
	sent, n, e := w.WriteAt(r.DueNS, cn.fd, head, r)
	st.sentNS = sent
	switch e {
	case 0:
		st.written = n
	case syscall.EAGAIN: // nothing went: exchange writes it all
	default:
		st.err = os.NewSyscallError("writev", e)
	}
	return st
}

// MessageIovec is the writev vector of a request's head and r's body (cnt entries): the
// head, then the body's parts (BodyParts), the shared one in place, not copied.
func MessageIovec(head []byte, r *Request) (iov [4]syscall.Iovec, cnt int) {
	iov[0].Base = &head[0]
	iov[0].SetLen(len(head))
	cnt = 1
	for _, p := range r.BodyParts() {
		if len(p) > 0 {
			iov[cnt].Base = &p[0]
			iov[cnt].SetLen(len(p))
			cnt++
		}
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
func (t *rawTransport) writeNow(clk Clock, cn *rawConn, r *Request) *rawStart {
	head := t.headOf(r)
	st := &rawStart{cn: cn, total: len(head) + r.BodyLen()}
	iov, cnt := MessageIovec(head, r)
	raceio.Release(cn.fd)
	st.sentNS = clk.Now()
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

// doRaw is roundTrip without the scrub; pre, when set, is the send the dispatcher
// began. A request that a reused connection loses within rawRetryWithin of its send and
// before any byte of a response (the server closed it while idle) is sent once more on a
// new connection, as net/http does; its send time is then the second send's.
func (t *rawTransport) doRaw(ctx context.Context, clk Clock, r *Request, res *results.Result, sse *SSEReader, onTokens func(int), pre *rawStart) {
	var deadline time.Time
	if t.c.opts.Timeout > 0 {
		deadline = time.Now().Add(t.c.opts.Timeout)
	}
	bp := t.bufs.Get().(*[]byte)
	defer t.bufs.Put(bp)
	t.rawAttempts(ctx, clk, r, res, sse, onTokens, pre, deadline, *bp, 0)
}

// rawAttempts is doRaw's loop from attempt on.
func (t *rawTransport) rawAttempts(ctx context.Context, clk Clock, r *Request, res *results.Result, sse *SSEReader, onTokens func(int),
	pre *rawStart, deadline time.Time, buf []byte, attempt int) {
	for ; ; attempt++ {
		st := pre
		pre = nil
		if st == nil {
			// A send again goes on a new connection: the pool's other idle connections
			// may have been closed by the server as the lost one was (net/http watches
			// its idle connections and drops those; the raw client finds out by sending).
			get := t.get
			if attempt > 0 {
				get = t.dial
			}
			cn, err := get(ctx, deadline)
			if err != nil {
				res.Status, res.Error = t.rawBeforeResponse(ctx, err)
				return
			}
			st = t.writeNow(clk, cn, r)
		}
		if !t.exchange(ctx, clk, st, r, res, sse, onTokens, deadline, buf, attempt == 0 && st.cn.reused) {
			return
		}
		res.SentNS = results.Null
	}
}

// doRawAsync is doRaw for a request whose whole message the dispatcher has written (pre,
// whole): no goroutine waits for its response. The reactor that reads it finishes
// the exchange on its own thread and calls done (res complete, the client done with r and
// sse). A goroutine per request, parked on its response and woken by the reactor, cost two
// wake-ups of a thread per request (its start, its end: each a futex wake, another
// thread's spin and its sleep), the largest part of the replayer's CPU outside the reactor
// (replaybench fidelity). What may take long goes to a goroutine still: a send again on a new
// connection (a dial) and counting the output with the tokenizer.
func (t *rawTransport) doRawAsync(ctx context.Context, clk Clock, r *Request, res *results.Result, sse *SSEReader, onTokens func(int),
	pre *rawStart, done func()) {
	var deadline time.Time
	if t.c.opts.Timeout > 0 {
		deadline = time.Now().Add(t.c.opts.Timeout)
	}
	bp := t.bufs.Get().(*[]byte)
	end := func() {
		t.bufs.Put(bp)
		t.c.Scrub(res)
		done()
	}
	mayRetry := pre.cn.reused
	// p is the closures' argument, never a captured variable: the reactor may be done with
	// p before exchangeStart returns it.
	finish := func(p *rawResp) {
		if t.exchangeEnd(ctx, clk, p, res, mayRetry) {
			res.SentNS = results.Null
			go func() {
				t.rawAttempts(ctx, clk, r, res, sse, onTokens, nil, deadline, *bp, 1)
				end()
			}()
			return
		}
		end()
	}
	p, started := t.exchangeStart(ctx, clk, pre, r, res, sse, onTokens, deadline, *bp, func(p *rawResp) {
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

// exchange finishes sending r on st.cn and reads the response into res. It returns true
// when the request should be sent again on another connection (st.cn is closed then).
func (t *rawTransport) exchange(ctx context.Context, clk Clock, st *rawStart, r *Request, res *results.Result, sse *SSEReader,
	onTokens func(int), deadline time.Time, buf []byte, mayRetry bool) (retry bool) {
	cn := st.cn
	head := t.headOf(r)
	err := st.err
	sent := st.sentNS
	if err == nil && st.written < len(head)+r.BodyLen() {
		parts := r.BodyParts()
		bufs := [][]byte{head, parts[0], parts[1], parts[2]}
		for w := st.written; w > 0; { // skip what the first writev took
			k := min(w, len(bufs[0]))
			bufs[0] = bufs[0][k:]
			w -= k
			if len(bufs[0]) == 0 {
				bufs = bufs[1:]
			}
		}
		err = writeAll(ctx, cn.fd, bufs, deadline)
		sent = clk.Now()
	}
	if err != nil {
		cn.close()
		if mayRetry && ctx.Err() == nil && connLost(err) {
			return true
		}
		res.Status, res.Error = t.rawBeforeResponse(ctx, err)
		return false
	}
	st = &rawStart{cn: cn, written: st.written, sentNS: sent}
	p, started := t.exchangeStart(ctx, clk, st, r, res, sse, onTokens, deadline, buf, nil)
	if started {
		<-p.done
	}
	return t.exchangeEnd(ctx, clk, p, res, mayRetry)
}

// exchangeStart hands the response to r, whose message st wrote whole, to a reactor.
// With onDone nil the reactor closes p.done when the response is over; else it calls
// onDone on its thread. started is false when the response could not be handed over
// (p.startErr says why): exchangeEnd is then the caller's to call at once.
func (t *rawTransport) exchangeStart(ctx context.Context, clk Clock, st *rawStart, r *Request, res *results.Result, sse *SSEReader,
	onTokens func(int), deadline time.Time, buf []byte, onDone func(*rawResp)) (p *rawResp, started bool) {
	res.SentNS = st.sentNS
	p = &rawResp{buf: buf, res: res, sse: sse, clk: clk, conn: st.cn, deadline: deadline, onDone: onDone}
	if onDone != nil { // nothing waits for the response's end: its reads may be batched
		p.batch = t.readBatch
	}
	p.st.begin(t.c, res, onTokens)
	p.st.answer = r.AnswerBuf()
	if k := t.c.enc.Kind(); k.Unary {
		p.un = newUnary(k, res, 0)
	}
	sse.Reset(nil)
	if err := p.start(ctx); err != nil {
		p.startErr = err
		return p, false
	}
	return p, true
}

// exchangeEnd completes res from p's response once it is over, and returns the connection
// to the pool or closes it. It returns true when the request should be sent again on
// another connection.
func (t *rawTransport) exchangeEnd(ctx context.Context, clk Clock, p *rawResp, res *results.Result, mayRetry bool) (retry bool) {
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
			res.Status, res.Error = midStream(ctx.Err() != nil, isTimeout(err), t.c.opts.Timeout, len(res.ChunkNS), err)
		}
	case p.mode == modeErrBody:
		res.Status = results.StatusHTTPError
		if p.encoding != "" {
			res.Error = wire.EncodedErrorText(p.status, p.encoding)
		} else {
			res.Error = wire.HTTPErrorText(p.status, p.errBody)
		}
	case p.mode == modeUnary:
		switch {
		case p.un.failed || p.state == rsDone:
			end := p.un.lastNS
			if end == results.Null {
				end = clk.Now() // an empty body
			}
			p.un.end(end)
		default:
			p.un.broken(ctx.Err() != nil, isTimeout(err), t.c.opts.Timeout, err)
		}
	case p.mode == modeNotStream:
		// res was filled when the head arrived
	default: // no complete head
		if mayRetry && !p.gotBytes && ctx.Err() == nil && connLost(err) && clk.Now()-res.SentNS < int64(rawRetryWithin) {
			cn.close()
			res.HTTPStatus = results.Null
			return true
		}
		res.Status, res.Error = t.rawBeforeResponse(ctx, err)
	}
	if reusable {
		t.put(cn)
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
func (t *rawTransport) rawBeforeResponse(ctx context.Context, err error) (results.Status, string) {
	canceled, timedOut := ctx.Err() != nil, isTimeout(err)
	if !canceled && !timedOut && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		return results.StatusTransportError, "server closed the connection before responding"
	}
	return beforeResponse(canceled, timedOut, t.c.opts.Timeout, err)
}

// isTimeout reports a deadline error: a connection's (the raw client's timeout) or a
// context's (a dial's).
func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)
}
