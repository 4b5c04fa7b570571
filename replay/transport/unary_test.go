package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"
)

// unaryAnswer writes an answer to a decoded embeddings or rerank request: n results in the
// reference's shape (OpenAI's embeddings object list with base64 embeddings; vLLM's
// RerankResponse), usage tokens as given.
func unaryAnswer(api wire.API, n, tokens int) string {
	var sb strings.Builder
	if api == wire.APIRerank {
		fmt.Fprintf(&sb, `{"id":"rerank-x","model":"m","usage":{"total_tokens":%d},"results":[`, tokens)
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"index":%d,"document":{"text":"d"},"relevance_score":0.5}`, i)
		}
		sb.WriteString(`]}`)
		return sb.String()
	}
	sb.WriteString(`{"object":"list","data":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		// 4,096 dimensions of float32 zeros, base64: 21,848 bytes an embedding.
		fmt.Fprintf(&sb, `{"object":"embedding","embedding":"%s","index":%d}`, strings.Repeat("A", 21848), i)
	}
	fmt.Fprintf(&sb, `],"model":"m","usage":{"prompt_tokens":%d,"total_tokens":%d}}`, tokens, tokens)
	return sb.String()
}

// TestUnaryBothClients: an embeddings or rerank answer is read whole by either client into
// one record: ok only for HTTP 200 with one result per input, prompt_tokens_server the
// usage's count, end_ns set, no chunks and no output; each bad answer gives one clear error.
func TestUnaryBothClients(t *testing.T) {
	type answer struct {
		status int
		body   string
		cut    bool // the connection closes before the body's announced end
	}
	var next answer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.Header.Get("Accept") != "application/json" {
			t.Errorf("request: %v, Accept %q", err, r.Header.Get("Accept"))
		}
		for _, f := range []string{"stream", "stream_options", "temperature", "ignore_eos", "max_tokens", "min_tokens"} {
			if _, ok := req[f]; ok {
				t.Errorf("%s body has %s", r.URL.Path, f)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if next.cut {
			w.Header().Set("Content-Length", fmt.Sprint(len(next.body)+100))
		}
		w.WriteHeader(next.status)
		io.WriteString(w, next.body)
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL + "/v1")
	clients := []string{HTTPClientNetHTTP}
	if runtime.GOOS == "linux" {
		clients = append(clients, HTTPClientRaw)
	}
	for _, tc := range []struct {
		name   string
		api    wire.API
		ans    answer
		status results.Status
		err    string
		server int32 // prompt_tokens_server
	}{
		{"embeddings", wire.APIEmbeddings, answer{200, unaryAnswer(wire.APIEmbeddings, 3, 57), false}, results.StatusOK, "", 57},
		{"embeddings large", wire.APIEmbeddings, answer{200, unaryAnswer(wire.APIEmbeddings, 1000, 9000), false}, results.StatusOK, "", 9000},
		{"rerank", wire.APIRerank, answer{200, unaryAnswer(wire.APIRerank, 3, 80), false}, results.StatusOK, "", 80},
		{"count mismatch", wire.APIEmbeddings, answer{200, unaryAnswer(wire.APIEmbeddings, 2, 40), false}, results.StatusStreamError, "answer has 2 results for the 3 inputs sent", 40},
		{"truncated JSON", wire.APIEmbeddings, answer{200, unaryAnswer(wire.APIEmbeddings, 3, 5)[:100], false}, results.StatusStreamError, "answer is not JSON: JSON cut short: the body ended after 100 bytes inside it", results.Null},
		{"malformed", wire.APIRerank, answer{200, `{"results":[}`, false}, results.StatusStreamError, "answer is not JSON: malformed JSON at byte 12", results.Null},
		{"error object", wire.APIEmbeddings, answer{200, `{"error":{"message":"too many inputs","code":400}}`, false}, results.StatusStreamError, "server error in the answer: too many inputs", results.Null},
		{"not 200", wire.APIEmbeddings, answer{201, unaryAnswer(wire.APIEmbeddings, 3, 57), false}, results.StatusStreamError, "HTTP 201: an answer is HTTP 200", 57},
		{"no results", wire.APIRerank, answer{200, `{"usage":{"total_tokens":3}}`, false}, results.StatusStreamError, "answer has no array of results", 3},
		{"http error", wire.APIEmbeddings, answer{400, `{"error":{"message":"bad input"}}`, false}, results.StatusHTTPError, "HTTP 400", results.Null},
		{"connection cut", wire.APIEmbeddings, answer{200, unaryAnswer(wire.APIEmbeddings, 3, 57), true}, results.StatusStreamError, "answer broken after", results.Null},
	} {
		for _, hc := range clients {
			next = tc.ans
			c := newTestClient(t, base, func(o *ClientOptions) { o.HTTPClient, o.API = hc, tc.api })
			tr := c.Transport()
			inputs := [][]byte{[]byte("q"), []byte("a b"), []byte("c")}
			if strings.HasSuffix(tc.name, "large") {
				inputs = make([][]byte, 1000)
				for i := range inputs {
					inputs[i] = []byte("x")
				}
			}
			if tc.api == wire.APIRerank {
				inputs = append([][]byte{[]byte("query")}, inputs...)
			}
			n := int32(len(inputs))
			if tc.api == wire.APIRerank {
				n--
			}
			req := &Request{ID: 1, PromptTokens: 5, Inputs: n, Body: c.AppendInputsBody(nil, c.DefaultBodyPrefix(), inputs)}
			tr.Prepare(req, false)
			res := results.NewResult(1, 0, 0, 5, 0)
			res.Inputs = req.Inputs
			tr.RoundTrip(context.Background(), Clock{}, req, res, NewSSEReader(nil, Clock{}.Now, 4096, DefaultMaxLine), func(int) {}, nil)
			if res.Status != tc.status || !strings.HasPrefix(res.Error, tc.err) {
				t.Errorf("%s (%s): %s %q, want %s %q", tc.name, hc, res.Status, res.Error, tc.status, tc.err)
			}
			if res.Status != results.StatusOK {
				if res.PromptTokensServer != tc.server && tc.status != results.StatusHTTPError {
					t.Errorf("%s (%s): prompt_tokens_server %d, want %d", tc.name, hc, res.PromptTokensServer, tc.server)
				}
				continue
			}
			if res.PromptTokensServer != tc.server || res.Inputs != n || res.EndNS < res.SentNS || res.SentNS == results.Null ||
				res.FirstTokenNS != results.Null || len(res.ChunkNS) != 0 || res.ChunkTokens != nil || res.OutputTokens != results.Null || res.HTTPStatus != 200 {
				t.Errorf("%s (%s): record %+v", tc.name, hc, res)
			}
		}
	}
}

// TestUnaryTimeout: an answer whose body stalls past --timeout is a timeout with the bytes
// read, through either client, not an ok nor a broken answer.
func TestUnaryTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL + "/v1")
	clients := []string{HTTPClientNetHTTP}
	if runtime.GOOS == "linux" {
		clients = append(clients, HTTPClientRaw)
	}
	for _, hc := range clients {
		c := newTestClient(t, base, func(o *ClientOptions) {
			o.HTTPClient, o.API, o.Timeout = hc, wire.APIEmbeddings, 300*time.Millisecond
		})
		tr := c.Transport()
		req := &Request{ID: 1, PromptTokens: 2, Inputs: 1, Body: c.AppendInputsBody(nil, c.DefaultBodyPrefix(), [][]byte{[]byte("a b")})}
		tr.Prepare(req, false)
		res := results.NewResult(1, 0, 0, 2, 0)
		res.Inputs = 1
		tr.RoundTrip(context.Background(), Clock{}, req, res, NewSSEReader(nil, Clock{}.Now, 4096, DefaultMaxLine), func(int) {}, nil)
		if res.Status != results.StatusTimeout || res.Error != "answer not read within the 300ms timeout (25 bytes)" {
			t.Errorf("%s: %s %q", hc, res.Status, res.Error)
		}
	}
}
