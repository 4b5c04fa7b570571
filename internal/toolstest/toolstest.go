// Package toolstest is, for tests, a chat completions server that counts the tools a
// request sends by a rule the test sets, so a test can check that a replay's requests are
// counted the trace's prompt tokens, tools included.
package toolstest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/llmreplay/llmreplay/tokenize"
)

// Server serves /v1/models, /v1/completions (a prompt's tokens, no tools) and
// /v1/chat/completions (OpenAI's chat completions reference:
// "messages", "tools": [{"type": "function", "function": {"name", "description",
// "parameters"}}], "max_tokens", "stream"). Its prompt tokens are the cl100k tokens of every
// message's content, plus Template per request (a chat template's markers), plus, per tool,
// the cl100k tokens of its description and Overhead. With Overhead 16 and Template 0 that
// is the simulated engine's rule (docs/sim.md). A streamed answer is max_tokens chunks of
// one token, then the usage; a non-streamed one (calibration's usage probes) the usage.
type Server struct {
	Overhead, Template int
	// IgnoreTools counts no tools, as a server whose template drops them.
	IgnoreTools bool
	enc         *tokenize.Encoding

	mu       sync.Mutex
	messages map[string]int // X-Request-Id → messages, of the streamed requests
}

// New returns a server of the rule.
func New(overhead, template int) (*Server, error) {
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		return nil, err
	}
	return &Server{Overhead: overhead, Template: template, enc: enc, messages: map[string]int{}}, nil
}

// Messages returns how many messages each streamed request sent, by X-Request-Id.
func (s *Server) Messages() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.messages))
	for k, v := range s.messages {
		out[k] = v
	}
	return out
}

type body struct {
	MaxTokens int    `json:"max_tokens"`
	Stream    bool   `json:"stream"`
	Prompt    string `json:"prompt"`
	Messages  []struct {
		Content string `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function *struct {
			Name        string `json:"name"`
			Description string `json:"description"`
		} `json:"function"`
	} `json:"tools"`
}

// ServeHTTP answers the models list and chat completions; anything else is 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"tools-model","object":"model"}]}`)
		return
	case "/v1/chat/completions", "/v1/completions":
	default:
		http.NotFound(w, r)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var b body
	if err := json.Unmarshal(raw, &b); err != nil || b.MaxTokens < 1 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	n := s.Template + s.enc.Count(b.Prompt)
	for _, m := range b.Messages {
		n += s.enc.Count(m.Content)
	}
	for _, t := range b.Tools {
		if t.Type != "function" || t.Function == nil || t.Function.Name == "" {
			http.Error(w, `{"error":{"message":"a tool needs type function and a function with a name"}}`, http.StatusBadRequest)
			return
		}
		if !s.IgnoreTools {
			n += s.enc.Count(t.Function.Description) + s.Overhead
		}
	}
	if !b.Stream {
		fmt.Fprintf(w, `{"choices":[{"index":0,"finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"total_tokens":%d}}`, n, n+1)
		return
	}
	s.mu.Lock()
	s.messages[r.Header.Get("X-Request-Id")] = len(b.Messages)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	for i := 1; i <= b.MaxTokens; i++ {
		fin := "null"
		if i == b.MaxTokens {
			fin = `"length"`
		}
		piece := `"delta":{"content":" x"}`
		if r.URL.Path == "/v1/completions" {
			piece = `"text":" x"`
		}
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,%s,\"finish_reason\":%s}]}\n\n", piece, fin)
	}
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", n, b.MaxTokens, n+b.MaxTokens)
	fmt.Fprint(w, "data: [DONE]\n\n")
}
