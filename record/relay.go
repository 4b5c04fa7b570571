package record

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmreplay/llmreplay/wire"
)

// Relay is the recording proxy's hand-written HTTP/1.1 relay: it reads a client's
// request and relays it to the upstream, and the response back, from one goroutine per
// connection, with none of net/http's hand-offs between goroutines on the way to the
// first token. It serves a GET or a POST in plain form, recording it when its path is a
// recorded API's POST and passing it on unrecorded otherwise (a client's preflight GET
// keeps its connection on the relay). A connection whose request is in any other form
// (another method, an upgrade, HTTP/1.0, an unusual framing, a head over 16 KiB or a
// body over MaxBody) is handed, with the bytes already read, to a net/http server
// running the Proxy, which serves it from then on.
type Relay struct {
	up      *url.URL
	rec     *Recorder
	maxBody int64
	headTO  time.Duration
	pool    *upstreamPool
	proxy   *Proxy
	srv     *http.Server  // serves the connections handed over
	handed  *connListener // how they are handed over
	ctx     context.Context
	cancel  context.CancelFunc
	served  chan struct{}
	running sync.WaitGroup // the connections' goroutines

	mu       sync.Mutex
	ln       net.Listener
	conns    map[net.Conn]bool // the relay's connections: true while a request is in flight
	handlers int               // handlers running on connections handed to net/http
	closed   bool
}

// RelayOptions configure a Relay beside the ProxyOptions of the net/http proxy it hands
// other requests to.
type RelayOptions struct {
	ProxyOptions
	// TLS configures the connections to an https upstream; nil: the system's roots.
	TLS *tls.Config
	// HeadTimeout bounds the wait for a request's head on a client's connection, idle
	// keep-alive time included (net/http's ReadHeaderTimeout, which the command's server
	// sets to a minute); a connection past it is closed. 0: a minute.
	HeadTimeout time.Duration
}

// NewRelay returns the relay to upstream, recording into rec.
func NewRelay(upstream *url.URL, rec *Recorder, o RelayOptions) *Relay {
	po := o.ProxyOptions
	if po.MaxBody <= 0 {
		po.MaxBody = 64 << 20
	}
	if po.Transport == nil && o.TLS != nil {
		t := NewUpstreamTransport()
		t.TLSClientConfig = o.TLS
		po.Transport = t
	}
	r := &Relay{up: upstream, rec: rec, maxBody: po.MaxBody, pool: newUpstreamPool(upstream, o.TLS),
		proxy: NewProxy(upstream, rec, po), conns: map[net.Conn]bool{}, served: make(chan struct{})}
	r.headTO = o.HeadTimeout
	if r.headTO <= 0 {
		r.headTO = time.Minute
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.handed = &connListener{conns: make(chan net.Conn), done: make(chan struct{})}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serveHanded), ReadHeaderTimeout: time.Minute, ErrorLog: log.New(io.Discard, "", 0)}
	return r
}

// Serve accepts connections on ln until Shutdown or Close; it returns
// http.ErrServerClosed then, else the error that stopped it.
func (r *Relay) Serve(ln net.Listener) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return http.ErrServerClosed
	}
	r.ln = ln
	r.handed.addr = ln.Addr()
	r.mu.Unlock()
	go func() { r.srv.Serve(r.handed); close(r.served) }()
	for {
		c, err := ln.Accept()
		if err != nil {
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if closed {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return err
		}
		if !r.track(c, false) {
			c.Close()
			continue
		}
		r.running.Add(1)
		go func() { defer r.running.Done(); r.serveConn(c) }()
	}
}

// track records c's state (busy: a request in flight); false when the relay is closing
// and c should close.
func (r *Relay) track(c net.Conn, busy bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		delete(r.conns, c)
		return false
	}
	r.conns[c] = busy
	return true
}

func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// stop stops accepting; it closes the idle connections, or all with all set.
func (r *Relay) stop(all bool) {
	r.mu.Lock()
	first := !r.closed
	r.closed = true
	if first && r.ln != nil {
		r.ln.Close()
	}
	for c, busy := range r.conns {
		if all || !busy {
			c.Close()
			delete(r.conns, c)
		}
	}
	r.mu.Unlock()
	if first {
		r.handed.close()
	}
	if all {
		r.cancel()
	}
}

