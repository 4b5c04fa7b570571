//go:build linux

package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"
)

// The raw client's response parser: a response's head, its framing (chunked,
// Content-Length, the connection's end) and its body pushed through the SSE reader into
// the stream state, as the reactor (reactor_linux.go) reads the connection.

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
	modeUnary            // a 2xx answer of a unary API: into un (unary.go)
)

// rawResp reads one response from a connection, pushing an event stream's bytes through
// the SSE reader into the stream state as they arrive.
type rawResp struct {
	conn *rawConn
	clk  Clock
	res  *results.Result
	sse  *SSEReader
	st   streamState
	un   *unaryState // a unary API's answer (nil for a stream)

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
					p.err = fmt.Errorf("malformed chunked encoding: chunk size %q", wire.ShortText(l))
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
	case modeUnary:
		return !p.un.write(b, stamp)
	case modeSSE:
		pushSSE(p.sse, &p.st, b, stamp)
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
		return fmt.Errorf("malformed HTTP response %q", wire.ShortText(l))
	}
	code, err := strconv.Atoi(string(status[:3]))
	if err != nil || code < 100 || code > 999 {
		return fmt.Errorf("malformed HTTP status line %q", wire.ShortText(l))
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
			if wire.Encoded(string(value)) {
				p.encoding = string(value)
			}
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("malformed Content-Length %q", wire.ShortText(value))
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
		p.res.Status, p.res.Error = results.StatusStreamError, wire.EncodedStreamText(p.encoding)
	case p.un != nil:
		p.mode = modeUnary
		p.un.status = code
	case !bytes.HasPrefix(contentType, []byte("text/event-stream")):
		p.mode = modeNotStream
		p.res.Status = results.StatusStreamError
		p.res.Error = fmt.Sprintf("response is not an event stream (Content-Type %q)", contentType)
	default:
		p.mode = modeSSE
	}
	return nil
}
