package record

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/wire"
)

// exchange is one recorded request while it passes: what the proxy saw of it, the tap
// that records its response, and, once it ended, what the parser and the linker make of
// it. Its fields are written by the request's handler goroutine until finish hands it to
// the recorder, and by the recorder's goroutines after.
type exchange struct {
	rec     *Recorder
	ctx     context.Context // the client's request: done when the client went away
	id      int64           // the trace's request_id: the order of arrival
	seg     int             // the rotation the request arrived in
	arrival int64           // run clock, when the proxy had the request head
	sent    int64           // run clock, when the proxy handed the request to the upstream
	// finished is the run clock when the response had passed whole (or broke off): the
	// end a continuation's gap is measured from.
	finished int64
	api      wire.API
	path     string
	// sessionValue is the --session-header's value; held only until the parser keys it.
	sessionValue string
	pass         bool   // a request of no recorded API, passed on: only its relay uses the exchange
	body         []byte // nil when not recorded
	skip         string // why the request is not recorded; "" when it is
	res          results.Result
	tap          *transport.Tap
	// gz holds a compressed answer's bytes (one that was not streamed), decompressed for
	// the tap at its end; gzipped is set when the answer is one.
	gz          []byte
	gzipped     string
	lastNS      int64
	upstreamErr error
	clientGone  bool
	endSeq      int64 // the order the recorder took it in

	req  Request // parsed in the recorder's pool
	perr error
	// respKey is the Responses API's response id, salted and hashed (0: none).
	respKey   uint64
	headerKey uint64
}

// respHead takes the upstream's response head.
func (ex *exchange) respHead(resp *http.Response, stamp int64) {
	if ex.pass {
		return
	}
	ct := resp.Header.Get("Content-Type")
	stream := strings.HasPrefix(ct, "text/event-stream")
	h := resp.Header
	if enc := strings.ToLower(h.Get("Content-Encoding")); !stream && resp.StatusCode < 300 && (enc == "gzip" || enc == "deflate") {
		// A client that asked for compression (Go's and Python's HTTP clients do) may get
		// a compressed answer (OpenAI's API gzips them): the client gets it as sent, and
		// the tap a decompressed copy at its end. A compressed stream is not read: its
		// chunks' times would be the compressor's (the tap says so in the record).
		ex.gzipped = enc
		h = h.Clone()
		h.Del("Content-Encoding")
	}
	ex.tap = ex.rec.client(ex.api).NewTap(&ex.res, transport.TapOptions{Stream: stream, Private: true})
	ex.tap.Head(resp.StatusCode, h, stamp)
}

// bodyPiece takes a piece of the response body as it passed.
func (ex *exchange) bodyPiece(b []byte, stamp int64) {
	if ex.pass {
		return
	}
	if ex.gzipped != "" {
		if len(ex.gz)+len(b) <= gzCap {
			ex.gz = append(ex.gz, b...)
		} else {
			ex.gzipped = "too large" // past the cap: not read
		}
		ex.lastNS = stamp
		return
	}
	ex.tap.Body(b, stamp)
}

// gzCap bounds a compressed answer kept for the tap, compressed and decompressed: the
// tap reads at most 16 MiB of an answer anyway.
const gzCap = 16 << 20

// inflate hands the tap a compressed answer's decompressed bytes, stamped when its last
// compressed byte passed.
func (ex *exchange) inflate() error {
	var r io.Reader
	var err error
	switch ex.gzipped {
	case "gzip":
		r, err = gzip.NewReader(bytes.NewReader(ex.gz))
	case "deflate":
		r = flate.NewReader(bytes.NewReader(ex.gz))
	default:
		return errors.New("compressed answer over 16 MiB: not read")
	}
	if err != nil {
		return fmt.Errorf("compressed answer: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(r, gzCap+1))
	if err != nil {
		return fmt.Errorf("compressed answer: %w", err)
	}
	if len(b) > gzCap {
		return errors.New("compressed answer over 16 MiB decompressed: not read")
	}
	ex.gz = nil
	if len(b) > 0 {
		ex.tap.Body(b, ex.lastNS)
	}
	return nil
}

// end takes the body's end: err nil at a clean end.
func (ex *exchange) end(err error, stamp int64) {
	if ex.pass {
		return
	}
	if err != nil && ex.ctx.Err() != nil {
		// The upstream's read failed because the client's request was canceled: the
		// client went away, the upstream did nothing wrong.
		err, ex.clientGone = errClientGone, true
	}
	if ex.gzipped != "" && err == nil {
		err = ex.inflate()
	}
	ex.tap.End(err, stamp)
}

// settle completes the results row of an exchange whose response never came, or whose
// client went away, once the handler returned.
func (ex *exchange) settle() {
	r := &ex.res
	switch {
	case ex.tap == nil && (ex.clientGone || ex.ctx.Err() != nil):
		r.Status, r.Error = results.StatusCanceled, "the client went away before the upstream answered"
	case ex.tap == nil:
		r.Status, r.Error = results.StatusTransportError, "upstream: "+upstreamError(ex.upstreamErr)
	case ex.clientGone && r.Status != results.StatusOK:
		// A client that closes as soon as it has the stream's end (before the body's
		// own end) went away from a complete response: that one stays ok.
		r.Status = results.StatusCanceled
		r.Error = "the client went away mid-response"
	}
}

// upstreamError names what went wrong reaching the upstream without any text a server
// sent: the kind of failure only.
func upstreamError(err error) string {
	var s string
	switch {
	case err == nil:
		return "no response"
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out before a response"
	default:
		s = err.Error()
	}
	for _, k := range []string{"connection refused", "connection reset", "EOF", "broken pipe", "no such host", "i/o timeout"} {
		if strings.Contains(s, k) {
			return k + " before a response"
		}
	}
	return "failed before a response"
}