// Shutdown stops accepting and closes idle connections, waits for the requests in flight
// (each connection closes once its response has passed), and for the handed-over ones
// as http.Server.Shutdown does; ctx's end cuts the wait short with its error.
func (r *Relay) Shutdown(ctx context.Context) error {
	r.stop(false)
	err := r.srv.Shutdown(ctx)
	if werr := r.wait(ctx, func() int { return len(r.conns) + r.handlers }); werr != nil {
		return werr
	}
	r.pool.close()
	return err
}

// wait returns once busy, read under the lock, is 0, or with ctx's error when it ends first.
func (r *Relay) wait(ctx context.Context, busy func() int) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		r.mu.Lock()
		n := busy()
		r.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// serveHanded serves a request on a connection handed to net/http, counted so that Close
// and Shutdown return only once its handler, and so its hand-off to the recorder, is done
// (net/http's Close does not wait for handlers).
func (r *Relay) serveHanded(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.handlers++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.handlers--
		r.mu.Unlock()
	}()
	r.proxy.ServeHTTP(w, req)
}

// Close closes every connection at once, the requests in flight cut, and returns once
// their exchanges have been handed to the recorder.
func (r *Relay) Close() error {
	r.stop(true)
	err := r.srv.Close()
	r.running.Wait()
	// The handed connections are closed: their handlers end at their next read or write.
	r.wait(context.Background(), func() int { return r.handlers })
	r.pool.close()
	return err
}

// connListener hands the connections the relay does not serve to the net/http server.
type connListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	addr  net.Addr
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) close()         { l.once.Do(func() { close(l.done) }) }
func (l *connListener) Close() error   { l.close(); return nil }
func (l *connListener) Addr() net.Addr { return l.addr }

// handedConn is a connection handed over with the bytes the relay read of it: they are
// read again first, from the relay's reader.
type handedConn struct {
	net.Conn
	br *bufio.Reader
}

func (c *handedConn) Read(p []byte) (int, error) { return c.br.Read(p) }

// maxRelayHead is the longest request head the relay reads itself: its reader's size. A
// longer one is handed to net/http, whose limit is 1 MB.
const maxRelayHead = 16 << 10

func (r *Relay) serveConn(c net.Conn) {
	br := bufio.NewReaderSize(c, maxRelayHead)
	for {
		c.SetReadDeadline(time.Now().Add(r.headTO))
		n, err := peekHead(br)
		c.SetReadDeadline(time.Time{})
		if !r.track(c, true) || err != nil {
			// The client closed, or its head broke off or timed out: closed, as
			// net/http's server does.
			c.Close()
			r.untrack(c)
			return
		}
		req, ok := r.plain(br, n)
		if !ok {
			r.handOver(c, br)
			return
		}
		br.Discard(n)
		if !r.relay(c, br, req) {
			c.Close()
			r.untrack(c)
			return
		}
		if !r.track(c, false) {
			c.Close()
			return
		}
	}
}

// handOver gives c, and what was read of it, to the net/http server.
func (r *Relay) handOver(c net.Conn, br *bufio.Reader) {
	r.untrack(c)
	select {
	case r.handed.conns <- &handedConn{Conn: c, br: br}:
	case <-r.handed.done:
		c.Close()
	}
}

// peekHead waits until br holds a whole head and returns its length; it returns 0 and no
// error when the head is longer than br's buffer.
func peekHead(br *bufio.Reader) (int, error) {
	for {
		b, _ := br.Peek(br.Buffered())
		if n := headLen(b); n >= 0 {
			return n, nil
		}
		if br.Buffered() == br.Size() {
			return 0, nil
		}
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			return 0, err
		}
	}
}

// rawRequest is a recorded request's head, as the relay forwards it.
type rawRequest struct {
	method  string   // GET or POST
	api     wire.API // "": passed on unrecorded
	path    string
	target  string // the request-target: path and query
	h       http.Header
	framing int
	length  int64
	expect  bool // Expect: 100-continue
}

