package record

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
)

// The raw relay's HTTP/1.1 framing (RFC 9112): where a message's head ends, what its
// body's framing is, and where the body ends, found in the bytes as they pass without
// changing them. The response side of replay/transport's raw client (rawresp_linux.go)
// does the same while consuming the bytes into its stream state on its reactor's thread;
// this one hands the bytes on unchanged and the body's data to the tap, on either side
// (a chunked request body is framed the same way as a chunked response's).

// Body framings (RFC 9112, 6.3).
const (
	frameNone    = iota // no body
	frameLength         // Content-Length bytes
	frameChunked        // chunked transfer coding, through its trailer section
	frameEOF            // until the connection's end (a response only)
)

// Body framer states.
const (
	fsDone = iota
	fsLength
	fsEOF
	fsChunkSize
	fsChunkData
	fsChunkEnd
	fsTrailer
)

// Limits of what the framer keeps of a line: a chunk-size line (with its extensions) and
// the trailer section. net/http allows 4 KiB for the one and counts trailers in its head
// limit; past these the message is refused as malformed.
const (
	maxChunkLine    = 4 << 10
	maxTrailerBytes = 64 << 10
)

var errFraming = errors.New("malformed chunked body")

// bodyFramer finds the end of one message body in the bytes fed to it.
type bodyFramer struct {
	state     int
	remaining int64  // of a Content-Length body, of a chunk's data, or of the CRLF after it
	line      []byte // a chunk-size or trailer line so far
	trailer   int    // trailer bytes so far
}

// reset starts a body of the given framing (length: its Content-Length).
func (f *bodyFramer) reset(framing int, length int64) {
	f.line, f.trailer, f.remaining = f.line[:0], 0, length
	switch {
	case framing == frameLength && length > 0:
		f.state = fsLength
	case framing == frameChunked:
		f.state = fsChunkSize
	case framing == frameEOF:
		f.state = fsEOF
	default:
		f.state = fsDone
	}
}

func (f *bodyFramer) done() bool { return f.state == fsDone }

// feed takes the next bytes of the connection and returns how many of them belong to the
// body (the rest belong to what follows it); data is called with each run of the body's
// data, as subslices of p (a chunked body's data without its framing).
func (f *bodyFramer) feed(p []byte, data func([]byte)) (int, error) {
	i := 0
	for i < len(p) && f.state != fsDone {
		switch f.state {
		case fsEOF:
			data(p[i:])
			i = len(p)
		case fsLength, fsChunkData:
			n := int64(len(p) - i)
			if n > f.remaining {
				n = f.remaining
			}
			data(p[i : i+int(n)])
			i += int(n)
			f.remaining -= n
			if f.remaining == 0 {
				if f.state == fsLength {
					f.state = fsDone
				} else {
					f.state, f.remaining = fsChunkEnd, 2
				}
			}
		case fsChunkEnd:
			want := "\r\n"[2-f.remaining]
			if p[i] != want {
				return i, errFraming
			}
			i++
			f.remaining--
			if f.remaining == 0 {
				f.state = fsChunkSize
			}
		case fsChunkSize, fsTrailer:
			j := bytes.IndexByte(p[i:], '\n')
			if j < 0 {
				f.line = append(f.line, p[i:]...)
				i = len(p)
				if err := f.lineLimit(); err != nil {
					return i, err
				}
				continue
			}
			f.line = append(f.line, p[i:i+j]...)
			i += j + 1
			if err := f.lineLimit(); err != nil {
				return i, err
			}
			if err := f.endLine(); err != nil {
				return i, err
			}
		}
	}
	return i, nil
}

func (f *bodyFramer) lineLimit() error {
	if f.state == fsChunkSize && len(f.line) > maxChunkLine {
		return fmt.Errorf("%w: chunk-size line over %d bytes", errFraming, maxChunkLine)
	}
	if f.state == fsTrailer && f.trailer+len(f.line) > maxTrailerBytes {
		return fmt.Errorf("%w: trailer section over %d bytes", errFraming, maxTrailerBytes)
	}
	return nil
}

