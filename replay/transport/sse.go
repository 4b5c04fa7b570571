package transport

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/llmreplay/llmreplay/replay/results"
)

// DefaultMaxLine caps one SSE line. A streamed chunk is a few hundred bytes (a few KB with
// logprobs); a line that grows past the cap is a broken or hostile server, and the cap
// keeps it from eating the replayer's memory.
const DefaultMaxLine = 4 << 20

// ErrLineTooLong is returned by the SSE reader when a line exceeds its cap.
var ErrLineTooLong = errors.New("SSE line too long")

// SSEReader reads a text/event-stream (WHATWG HTML, "Server-sent events") in the shape of
// bufio.Scanner: Next advances to the next event that has data, Data returns it, Stamp
// the clock reading taken when the bytes that completed the event were read, and Err the
// first error once Next returns false (nil at a clean end of stream).
//
// Each Read of the body is stamped at once, before any byte of it is parsed, so the
// parse cost never shows in the timings. Lines end in LF, CRLF or CR; "data:" takes one
// optional space; several data lines of one event are joined with LF; comments (":")
// and unknown fields are skipped; the event field is kept (some servers name errors so).
type SSEReader struct {
	r       io.Reader
	clock   func() int64
	buf     []byte
	lo, hi  int   // unread bytes are buf[lo:hi]
	scan    int   // buf[lo:scan] holds no line end
	stamp   int64 // clock() at the read that delivered buf[lo:hi]'s newest bytes
	maxLine int
	skipLF  bool // a CR ended the previous line: a following LF belongs to it

	data     []byte // data of the event being built
	hasData  bool
	event    []byte // event field of the event being built
	outData  []byte
	outEvent []byte
	outStamp int64
	err      error
	rerr     error // the read error that ended the stream, reported once its bytes are parsed
	eof      bool
}

// NewSSEReader returns a reader of r's events, stamped by clock, with a buffer of bufSize
// bytes (0: 64 KiB) that grows up to maxLine for a long line (0: DefaultMaxLine).
func NewSSEReader(r io.Reader, clock func() int64, bufSize, maxLine int) *SSEReader {
	if bufSize <= 0 {
		bufSize = 64 << 10
	}
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	if bufSize > maxLine+1 {
		bufSize = maxLine + 1
	}
	return &SSEReader{r: r, clock: clock, buf: make([]byte, bufSize), maxLine: maxLine}
}

// Reset makes s read a new stream, keeping its buffers.
func (s *SSEReader) Reset(r io.Reader) {
	s.r = r
	s.lo, s.hi, s.scan, s.stamp = 0, 0, 0, 0
	s.skipLF = false
	s.data, s.hasData, s.event = s.data[:0], false, s.event[:0]
	s.outData, s.outEvent = s.outData[:0], s.outEvent[:0]
	s.err, s.rerr, s.eof = nil, nil, false
}

// Data returns the current event's data; valid until the next call to Next.
func (s *SSEReader) Data() []byte { return s.outData }

// Event returns the current event's event field ("" for the default "message").
func (s *SSEReader) Event() []byte { return s.outEvent }

// Stamp returns the clock reading of the read that completed the current event.
func (s *SSEReader) Stamp() int64 { return s.outStamp }

// Err returns the error that stopped Next; nil at a clean end of stream.
func (s *SSEReader) Err() error { return s.err }

// Next advances to the next event carrying data, reading as needed. An event cut by the
// end of the stream is discarded, as the specification says.
func (s *SSEReader) Next() bool {
	for {
		if s.nextBuffered() {
			return true
		}
		if s.err != nil {
			return false
		}
		if s.eof {
			// A final line without a terminator cannot complete an event: drop it.
			s.err = s.rerr
			return false
		}
		if !s.fill() {
			return false
		}
	}
}

