package sim

import (
	"bufio"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
)

// RequestIDHeader is the header whose value the sim records in its request log and
// echoes in its response, as vLLM does with --enable-request-id-headers.
const RequestIDHeader = "X-Request-Id"

// maxRequestIDBytes bounds a logged or echoed X-Request-Id.
const maxRequestIDBytes = 256

// requestLog writes JSON lines to a file from its own goroutine. Handlers hand it a line
// without waiting: when the writer is behind by requestLogQueue lines, the line is
// dropped and counted (llmreplay_sim_request_log_dropped_total), so neither the engine
// nor a stream ever waits on the disk.
type requestLog struct {
	mu      sync.RWMutex // guards closed against add after close
	closed  bool
	ch      chan []byte
	done    chan struct{}
	f       *os.File
	err     error // first write error, reported by close
	dropped atomic.Int64
}

const requestLogQueue = 1 << 14

func openRequestLog(path string) (*requestLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sim: config request_log: %w", err)
	}
	l := &requestLog{ch: make(chan []byte, requestLogQueue), done: make(chan struct{}), f: f}
	go l.run()
	return l, nil
}

func (l *requestLog) run() {
	defer close(l.done)
	w := bufio.NewWriterSize(l.f, 64<<10)
	for b := range l.ch {
		if _, err := w.Write(b); err != nil && l.err == nil {
			l.err = err
		}
		if len(l.ch) == 0 {
			if err := w.Flush(); err != nil && l.err == nil {
				l.err = err
			}
		}
	}
	if err := w.Flush(); err != nil && l.err == nil {
		l.err = err
	}
	if err := l.f.Close(); err != nil && l.err == nil {
		l.err = err
	}
}

// add queues one line (ending in '\n') or drops it when the queue is full or closed.
func (l *requestLog) add(line []byte) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.dropped.Add(1)
		return
	}
	select {
	case l.ch <- line:
	default:
		l.dropped.Add(1)
	}
}

// close writes what is queued and closes the file.
func (l *requestLog) close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.ch)
	}
	l.mu.Unlock()
	<-l.done
	return l.err
}

// LogRecord is one line of the request log (--request-log): exported so that its readers
// (bench/replaybench) decode the one definition.
type LogRecord struct {
	Time      string `json:"time"`                 // when the handler returned, RFC 3339 UTC
	RequestID string `json:"request_id,omitempty"` // the client's X-Request-Id
	ID        string `json:"id,omitempty"`         // the response id (cmpl-..., chatcmpl-...)
	API       string `json:"api"`                  // completions, chat, messages or responses
	Status    int    `json:"status"`               // HTTP status
	Outcome   string `json:"outcome"`              // ok, bad_request, fault, canceled
	Error     string `json:"error,omitempty"`
	Stream    bool   `json:"stream"`

	PromptTokens     int `json:"prompt_tokens,omitempty"`
	CachedTokens     int `json:"cached_tokens,omitempty"`
	CompletionTokens int `json:"completion_tokens,omitempty"`
	// ReasoningTokens is how many of the completion tokens were streamed as reasoning
	// (Config.ReasoningShare; completions have none).
	ReasoningTokens int `json:"reasoning_tokens,omitempty"`
	// Model times (ns since the engine's epoch), when the request completed.
	ArrivalNs int64 `json:"arrival_ns,omitempty"`
	FirstNs   int64 `json:"first_ns,omitempty"`
	LastNs    int64 `json:"last_ns,omitempty"`
	// FirstAnswerNs is the first answer (non-reasoning) token's model time, when there is
	// one; FirstAnswerWriteUnixNs the wall-clock stamp of the write that carried it
	// (streams): a client's time to first answer is held against these as its TTFT is
	// against first_ns and first_write_unix_ns.
	FirstAnswerNs          int64 `json:"first_answer_ns,omitempty"`
	FirstAnswerWriteUnixNs int64 `json:"first_answer_write_unix_ns,omitempty"`

	// Wall-clock stamps (CLOCK_REALTIME, ns since 1970) of what the server did, when known:
	// when the bytes of the request's head reached the server's socket (the kernel's
	// receive timestamp, Linux), when the read that delivered them returned, and just
	// before the write that carried the first token (streams). With Config.RequestLogWrites, every body
	// write that carried tokens: its stamp and its token count (they sum to
	// completion_tokens when the stream ended ok). A write cut short by a slow reader
	// counts at the write that completes it.
	ArriveUnixNs     int64   `json:"arrive_unix_ns,omitempty"`
	ReadUnixNs       int64   `json:"read_unix_ns,omitempty"`
	FirstWriteUnixNs int64   `json:"first_write_unix_ns,omitempty"`
	WriteUnixNs      []int64 `json:"write_unix_ns,omitempty"`
	WriteTokens      []int   `json:"write_tokens,omitempty"`
}
