package transport

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

// The test servers and client of replay's tests (replay/helpers_test.go), for the
// transport's own.

type reqBody struct {
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

// vllmServer streams like vLLM's /v1/completions: one chunk per token after ttft, one
// every itl, cumulative usage in each chunk when asked, a usage chunk, [DONE].
type vllmServer struct {
	ttft, itl time.Duration
	inflight  atomic.Int64
	maxSeen   atomic.Int64
	count     atomic.Int64
	// holdFor, when set, holds each request before it answers until holdFor requests
	// have been in flight at once (or 10 s have passed), so a test sees the concurrency
	// the client allows rather than what the machine's timing happened to give.
	holdFor int64
	// release, when set, holds every request before it answers until it is closed.
	release chan struct{}
}

func (s *vllmServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"model-a","object":"model"},{"id":"model-b"}]}`)
		return
	}
	s.count.Add(1)
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for {
		m := s.maxSeen.Load()
		if n <= m || s.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	for t0 := time.Now(); s.maxSeen.Load() < s.holdFor && time.Since(t0) < 10*time.Second; {
		time.Sleep(time.Millisecond)
	}
	if s.release != nil {
		select {
		case <-s.release:
		case <-r.Context().Done():
			return
		}
	}
	var b reqBody
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
	for i := 1; i <= b.MaxTokens; i++ {
		due := start.Add(s.ttft + time.Duration(i-1)*s.itl)
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

// startServer serves h on loopback for the test's lifetime.
func startServer(t *testing.T, h http.Handler) *url.URL {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	u, err := wire.BaseURL(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func newTestClient(t *testing.T, base *url.URL, mod func(*ClientOptions)) *Client {
	t.Helper()
	o := ClientOptions{BaseURL: base, API: wire.APICompletions, Backend: wire.BackendVLLM, Model: "m", Timeout: 5 * time.Second, MaxInflight: 64}
	if mod != nil {
		mod(&o)
	}
	c, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