// nextBuffered advances to the next event carrying data using only the bytes already in
// the buffer. It returns false when it needs more bytes, or with Err set on a line over
// the cap. The push side (write) and the pull side (Next) share it.
func (s *SSEReader) nextBuffered() bool {
	for {
		line, ok := s.line()
		if !ok {
			return false
		}
		if len(line) == 0 { // blank line: dispatch
			if s.hasData {
				s.outData, s.data = s.data, s.outData // a swap, not a copy: data is rebuilt from empty
				s.outEvent = append(s.outEvent[:0], s.event...)
				s.outStamp = s.stamp
				s.data, s.hasData, s.event = s.data[:0], false, s.event[:0]
				return true
			}
			s.event = s.event[:0]
			continue
		}
		if line[0] == ':' {
			continue
		}
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(name) {
		case "data":
			if s.hasData {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			s.hasData = true
		case "event":
			s.event = append(s.event[:0], value...)
		}
	}
}

// line returns the next complete line in the buffer without its terminator, valid until
// the next call; false when there is none yet (or, with Err set, when the line under way
// is over the cap).
func (s *SSEReader) line() ([]byte, bool) {
	if s.skipLF && s.lo < s.hi {
		if s.buf[s.lo] == '\n' {
			s.lo++
			s.scan = max(s.scan, s.lo)
		}
		s.skipLF = false
	}
	if i := indexEOL(s.buf[s.scan:s.hi]); i >= 0 {
		end := s.scan + i
		line := s.buf[s.lo:end]
		if s.buf[end] == '\r' {
			s.skipLF = true
		}
		s.lo = end + 1
		s.scan = s.lo
		return line, true
	}
	s.scan = s.hi // no line end in what we have: never scan it again
	if s.hi-s.lo > s.maxLine {
		s.err = fmt.Errorf("%w: over %d bytes without a line end", ErrLineTooLong, s.maxLine)
	}
	return nil, false
}

// direct takes, without copying it, a whole event at the start of b when the reader holds
// nothing (no bytes, no event under way): the shape every engine streams, a "data:" line
// (one optional space after the colon, no CR inside) ended by LF or CRLF, then a blank
// line ended the same way. It returns the event's data, a slice of b valid as long as b
// is, and the bytes the event spans. n == 0 means b does not start with such an event (or
// the reader holds bytes): the caller then pushes b through write and nextBuffered, which
// read any shape. What direct takes, nextBuffered would have given the same: the same
// data, dated by the same write, and a line over the cap goes to write to fail there.
// The raw client's reactor reads nearly every event through it: three copies of each
// chunk into per-stream buffers (buf, data, outData) cost more in cache misses than the
// parse (a perf profile of replaybench fidelity).
func (s *SSEReader) direct(b []byte) (data []byte, n int) {
	if s.lo != s.hi || s.hasData || len(s.event) > 0 || s.skipLF || s.err != nil {
		return nil, 0
	}
	if len(b) < 7 || string(b[:5]) != "data:" {
		return nil, 0
	}
	i := bytes.IndexByte(b, '\n')
	if i < 0 || i > s.maxLine {
		return nil, 0
	}
	line := b[:i]
	crlf := line[len(line)-1] == '\r'
	if crlf {
		line = line[:len(line)-1]
	}
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, 0
	}
	switch rest := b[i+1:]; {
	case !crlf && len(rest) >= 1 && rest[0] == '\n':
		n = i + 2
	case crlf && len(rest) >= 2 && rest[0] == '\r' && rest[1] == '\n':
		n = i + 3
	default:
		return nil, 0
	}
	data = line[5:]
	if len(data) > 0 && data[0] == ' ' {
		data = data[1:]
	}
	return data, n
}

// write is the push side: it copies as much of p as the buffer takes (moving unread
// bytes down and growing it up to the line cap), stamps it, and returns how much it took.
// The caller then takes events with nextBuffered until it returns false, and writes the
// rest. Zero means the buffer is full of one unfinished line: nextBuffered reports the cap.
func (s *SSEReader) write(p []byte, stamp int64) int {
	if !s.makeRoom() {
		return 0
	}
	n := copy(s.buf[s.hi:], p)
	s.hi += n
	if n > 0 {
		s.stamp = stamp
	}
	return n
}

// makeRoom moves the unread bytes to the front and, if the buffer is still full, grows
// it (at most to the line cap + 1). It returns false if no room can be made.
func (s *SSEReader) makeRoom() bool {
	if s.lo > 0 {
		n := copy(s.buf, s.buf[s.lo:s.hi])
		s.scan -= s.lo
		s.lo, s.hi = 0, n
	}
	if s.hi == len(s.buf) {
		size := min(2*len(s.buf), s.maxLine+1)
		if size <= len(s.buf) {
			return false
		}
		nb := make([]byte, size)
		copy(nb, s.buf[:s.hi])
		s.buf = nb
	}
	return true
}

// indexEOL returns the index of the first LF or CR in b, or -1 (two vectorised scans).
func indexEOL(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		return j
	}
	return i
}

// fill reads more bytes, moving or growing the buffer as needed, and stamps the read.
func (s *SSEReader) fill() bool {
	if !s.makeRoom() { // cannot happen: line() checks the cap first
		s.err = fmt.Errorf("%w: over %d bytes without a line end", ErrLineTooLong, s.maxLine)
		return false
	}
	for range 100 {
		n, err := s.r.Read(s.buf[s.hi:])
		if n > 0 {
			s.stamp = s.clock()
			s.hi += n
		}
		if err != nil {
			// Bytes read with the error are parsed first; the error ends the stream after.
			s.eof = true
			if err != io.EOF {
				s.rerr = err
			}
			return true
		}
		if n > 0 {
			return true
		}
	}
	s.err = io.ErrNoProgress
	return false
}

// pushSSE is the push side's loop: it takes body bytes b, read at stamp, through sse into
// st's events until b is used up or the stream is over ([DONE], or a failure recorded in
// st). The raw client's response parser and the recording proxy's Tap share it, so that
// one stream means the same to both; a line over the cap fails the stream as the pull
// side's Next does.
func pushSSE(sse *SSEReader, st *streamState, b []byte, stamp int64) {
	for len(b) > 0 && !st.over() {
		if data, n := sse.direct(b); n > 0 {
			b = b[n:]
			st.event(stamp, nil, data) // an end or failure shows in st.over
			continue
		}
		n := sse.write(b, stamp)
		b = b[n:]
		for sse.nextBuffered() {
			if st.event(sse.Stamp(), sse.Event(), sse.Data()) {
				break
			}
		}
		if err := sse.Err(); err != nil && !st.over() {
			st.fail(results.StatusStreamError, err.Error())
		}
		if n == 0 && !st.over() {
			st.fail(results.StatusStreamError, io.ErrNoProgress.Error())
		}
	}
}