// plain parses the head of n bytes in br when it is a request the relay serves itself: a
// GET or a POST in origin form, HTTP/1.1, no upgrade, a body framed by one valid
// Content-Length within MaxBody or chunked, no expectation but 100-continue. Anything
// else is net/http's, which answers the malformed ones as it always has.
func (r *Relay) plain(br *bufio.Reader, n int) (rawRequest, bool) {
	if n == 0 {
		return rawRequest{}, false
	}
	head, _ := br.Peek(n)
	first, h, err := parseHeadLines(head)
	if err != nil {
		return rawRequest{}, false
	}
	method, rest, ok1 := strings.Cut(first, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || (method != http.MethodPost && method != http.MethodGet) || proto != "HTTP/1.1" || !strings.HasPrefix(target, "/") {
		return rawRequest{}, false
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return rawRequest{}, false
	}
	req := rawRequest{method: method, api: recordedAPI(method, u.Path), path: u.Path, target: target, h: h}
	if len(h["Host"]) != 1 || h.Get("Upgrade") != "" {
		return rawRequest{}, false
	}
	if ex := h.Values("Expect"); len(ex) > 0 {
		if len(ex) != 1 || !strings.EqualFold(ex[0], "100-continue") {
			return rawRequest{}, false
		}
		req.expect = true
	}
	req.framing, req.length, err = bodyFraming(h)
	if err != nil || (req.framing == frameLength && req.length > r.maxBody) {
		return rawRequest{}, false
	}
	return req, true
}

// relay passes one recorded request and its response; false: the client's connection
// cannot carry another request (closed, broken, or asked to close).
func (r *Relay) relay(c net.Conn, br *bufio.Reader, req rawRequest) bool {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	var ex *exchange
	if req.api == "" {
		ex = r.rec.pass(ctx)
	} else {
		hr := (&http.Request{Method: http.MethodPost, URL: &url.URL{Path: req.path}, Header: req.h}).WithContext(ctx)
		ex = r.rec.begin(req.api, hr)
		defer r.rec.finish(ex)
	}
	if req.expect && br.Buffered() == 0 {
		// The client waits for a go-ahead before its body. The relay reads the body
		// whole before it forwards anything, so it gives the go-ahead itself, as
		// net/http's server does when a handler reads the body, and forwards the
		// request without the expectation (the upstream has the body at once).
		if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			ex.skip, ex.clientGone = "the client's request body broke off", true
			return false
		}
	}
	trailers := hasToken(req.h["Te"], "trailers")
	closeClient := dropHopByHop(req.h)
	if trailers {
		// TE is the connection's own, but a client's "trailers" says it takes a
		// response's trailers, which the relay passes: net/http's ReverseProxy forwards
		// it the same way (gRPC servers answer without trailers otherwise).
		req.h["Te"] = []string{"trailers"}
	}
	req.h.Del("Expect")
	out := r.requestHead(req)
	bodyAt := len(out)
	var f bodyFramer
	out, whole, err := readRequestBody(br, req, r.maxBody, out, &f)
	if err != nil {
		ex.skip, ex.clientGone = "the client's request body broke off", true
		return false
	}
	switch {
	case ex.pass: // passed on unrecorded: nothing of it is kept
	case whole:
		ex.body = out[bodyAt:]
		if req.framing == frameChunked {
			ex.body = decodedChunked(out[bodyAt:])
		}
	default:
		ex.skip = "request body over --max-body"
	}
	uc, err := r.send(ctx, ex, out, br, &f, whole)
	if err != nil {
		ex.upstreamErr = err
		return false // the client's connection closes without an answer, as it would direct
	}
	// A client that goes away, or a relay closed, while the upstream is silent (a long
	// prefill, a stall) cuts the upstream connection, so the upstream stops its work, as
	// net/http's transport does when a request's context ends.
	stopCut := context.AfterFunc(ctx, func() { uc.c.Close() })
	w := watchClient(br, cancel)
	keepUp, keepClient := r.response(c, uc, ex, closeClient)
	w.stop(c)
	if stopCut() && keepUp {
		r.pool.put(uc)
	} else {
		uc.c.Close()
	}
	return keepClient && !w.gone.Load()
}

// clientWatch reads the client's connection while its response passes, to know when the
// client went away (net/http's server does the same, its "background read"). The relay's
// goroutine does not read the client's connection meanwhile; the watch ends before it does.
type clientWatch struct {
	done     chan struct{}
	stopping atomic.Bool
	gone     atomic.Bool
}

