package transport

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/llmreplay/llmreplay/wire"
)

// lengthServer streams completions as Ollama's OpenAI layer does: it honours max_tokens
// alone (max_completion_tokens, min_tokens and ignore_eos are ignored), its model stops on
// its own after eos tokens (0: never), and every content chunk carries a usage object of
// zeros before the final usage chunk. Without max_tokens and eos it streams until the
// client hangs up, which it reports on hungUp. It records the last request's headers and
// body.
type lengthServer struct {
	eos    int
	hungUp chan struct{}
	mu     sync.Mutex
	header http.Header
	body   map[string]any
}

func (s *lengthServer) last() (http.Header, map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.header, s.body
}

func (s *lengthServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	json.Unmarshal(raw, &body)
	s.mu.Lock()
	s.header, s.body = r.Header.Clone(), body
	s.mu.Unlock()
	limit := -1
	if v, ok := body["max_tokens"].(float64); ok {
		limit = int(v)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	n := 0
	for ; (limit < 0 || n < limit) && (s.eos == 0 || n < s.eos); n++ {
		if r.Context().Err() != nil {
			if s.hungUp != nil {
				close(s.hungUp)
			}
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" w\",\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0}}\n\n")
		f.Flush()
	}
	fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":0,\"completion_tokens\":0,\"total_tokens\":0}}\n\n"+
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":17,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", n, 17+n)
}

// TestCheckLength: the length check asks in the backend's field, with the run's
// credentials and X-Request-Id wire.PreflightRequestID; it reads a server that honours the
// field to its end (usage's count believed over its zero placeholders), one whose model
// stops early as fewer tokens, and one that ignores the field up to LengthCheckCap chunks,
// where it hangs up.
func TestCheckLength(t *testing.T) {
	for _, tc := range []struct {
		name     string
		api      wire.API
		backend  wire.Backend
		eos      int
		field    string
		tokens   int
		over     bool
		usageSay int
	}{
		{"honoured", wire.APICompletions, wire.BackendVLLM, 0, "max_tokens", 4, false, 4},
		{"chat openai max_tokens", wire.APIChat, wire.BackendTGI, 0, "max_tokens", 4, false, 4},
		{"stops early", wire.APICompletions, wire.BackendVLLM, 2, "max_tokens", 2, false, 2},
		{"ignored", wire.APIChat, wire.BackendOpenAI, 0, "max_completion_tokens", LengthCheckCap(4), true, 0},
		{"ignored, stops at 9", wire.APIChat, wire.BackendOpenAI, 9, "max_completion_tokens", 9, true, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &lengthServer{eos: tc.eos, hungUp: make(chan struct{})}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			base, _ := wire.BaseURL(hs.URL)
			c := newTestClient(t, base, func(o *ClientOptions) {
				o.API, o.Backend, o.APIKey = tc.api, tc.backend, "sk-Secret-123"
			})
			l, err := c.CheckLength(t.Context(), []byte("one two three"), 4)
			if err != nil {
				t.Fatal(err)
			}
			if l.Field != tc.field || l.Asked != 4 || l.Tokens() != tc.tokens || l.Over() != tc.over || l.CompletionTokens != tc.usageSay {
				t.Errorf("check %+v: want field %s, %d tokens, over %v, usage %d", l, tc.field, tc.tokens, tc.over, tc.usageSay)
			}
			header, body := srv.last()
			if _, ok := body[tc.field]; !ok || body["stream"] != true {
				t.Errorf("body %v: no %s, or not streaming", body, tc.field)
			}
			if got := header.Get(RequestIDHeader); got != wire.PreflightRequestID || header.Get("Authorization") != "Bearer sk-Secret-123" {
				t.Errorf("headers: X-Request-Id %q, Authorization %q", got, header.Get("Authorization"))
			}
			if l.Cut {
				<-srv.hungUp // the check canceled the stream it stopped reading
				if l.Chunks != LengthCheckCap(4) {
					t.Errorf("cut at %d chunks, want %d", l.Chunks, LengthCheckCap(4))
				}
			}
		})
	}
}

// TestCheckLengthErrors: an error status is an error with the server's message, scrubbed
// of the API key a server echoes; so is an error event in the stream.
func TestCheckLengthErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"404", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":{"message":"model \"m\" not found, try pulling it first (%s)"}}`, r.Header.Get("Authorization"))
		}, `HTTP 404: model "m" not found, try pulling it first (Bearer [redacted])`},
		{"error event", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"error\":{\"message\":\"out of memory\"}}\n\n")
		}, "server error mid-stream: out of memory"},
		{"not a stream", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"choices":[]}`)
		}, "not an event stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := httptest.NewServer(tc.handler)
			defer hs.Close()
			base, _ := wire.BaseURL(hs.URL)
			c := newTestClient(t, base, func(o *ClientOptions) { o.APIKey = "sk-Secret-123" })
			_, err := c.CheckLength(t.Context(), []byte("one two"), 4)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "sk-Secret-123") {
				t.Errorf("error %v, want one with %q and no key", err, tc.want)
			}
		})
	}
}
