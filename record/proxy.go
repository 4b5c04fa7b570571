package record

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/llmreplay/llmreplay/wire"
)

// Proxy is the recording proxy's handler: every request goes to the one upstream and its
// response comes back unchanged, through net/http/httputil.ReverseProxy (hop-by-hop
// headers handled as RFC 9110 says, streams flushed as they come, 1xx responses and
// protocol upgrades passed on). It never adds X-Forwarded-* headers, never compresses or
// decompresses, and rewrites every request's URL to the upstream's, so it forwards nowhere
// else, whatever the request's URL or Host says.
type Proxy struct {
	rp      *httputil.ReverseProxy
	rec     *Recorder
	maxBody int64
}

// ProxyOptions configure a Proxy.
type ProxyOptions struct {
	// MaxBody caps the request body the recorder reads to record it; a larger body is
	// passed on whole and the request is not recorded (counted as such). 0: 64 MiB.
	MaxBody int64
	// Transport reaches the upstream; nil: NewUpstreamTransport().
	Transport http.RoundTripper
}

// NewUpstreamTransport returns the transport the proxy reaches its upstream with: keep-alive
// connections pooled per host as many as the clients keep open, no compression asked for
// (a request passes with the client's own Accept-Encoding, or none), no timeout of its own
// (the client's patience decides, as it would without the proxy).
func NewUpstreamTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableCompression = true
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = 4096
	t.IdleConnTimeout = 90 * time.Second
	t.Proxy = nil // never through another proxy named by the environment
	return t
}

// NewProxy returns the proxy to upstream, recording into rec.
func NewProxy(upstream *url.URL, rec *Recorder, o ProxyOptions) *Proxy {
	if o.MaxBody <= 0 {
		o.MaxBody = 64 << 20
	}
	if o.Transport == nil {
		o.Transport = NewUpstreamTransport()
	}
	p := &Proxy{rec: rec, maxBody: o.MaxBody}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream) // the Host header becomes the upstream's
		},
		Transport:     tapTransport{base: o.Transport},
		FlushInterval: -1, // every write goes out at once: a stream's chunks keep their times
		BufferPool:    &copyBuffers,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler:  p.upstreamFailed,
	}
	return p
}

// copyBuffers lends ReverseProxy the buffer it copies a response through: without a pool
// it makes one of 32 KiB for every response, 32 MB/s of garbage at 1,000 requests/s.
var copyBuffers bufferPool

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

type ctxKey struct{}

// ServeHTTP passes one request on, recording it when it is one of the APIs recorded.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		// A CONNECT would make this an open proxy to any address; it forwards to its
		// upstream only.
		http.Error(w, "llmreplay record: CONNECT is not forwarded: this proxy forwards only to its upstream", http.StatusMethodNotAllowed)
		return
	}
	api := recordedAPI(r.Method, r.URL.Path)
	if api == "" {
		p.rec.passed()
		p.rp.ServeHTTP(w, r)
		return
	}
	ex := p.rec.begin(api, r)
	defer p.rec.finish(ex) // also when ReverseProxy aborts the handler by panicking
	body, whole, err := readCapped(r.Body, p.maxBody)
	switch {
	case err != nil:
		// The client's body broke off: the request cannot be passed on as sent.
		ex.skip = "the client's request body broke off"
		ex.clientGone = true
		return
	case whole:
		ex.body = body
		r.Body = io.NopCloser(bytes.NewReader(body))
	default:
		ex.skip = "request body over --max-body"
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, ex)))
}

// readCapped reads r up to limit bytes; whole reports that r ended within them.
func readCapped(r io.Reader, limit int64) (b []byte, whole bool, err error) {
	if r == nil || r == http.NoBody {
		return nil, true, nil
	}
	b, err = io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(b)) > limit {
		return b, false, nil
	}
	return b, true, nil
}

// upstreamFailed is ReverseProxy's error handler: the upstream could not be reached or
// broke before its response head. Without the proxy the client would have seen its
// connection fail, so it does: the handler aborts, and net/http closes the connection
// without a response (ReverseProxy's default, a 502 page, would be an answer the upstream
// never gave).
func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	if ex, _ := r.Context().Value(ctxKey{}).(*exchange); ex != nil && ex.upstreamErr == nil {
		ex.upstreamErr = err
	}
	if r.Context().Err() != nil {
		return // the client is gone: nobody to tell
	}
	panic(http.ErrAbortHandler)
}

// recordedAPI is the API a request is recorded as: a POST to one of the parser's API
// paths (APIOf); "" for everything else, which passes unrecorded. The proxy and the
// parser read paths from one table, so a request is recorded exactly when its body can be.
func recordedAPI(method, path string) wire.API {
	if method != http.MethodPost {
		return ""
	}
	return APIOf(path)
}

// tapTransport stamps the exchange's send and its response head, and wraps the response
// body so that every piece the proxy passes on is also handed to the exchange's tap.
type tapTransport struct{ base http.RoundTripper }

func (t tapTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ex, _ := req.Context().Value(ctxKey{}).(*exchange)
	if ex == nil {
		return t.base.RoundTrip(req)
	}
	if ex.body != nil && req.Body != nil {
		// ReverseProxy hands the transport the body wrapped in a reader of its own, which
		// the transport cannot tell is in memory: it then writes the request's head and
		// its body in two writes (two TCP segments; an upstream that woke for the head
		// waits again for the body). The body is in memory, read whole: given as such, the
		// head and the body go in one write. GetBody lets the transport send it again on
		// a fresh connection when a pooled one turns out closed before a byte was written.
		body := ex.body
		req = req.WithContext(req.Context()) // a copy: a RoundTripper must not change its request
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	ex.sent = ex.rec.now()
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		ex.upstreamErr = err
		return nil, err
	}
	ex.respHead(resp, ex.rec.now())
	resp.Body = &tapBody{rc: resp.Body, ex: ex}
	return resp, nil
}

// tapBody hands the body's pieces to the exchange as they pass. A piece is handed over at
// the next Read (or at the end), after ReverseProxy has written and flushed it to the
// client, so that the tap's parsing never delays a chunk on its way; its stamp is taken
// when it was read.
type tapBody struct {
	rc      io.ReadCloser
	ex      *exchange
	pending []byte
	stamp   int64
	ended   bool
}

func (b *tapBody) Read(p []byte) (int, error) {
	b.hand()
	n, err := b.rc.Read(p)
	if n > 0 {
		b.stamp = b.ex.rec.now()
		b.pending = append(b.pending[:0], p[:n]...)
	}
	if err != nil && !b.ended {
		stamp := b.ex.rec.now()
		b.hand()
		b.ended = true
		if errors.Is(err, io.EOF) {
			b.ex.end(nil, stamp)
		} else {
			b.ex.end(err, stamp)
		}
	}
	return n, err
}

func (b *tapBody) hand() {
	if len(b.pending) > 0 {
		b.ex.bodyPiece(b.pending, b.stamp)
		b.pending = b.pending[:0]
	}
}

// Close ends the exchange if the body did not: ReverseProxy closes the body early when it
// cannot write to the client (the client went away).
func (b *tapBody) Close() error {
	if !b.ended {
		b.hand()
		b.ended = true
		b.ex.clientGone = true
		b.ex.end(errClientGone, b.ex.rec.now())
	}
	return b.rc.Close()
}

var errClientGone = errors.New("the client went away mid-response")
