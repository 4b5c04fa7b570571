package record

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// response relays the upstream's response to the client: its 1xx interim heads, its
// final head without the hop-by-hop fields, and its body byte for byte, framing included,
// as it comes. The final head leaves with the body bytes that came with it, in one write;
// each piece is written to the client before the tap has it. keepUp and keepClient say
// whether either connection can carry another exchange.
func (r *Relay) response(c net.Conn, uc *upConn, ex *exchange, closeClient bool) (keepUp, keepClient bool) {
	status, statusLine, h, ok := r.finalHead(c, uc, ex)
	if !ok {
		return false, false
	}
	ex.respHead(&http.Response{StatusCode: status, Header: h}, ex.rec.now())
	upClose := dropHopByHop(h) || strings.HasPrefix(statusLine, "HTTP/1.0")
	framing, length, err := bodyFraming(h)
	if err != nil {
		// Framing the relay cannot follow: the client's connection breaks here, as a
		// client reading it direct would have failed to read it.
		ex.end(fmt.Errorf("upstream response: %w", err), ex.rec.now())
		return false, false
	}
	switch {
	case status == http.StatusNoContent || status == http.StatusNotModified:
		framing = frameNone
	case framing == frameNone:
		framing = frameEOF // neither field: the body ends with the connection (RFC 9112, 6.3)
	}
	if framing == frameEOF {
		upClose, closeClient = true, true
	}
	pending := appendHead(make([]byte, 0, 512), statusLine, h, closeClient)
	var f bodyFramer
	f.reset(framing, length)
	var data [][]byte
	for {
		var b []byte
		var rerr error
		if !f.done() {
			if uc.br.Buffered() == 0 && len(pending) > 0 {
				// No body byte came with the head: the head goes out now, not with the
				// first chunk, as it would direct.
				if _, err := c.Write(pending); err != nil {
					ex.clientGone = true
					ex.end(errClientGone, ex.rec.now())
					return false, false
				}
				pending = pending[:0]
			}
			b, rerr = buffered(uc.br)
		}
		stamp := ex.rec.now()
		data = data[:0]
		n, ferr := f.feed(b, func(d []byte) { data = append(data, d) })
		out := b[:n]
		if len(pending) > 0 {
			out = append(pending, out...)
			pending = pending[:0]
		}
		if len(out) > 0 {
			if _, err := c.Write(out); err != nil {
				r.handPieces(ex, data, stamp)
				ex.clientGone = true
				ex.end(errClientGone, ex.rec.now())
				return false, false
			}
		}
		r.handPieces(ex, data, stamp)
		uc.br.Discard(n)
		switch {
		case ferr != nil:
			ex.end(fmt.Errorf("upstream response: %w", ferr), ex.rec.now())
			return false, false
		case f.done():
			ex.end(nil, ex.rec.now())
			return !upClose && uc.br.Buffered() == 0, !closeClient
		case rerr != nil && f.state == fsEOF && errors.Is(rerr, io.EOF):
			ex.end(nil, ex.rec.now()) // a body that ends with the connection ended
			return false, false
		case rerr != nil:
			if errors.Is(rerr, io.EOF) {
				rerr = io.ErrUnexpectedEOF
			}
			ex.end(rerr, ex.rec.now())
			return false, false // the client's body breaks at the same byte
		}
	}
}

func (r *Relay) handPieces(ex *exchange, data [][]byte, stamp int64) {
	for _, d := range data {
		if len(d) > 0 {
			ex.bodyPiece(d, stamp)
		}
	}
}

// finalHead reads the response's head, passing each 1xx interim response on to the
// client first (RFC 9110, 15.2); ok false: the exchange is over, recorded as it failed.
func (r *Relay) finalHead(c net.Conn, uc *upConn, ex *exchange) (status int, statusLine string, h http.Header, ok bool) {
	for {
		n, err := peekHead(uc.br)
		var head []byte
		switch {
		case err != nil:
		case n == 0: // longer than the reader's buffer
			head, err = longHead(uc.br)
		default:
			head, _ = uc.br.Peek(n)
		}
		if err != nil {
			ex.upstreamErr = err
			return 0, "", nil, false
		}
		first, hh, err := parseHeadLines(head)
		code, okStatus := parseStatus(first)
		if err != nil || !okStatus {
			ex.upstreamErr = errors.New("malformed response head")
			return 0, "", nil, false
		}
		uc.br.Discard(n)
		if code >= 200 {
			return code, first, hh, true
		}
		if code == http.StatusSwitchingProtocols {
			ex.upstreamErr = errors.New("101 Switching Protocols to a request that asked for no upgrade")
			return 0, "", nil, false
		}
		dropHopByHop(hh)
		if _, err := c.Write(appendHead(nil, first, hh, false)); err != nil {
			ex.clientGone = true
			return 0, "", nil, false
		}
	}
}

// maxResponseHead is the longest response head the relay passes: net/http's transport's
// limit when its MaxResponseHeaderBytes is unset, so the two relays refuse the same heads.
const maxResponseHead = 10 << 20

// longHead reads a head longer than br's buffer, line by line through its blank line
// (never a byte past it), and consumes it.
func longHead(br *bufio.Reader) ([]byte, error) {
	var head []byte
	line := 0 // where the line being read starts in head
	for {
		b, err := br.ReadSlice('\n')
		head = append(head, b...)
		switch {
		case len(head) > maxResponseHead:
			return nil, errors.New("response head over 10 MiB")
		case err == bufio.ErrBufferFull:
			continue // the same line goes on
		case err != nil:
			return nil, err
		}
		if l := head[line:]; line > 0 && (len(l) == 1 || (len(l) == 2 && l[0] == '\r')) {
			return head, nil
		}
		line = len(head)
	}
}

// appendHead appends a response head for the client: the status line (as HTTP/1.1, the
// version the relay speaks to it), the fields, Connection: close when the relay closes
// the connection after it.
func appendHead(out []byte, statusLine string, h http.Header, closeConn bool) []byte {
	out = append(out, "HTTP/1.1"...)
	out = append(out, statusLine[len("HTTP/1.1"):]...)
	out = append(out, "\r\n"...)
	b := bytes.NewBuffer(out) // the fields written straight after the status line
	h.Write(b)
	out = b.Bytes()
	if closeConn {
		out = append(out, "Connection: close\r\n"...)
	}
	return append(out, "\r\n"...)
}

// buffered waits for br to hold bytes and returns them all (without consuming them).
func buffered(br *bufio.Reader) ([]byte, error) {
	var err error
	if br.Buffered() == 0 {
		_, err = br.Peek(1)
	}
	b, _ := br.Peek(br.Buffered())
	return b, err
}

// parseStatus reads a status line's code (RFC 9112, 4).
func parseStatus(line string) (int, bool) {
	proto, rest, ok := strings.Cut(line, " ")
	if !ok || (proto != "HTTP/1.1" && proto != "HTTP/1.0") || len(rest) < 3 {
		return 0, false
	}
	code, err := strconv.Atoi(rest[:3])
	if err != nil || code < 100 || code > 999 || (len(rest) > 3 && rest[3] != ' ') {
		return 0, false
	}
	return code, true
}
