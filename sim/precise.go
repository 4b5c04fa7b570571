package sim

import (
	"context"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/llmreplay/llmreplay/sim/stampconn"
)

// The precise writer (Linux): the fixed profile's stream writes are made by a scheduler
// thread that sleeps on an absolute deadline and writes each due chunk itself, with one
// write(2) on the connection's socket, instead of a handler goroutine woken by a Go timer
// per token and writing through net/http. The handler writes the response head through
// net/http (so net/http has chosen chunked framing and holds nothing buffered), hands the
// stream over, and waits; net/http writes the terminating chunk when it returns.

// WriteEarly is how long before its due time the precise writer may write a token: one
// wake serves every write due within it (precise_linux.go says why). A client's TTFT can
// be that much shorter than the fixed profile's, never more.
const WriteEarly = 200 * time.Microsecond

// Outcomes of a precise stream.
const (
	preciseOK       = iota + 1 // every chunk, [DONE] included, was written
	preciseFallback            // a write did not complete at once: the handler goes on
	preciseErr                 // the connection failed
)

// pstream is one fixed-profile stream handed to the scheduler.
type pstream struct {
	srv          *Server
	src          *fixedSource
	ck           *chunker
	includeUsage bool
	logWrites    bool
	raw          syscall.RawConn
	done         chan struct{} // closed by the scheduler when result is set

	mu       sync.Mutex // held by the scheduler across a write, by the handler to cancel
	canceled bool       // the handler has given up: no write may follow
	sent     int        // tokens written (or, on fallback, in pending)
	result   int
	err      error
	// On fallback: framed bytes not yet written, how many tokens they complete, and
	// whether they end the stream ([DONE]).
	pending       []byte
	pendingTokens int
	pendingFrom   int
	pendingFinal  bool

	writes        int // write(2) calls made, for tests
	firstWriteNs  int64
	answerWriteNs int64 // the write that carried the first answer token
	writeNs       []int64
	writeTokens   []int

	content, out []byte // scratch for the next write
	wn           int
	werr         error
	writeFn      func(fd uintptr) bool
}

// finish records the outcome and wakes the handler; st.mu is held.
func (st *pstream) finish(result int, err error) {
	st.result, st.err = result, err
	close(st.done)
}

// cancel makes sure no scheduler write happens after it returns, and reports the
// outcome if the stream ended first.
func (st *pstream) cancel() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.canceled = true
	return st.result
}

// stamp records a write of tokens [from, to) at t (unix ns).
func (st *pstream) stamp(t int64, from, to int) {
	tokens := to - from
	if tokens == 0 {
		return
	}
	if from <= st.ck.reasoning && st.ck.reasoning < to {
		st.answerWriteNs = t
	}
	if st.firstWriteNs == 0 {
		st.firstWriteNs = t
	}
	if st.logWrites {
		st.writeNs = append(st.writeNs, t)
		st.writeTokens = append(st.writeTokens, tokens)
	}
}

// appendChunk appends content framed as one HTTP/1.1 chunk, as net/http's chunkWriter
// frames each flush ("%x\r\n" content "\r\n").
func appendChunk(out, content []byte) []byte {
	out = strconv.AppendInt(out, int64(len(content)), 16)
	out = append(out, "\r\n"...)
	out = append(out, content...)
	return append(out, "\r\n"...)
}

// appendDue appends to out the chunks that the goroutine path writes for tokens
// [from, to), ending the stream (usage and [DONE], or the closing events) when to is the target: the same bytes,
// with a chunk cut wherever the goroutine path cuts one (after a token that takes the
// body past writeBatch, and at the end). scratch holds the chunk body being built.
func (c *chunker) appendDue(out, scratch []byte, from, to int, usage bool) ([]byte, []byte) {
	b := scratch[:0]
	for i := from; i < to; i++ {
		if i == 0 {
			b = c.appendStart(b)
		}
		b = c.appendToken(b, i)
		if len(b) > writeBatch {
			out = appendChunk(out, b)
			b = b[:0]
		}
	}
	if to == c.target {
		b = c.appendEnd(b, usage)
	}
	if len(b) > 0 {
		out = appendChunk(out, b)
	}
	return out, b
}

// dueTokens returns how many tokens exist at now, more than sent (the one at sent being
// due), as fixedSource.next does after its wait.
func (f *fixedSource) dueTokens(sent int, now time.Time) int {
	n := sent + 1
	for n < f.target && !f.due(n).After(now) {
		n++
	}
	return n
}

// servePrecise hands a fixed stream to the scheduler and waits for it. It returns how
// many tokens are on the wire and whether the stream is complete ([DONE] written); on
// complete=false with ok=true the handler writes the rest on its own path. ok=false: the
// client or the server went away, or the connection failed.
func (s *Server) servePrecise(ctx context.Context, sc *stampconn.Conn, f *fixedSource, ck *chunker, usage bool, rec *LogRecord) (sent int, complete, ok bool) {
	st := &pstream{srv: s, src: f, ck: ck, includeUsage: usage, logWrites: rec != nil && s.cfg.RequestLogWrites,
		raw: sc.Raw(), done: make(chan struct{})}
	if !s.precise().submit(st) {
		return 0, false, true
	}
	s.fixedPrecise.Add(1)
	defer func() {
		if s.preciseReturned != nil {
			s.preciseReturned(st)
		}
		if rec != nil {
			if st.firstWriteNs != 0 {
				rec.FirstWriteUnixNs = st.firstWriteNs
			}
			if st.answerWriteNs != 0 {
				rec.FirstAnswerWriteUnixNs = st.answerWriteNs
			}
			rec.WriteUnixNs, rec.WriteTokens = append(rec.WriteUnixNs, st.writeNs...), append(rec.WriteTokens, st.writeTokens...)
		}
	}()
	select {
	case <-st.done:
	case <-ctx.Done():
	case <-s.closing:
	}
	if st.cancel() == 0 {
		return 0, false, false // canceled before the end: no write will follow
	}
	switch st.result {
	case preciseOK:
		return st.sent, true, true
	case preciseFallback:
		s.fixedFallbacks.Add(1)
		t := time.Now().UnixNano()
		if _, err := sc.Conn.Write(st.pending); err != nil {
			return st.sent, false, false
		}
		st.stamp(t, st.pendingFrom, st.pendingFrom+st.pendingTokens)
		return st.sent, st.pendingFinal, true
	}
	return st.sent, false, false
}
