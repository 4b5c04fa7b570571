// Package vllmtest is a test server that streams like vLLM's /v1/completions, with
// timings and concurrency a test sets, shared by the tests of replay and replay/transport.
package vllmtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/wire"
)

// ReqBody is the request body fields the Server reads.
type ReqBody struct {
	Model     string `json:"model"`
	Prompt    string `json:"prompt"`
	MaxTokens int    `json:"max_tokens"`
	MinTokens int    `json:"min_tokens"`
	IgnoreEOS bool   `json:"ignore_eos"`
	Messages  []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	StreamOptions struct {
		IncludeUsage         bool `json:"include_usage"`
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
}

// Server streams like vLLM's /v1/completions: one chunk per token after ttft, one
// every itl, cumulative usage in each chunk when asked, a usage chunk, [DONE].
type Server struct {
	TTFT, ITL time.Duration
	Inflight  atomic.Int64
	MaxSeen   atomic.Int64
	Count     atomic.Int64
	// Preflights counts the preflight's length checks (X-Request-Id
	// wire.PreflightRequestID), which Count, Inflight and MaxSeen leave out.
	Preflights atomic.Int64
	// HoldFor, when set, holds each request before it answers until HoldFor requests
	// have been in flight at once (or 10 s have passed), so a test sees the concurrency
	// the client allows rather than what the machine's timing happened to give.
	HoldFor int64
	// Release, when set, holds every request before it answers until it is closed.
	Release chan struct{}
}

// ServeHTTP answers /v1/models with two models and every other path as a completion.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"model-a","object":"model"},{"id":"model-b"}]}`)
		return
	}
	// The preflight's length check is not one of the trace's requests: it is counted
	// apart, answered at once and never held, so Count, MaxSeen and the timings a test
	// sets stay those of the requests it sends.
	preflight := r.Header.Get("X-Request-Id") == wire.PreflightRequestID
	if preflight {
		s.Preflights.Add(1)
	} else {
		defer s.Inflight.Add(-1)
		if !s.admit(r) {
			return
		}
	}
	var b ReqBody
	raw, _ := io.ReadAll(r.Body) // read to EOF, so that a client hang-up cancels r.Context()
	if err := json.Unmarshal(raw, &b); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, 400)
		return
	}
	prompt := b.Prompt
	if len(b.Messages) > 0 {
		prompt = b.Messages[0].Content
	}
	promptTokens := len(strings.Fields(prompt))
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	start := time.Now()
	ttft, itl := s.TTFT, s.ITL
	if preflight {
		ttft, itl = 0, 0
	}
	for i := 1; i <= b.MaxTokens; i++ {
		due := start.Add(ttft + time.Duration(i-1)*itl)
		select {
		case <-time.After(time.Until(due)):
		case <-r.Context().Done():
			return
		}
		fin := "null"
		if i == b.MaxTokens {
			fin = `"length"`
		}
		usage := ""
		if b.StreamOptions.ContinuousUsageStats {
			usage = fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, promptTokens, i, promptTokens+i)
		}
		fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" tok\",\"finish_reason\":%s}]%s}\n\n", fin, usage)
		f.Flush()
	}
	if b.StreamOptions.IncludeUsage {
		fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d}}\n\n", promptTokens, b.MaxTokens)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	f.Flush()
}

// admit counts a request of the trace, in Count, Inflight (the caller takes it off) and
// MaxSeen, and holds it as HoldFor and Release say; it returns false when the client hung
// up while it was held.
func (s *Server) admit(r *http.Request) bool {
	s.Count.Add(1)
	n := s.Inflight.Add(1)
	for {
		m := s.MaxSeen.Load()
		if n <= m || s.MaxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	for t0 := time.Now(); s.MaxSeen.Load() < s.HoldFor && time.Since(t0) < 10*time.Second; {
		time.Sleep(time.Millisecond)
	}
	if s.Release != nil {
		select {
		case <-s.Release:
		case <-r.Context().Done():
			return false
		}
	}
	return true
}

// Start serves h on loopback for the test's lifetime.
func Start(t *testing.T, h http.Handler) *url.URL {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	u, err := wire.BaseURL(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
