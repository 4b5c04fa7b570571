package record

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	body         []byte // nil when not recorded
	skip         string // why the request is not recorded; "" when it is
	res          results.Result
	tap          *transport.Tap
	responseHead []byte // the Responses API's first bytes, for its response id
	upstreamErr  error
	clientGone   bool
	endSeq       int64 // the order the recorder took it in

	req  Request // parsed in the recorder's pool
	perr error
	// respKey is the Responses API's response id, salted and hashed (0: none).
	respKey   uint64
	headerKey uint64
}

// headKeep is how many leading bytes of a Responses API answer are kept to read its id
// (response.created comes first in a stream; a whole answer's id is its first field in
// OpenAI's and vLLM's shapes).
const headKeep = 4 << 10

// respHead takes the upstream's response head.
func (ex *exchange) respHead(resp *http.Response, stamp int64) {
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	ex.tap = ex.rec.client(ex.api).NewTap(&ex.res, transport.TapOptions{Stream: stream, Private: true})
	ex.tap.Head(resp.StatusCode, resp.Header, stamp)
}

// bodyPiece takes a piece of the response body as it passed.
func (ex *exchange) bodyPiece(b []byte, stamp int64) {
	if ex.api == "responses" && len(ex.responseHead) < headKeep {
		ex.responseHead = append(ex.responseHead, b[:min(len(b), headKeep-len(ex.responseHead))]...)
	}
	ex.tap.Body(b, stamp)
}

// end takes the body's end: err nil at a clean end.
func (ex *exchange) end(err error, stamp int64) {
	if err != nil && ex.ctx.Err() != nil {
		// The upstream's read failed because the client's request was canceled: the
		// client went away, the upstream did nothing wrong.
		err, ex.clientGone = errClientGone, true
	}
	ex.tap.End(err, stamp)
}

// settle completes the results row of an exchange whose response never came, or whose
// client went away, once the handler returned.
func (ex *exchange) settle() {
	r := &ex.res
	switch {
	case ex.tap == nil && ex.clientGone:
		r.Status, r.Error = results.StatusCanceled, "the client went away before the upstream answered"
	case ex.tap == nil && ex.ctx.Err() != nil:
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

// responseID reads a Responses API answer's id from its first bytes: the first event's
// response.id in a stream (response.created), or the body's top-level id. "" when the
// bytes hold none.
func responseID(head []byte) string {
	if len(head) == 0 {
		return ""
	}
	if i := bytes.Index(head, []byte("data:")); i >= 0 {
		head = head[i+len("data:"):]
		if j := bytes.IndexByte(head, '\n'); j >= 0 {
			head = head[:j]
		}
	}
	var v struct {
		ID       string `json:"id"`
		Response *struct {
			ID string `json:"id"`
		} `json:"response"`
	}
	if json.Unmarshal(bytes.TrimSpace(head), &v) != nil {
		return idField(head)
	}
	if v.Response != nil {
		return v.Response.ID
	}
	return v.ID
}

// idField reads the first "id" string of a JSON object cut short (a whole answer longer
// than what was kept), token by token.
func idField(b []byte) string {
	d := json.NewDecoder(bytes.NewReader(b))
	depth := 0
	for {
		t, err := d.Token()
		if err != nil {
			return ""
		}
		switch t := t.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				depth++
			} else {
				depth--
			}
		case string:
			if depth == 1 && t == "id" && d.More() {
				if v, err := d.Token(); err == nil {
					s, _ := v.(string)
					return s
				}
				return ""
			}
		}
	}
}
