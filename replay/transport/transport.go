package transport

import (
	"context"
	"syscall"

	"github.com/llmreplay/llmreplay/replay/results"
)

// Transport sends a prepared request and reads its response into the request's record:
// net/http (httpTransport) or, on Linux, the raw HTTP/1.1 client (rawTransport,
// rawhttp.go). The dispatcher and the executors hand requests to it and never look
// inside it: as with net/http's RoundTripper, what is sent and when is theirs, how it is
// sent is the Transport's.
type Transport interface {
	// Prepare builds, in the preparer, what the transport sends besides req.Body (the raw
	// client's request head), so that the dispatcher only writes. With placeholder set
	// the run id is not known yet: the dispatcher writes it in later (replay's dispatcher.withRunID).
	Prepare(req *Request, placeholder bool)
	// RoundTrip sends req (or the rest of it, when st is a send the dispatcher began:
	// SplitTransport) and reads the response into res; it returns when res is complete.
	// ctx ends the request early (a hard stop: res is canceled); the per-request
	// timeout is the transport's. A failure is in res, never an error, and res's error
	// text holds none of the client's secrets (a server may echo them).
	RoundTrip(ctx context.Context, clk Clock, req *Request, res *results.Result, sse *SSEReader, onTokens func(int), st SendStart)
}

// SplitTransport is a transport whose send can be split from the rest of the exchange,
// so that the write leaves at the due time from the dispatcher itself, with no goroutine
// hand-off or connection set-up before it, and so that a response can be read and ended
// with no goroutine per request (the raw client: its reactor). The dispatcher uses it
// when the transport is one; net/http is not (it writes on its connection's goroutine).
type SplitTransport interface {
	Transport
	// Begin writes what a socket takes of req's message at once, from the dispatcher,
	// never waiting: on an idle pooled connection, never a dial (the dispatcher must not
	// wait). nil when nothing began (no idle connection): roundTrip then does it all.
	Begin(clk Clock, req *Request) SendStart
	// BeginAt is begin at req's due time: w writes the message as its thread wakes. The
	// caller is at most sendWindow before the due time; nil, at once, when no connection
	// is idle.
	BeginAt(w DueWriter, req *Request) SendStart
	// RoundTripAsync is roundTrip for a request whose whole message st wrote
	// (st.whole()): it returns at once, and done is called, on the transport's thread,
	// once res is complete and the transport is done with req and sse.
	RoundTripAsync(ctx context.Context, clk Clock, req *Request, res *results.Result, sse *SSEReader, onTokens func(int),
		st SendStart, done func())
}

// SendStart is a send a splitTransport began from the dispatcher: the transport's own
// state of it (a connection, what went), opaque to everyone else but for these two.
type SendStart interface {
	// SentAt is the run clock just before the first write: the request's send time when
	// that write took the whole message.
	SentAt() int64
	// Whole reports that the whole message went out: only the response is left.
	Whole() bool
}

// DueWriter writes a request's message to a socket at a due time, as the dispatcher's
// thread wakes, before anything else: the open loop's thread waiter on Linux
// (replay's waiter_linux.go). The waiter is the dispatcher's, so it lives with it; the
// transport only hands it the socket and the bytes (SplitTransport.BeginAt). sentNS is
// the run clock just before the write, never before dueNS.
type DueWriter interface {
	WriteAt(dueNS int64, fd int, head []byte, r *Request) (sentNS int64, n int, err syscall.Errno)
}

// Transport returns the client's Transport: the raw client when it serves the endpoint,
// else net/http.
func (c *Client) Transport() Transport {
	if c.raw != nil {
		return c.raw
	}
	return httpTransport{c}
}

// httpTransport is net/http as a transport (Client.doHTTP). It builds nothing ahead and
// begins no send early: its connection's goroutine writes.
type httpTransport struct{ c *Client }

func (t httpTransport) Prepare(*Request, bool) {}

func (t httpTransport) RoundTrip(ctx context.Context, clk Clock, req *Request, res *results.Result, sse *SSEReader, onTokens func(int), _ SendStart) {
	t.c.doHTTP(ctx, clk, req, res, sse, onTokens)
	t.c.Scrub(res)
}