// watchClient starts a watch that calls gone when the client's connection ends or fails.
func watchClient(br *bufio.Reader, gone func()) *clientWatch {
	w := &clientWatch{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		if _, err := br.Peek(1); err != nil && !w.stopping.Load() {
			w.gone.Store(true)
			gone()
		}
		// Bytes (the client's next request, sent early) end the watch: they wait in br.
	}()
	return w
}

// stop ends the watch, with a read deadline in the past that the watching read returns
// at once for; br keeps any byte it read.
func (w *clientWatch) stop(c net.Conn) {
	w.stopping.Store(true)
	c.SetReadDeadline(time.Unix(1, 0))
	<-w.done
	c.SetReadDeadline(time.Time{})
}

// requestHead writes the head forwarded upstream: the request line, the upstream's Host,
// the client's fields but the hop-by-hop ones, its framing as it came.
func (r *Relay) requestHead(req rawRequest) []byte {
	out := make([]byte, 0, 1024+req.length)
	out = append(out, req.method...)
	out = append(out, ' ')
	if p := strings.TrimSuffix(r.up.EscapedPath(), "/"); p != "" {
		out = append(out, p...) // the upstream's path joined before the request's, as ReverseProxy's SetURL does
	}
	out = append(out, req.target...)
	out = append(out, " HTTP/1.1\r\nHost: "...)
	out = append(out, r.up.Host...)
	out = append(out, "\r\n"...)
	req.h.Del("Host")
	b := bytes.NewBuffer(out) // the fields written straight after the request line
	req.h.Write(b)
	return append(b.Bytes(), "\r\n"...)
}

// readRequestBody appends the body as it came, its framing included, to out; whole is
// false when it is over max (then out holds the part read, the rest still in br).
func readRequestBody(br *bufio.Reader, req rawRequest, max int64, out []byte, f *bodyFramer) ([]byte, bool, error) {
	switch req.framing {
	case frameNone:
		return out, true, nil
	case frameLength:
		n := len(out)
		out = append(out, make([]byte, req.length)...)
		_, err := io.ReadFull(br, out[n:])
		return out, err == nil, err
	}
	f.reset(frameChunked, 0)
	var data int64
	for !f.done() {
		b, err := buffered(br)
		if len(b) == 0 {
			return out, false, errOr(err)
		}
		n, ferr := f.feed(b, func(d []byte) { data += int64(len(d)) })
		out = append(out, b[:n]...)
		br.Discard(n)
		if ferr != nil {
			return out, false, ferr
		}
		if data > max {
			return out, false, nil
		}
	}
	return out, true, nil
}

func errOr(err error) error {
	if err == nil {
		return io.ErrUnexpectedEOF
	}
	return err
}

// decodedChunked is a whole chunked body's data.
func decodedChunked(raw []byte) []byte {
	var f bodyFramer
	f.reset(frameChunked, 0)
	data := make([]byte, 0, len(raw))
	f.feed(raw, func(d []byte) { data = append(data, d...) })
	return data
}

// send writes the request to the upstream, on a pooled connection when one is open. A
// pooled connection whose write fails before a byte went out was closed by the upstream
// while idle: the request goes again on a new one (the upstream saw nothing of it). The
// rest of a body over MaxBody follows from br.
func (r *Relay) send(ctx context.Context, ex *exchange, out []byte, br *bufio.Reader, f *bodyFramer, whole bool) (*upConn, error) {
	for {
		uc, err := r.pool.get(ctx)
		if err != nil {
			return nil, err
		}
		ex.sent = ex.rec.now()
		n, err := uc.c.Write(out)
		if err != nil {
			uc.c.Close()
			if n == 0 && uc.reused {
				continue
			}
			return nil, err
		}
		if !whole {
			if err := streamRest(uc.c, br, f); err != nil {
				uc.c.Close()
				return nil, err
			}
		}
		return uc, nil
	}
}

// streamRest passes the rest of a chunked body over MaxBody as it comes, f framing it
// from where readRequestBody stopped.
func streamRest(w io.Writer, br *bufio.Reader, f *bodyFramer) error {
	for !f.done() {
		b, err := buffered(br)
		if len(b) == 0 {
			return errOr(err)
		}
		n, ferr := f.feed(b, func([]byte) {})
		if _, err := w.Write(b[:n]); err != nil {
			return err
		}
		br.Discard(n)
		if ferr != nil {
			return ferr
		}
	}
	return nil
}