// endLine takes a whole chunk-size or trailer line (its LF dropped).
func (f *bodyFramer) endLine() error {
	line := bytes.TrimSuffix(f.line, []byte{'\r'})
	f.line = f.line[:0]
	if f.state == fsTrailer {
		f.trailer += len(line) + 2
		if len(line) == 0 {
			f.state = fsDone
		}
		return nil
	}
	size, err := chunkSize(line)
	if err != nil {
		return err
	}
	if size == 0 {
		f.state = fsTrailer // the last chunk: the trailer section follows
	} else {
		f.state, f.remaining = fsChunkData, size
	}
	return nil
}

// chunkSize parses a chunk-size line: hex digits, then optional whitespace and chunk
// extensions (RFC 9112, 7.1.1), which are ignored as the RFC allows.
func chunkSize(line []byte) (int64, error) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 { // 15 hex digits: below 2^60, no overflow
		return 0, fmt.Errorf("%w: chunk size %q", errFraming, line)
	}
	var n int64
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, fmt.Errorf("%w: chunk size %q", errFraming, line)
		}
		n = n<<4 | int64(d)
	}
	return n, nil
}

// headLen returns the length of the head at the start of b through its blank line (CRLF
// CRLF, or bare LFs, which RFC 9112, 2.2 lets a recipient accept), or -1 when b does not
// hold a whole head yet.
func headLen(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		i += j + 1
		switch {
		case i < len(b) && b[i] == '\n':
			return i + 1
		case i+1 < len(b) && b[i] == '\r' && b[i+1] == '\n':
			return i + 2
		}
	}
}

// parseHeadLines splits a head into its first line and its header fields, with the
// standard library's field parser (folded lines, field-name validity, no space before the
// colon: RFC 9112, 5).
func parseHeadLines(head []byte) (string, http.Header, error) {
	i := bytes.IndexByte(head, '\n')
	if i < 0 {
		return "", nil, errors.New("no start line")
	}
	first := strings.TrimSuffix(string(head[:i]), "\r")
	br := headReaders.Get().(*bufio.Reader)
	br.Reset(bytes.NewReader(head[i+1:]))
	h, err := textproto.NewReader(br).ReadMIMEHeader()
	br.Reset(nil)
	headReaders.Put(br)
	if err != nil {
		return "", nil, err
	}
	return first, http.Header(h), nil
}

// headReaders lend parseHeadLines the reader net/textproto reads a head through: one
// made for each head would be 4 KiB of garbage for each request and each response.
var headReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}

// hopByHop are the connection's own header fields, never forwarded (RFC 9110, 7.6.1),
// besides those the Connection field names. Transfer-Encoding is one too, but the relay
// passes bodies with their framing unchanged, so it forwards it with them.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Upgrade"}

// dropHopByHop removes the hop-by-hop fields from h (which it changes) and reports
// whether the Connection field asked to close the connection.
func dropHopByHop(h http.Header) (closeConn bool) {
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			name = textproto.TrimString(name)
			if strings.EqualFold(name, "close") {
				closeConn = true
			}
			if name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopByHop {
		delete(h, k)
	}
	return closeConn
}

// hasToken reports whether a comma-separated field's values hold token (any case).
func hasToken(values []string, token string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if t, _, _ := strings.Cut(t, ";"); strings.EqualFold(textproto.TrimString(t), token) {
				return true
			}
		}
	}
	return false
}

// bodyFraming is a message's body framing from its Transfer-Encoding and Content-Length
// (RFC 9112, 6.3), or an error for a framing the relay does not pass (a transfer coding
// other than chunked alone, several or invalid lengths, or both fields).
func bodyFraming(h http.Header) (int, int64, error) {
	te, cl := h["Transfer-Encoding"], h["Content-Length"]
	if len(te) > 0 {
		if len(te) != 1 || !strings.EqualFold(textproto.TrimString(te[0]), "chunked") {
			return 0, 0, fmt.Errorf("Transfer-Encoding %q", te)
		}
		if len(cl) > 0 {
			return 0, 0, errors.New("both Transfer-Encoding and Content-Length")
		}
		return frameChunked, 0, nil
	}
	if len(cl) == 0 {
		return frameNone, 0, nil
	}
	if len(cl) != 1 {
		return 0, 0, errors.New("several Content-Length fields")
	}
	v := textproto.TrimString(cl[0])
	n, err := strconv.ParseInt(v, 10, 63)
	if err != nil || n < 0 || v[0] == '+' {
		return 0, 0, fmt.Errorf("Content-Length %q", cl[0])
	}
	return frameLength, n, nil
}
