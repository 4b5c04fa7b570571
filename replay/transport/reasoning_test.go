package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"
)

// reasoningStream is a chat stream in the shape vLLM's chat endpoint streams for a model
// served with --reasoning-parser (vllm/entrypoints/openai/serving_chat.py, its DeltaMessage;
// vLLM's docs/features/reasoning_outputs.md): a role chunk, Reasoning chunks whose delta
// carries the reasoning under field (reasoning_content, as SGLang and vLLM before its
// rename name it, or reasoning, vLLM's name since late 2025 and OpenRouter's), then Answer
// chunks of delta.content, one token each, a finish_reason on the last; with ChunkUsage the
// cumulative usage on every chunk (vLLM's continuous_usage_stats); then the usage chunk,
// with completion_tokens_details.reasoning_tokens when Detail (OpenAI's chat usage, in the
// Chat Completions API reference), and [DONE]. Mixed sends the last reasoning token and the
// first answer token in one delta. Not byte-exact: the shape, not an engine's bytes.
type reasoningStream struct {
	Field             string
	Reasoning, Answer int
	ChunkUsage        bool
	Detail            bool
	Mixed             bool
	NoUsage           bool
	// ZeroDetail sends reasoning_tokens 0 whatever was streamed, as Ollama's usage does
	// (a constant in its openai/responses.go, v0.17.4).
	ZeroDetail bool
}

func (s reasoningStream) body() string {
	var b strings.Builder
	const prompt = 7
	chunk := func(delta string, n int, fin string) {
		usage := ""
		if s.ChunkUsage {
			usage = fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, prompt, n, prompt+n)
		}
		fmt.Fprintf(&b, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]%s}\n\n", delta, fin, usage)
	}
	chunk(`{"role":"assistant","content":""}`, 0, "null")
	n := 0
	for i := 1; i <= s.Reasoning; i++ {
		if s.Mixed && i == s.Reasoning {
			break
		}
		n++
		chunk(`{"`+s.Field+`":" think"}`, n, "null")
	}
	for i := 1; i <= s.Answer; i++ {
		fin := "null"
		if i == s.Answer {
			fin = `"stop"`
		}
		if s.Mixed && i == 1 {
			n += 2
			chunk(`{"`+s.Field+`":" think","content":" word"}`, n, fin)
			continue
		}
		n++
		chunk(`{"content":" word"}`, n, fin)
	}
	if !s.NoUsage {
		detail := ""
		if s.Detail {
			detail = fmt.Sprintf(`,"completion_tokens_details":{"reasoning_tokens":%d}`, s.Reasoning)
		}
		if s.ZeroDetail {
			detail = `,"completion_tokens_details":{"reasoning_tokens":0}`
		}
		fmt.Fprintf(&b, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d%s}}\n\n",
			prompt, n, prompt+n, detail)
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// words counts whitespace-separated words: the test's tokenizer, one token per streamed
// " think" or " word".
func words(s string) int { return len(strings.Fields(s)) }

// roundTripEach sends one chat request through each HTTP client to a server answering
// body, and returns each client's record.
func roundTripEach(t *testing.T, body string, countTokens func(string) int) map[string]*results.Result {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, body)
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL + "/v1")
	clients := []string{HTTPClientNetHTTP}
	if runtime.GOOS == "linux" {
		clients = append(clients, HTTPClientRaw)
	}
	out := map[string]*results.Result{}
	for _, hc := range clients {
		c := newTestClient(t, base, func(o *ClientOptions) {
			o.HTTPClient, o.API, o.CountTokens = hc, wire.APIChat, countTokens
		})
		tr := c.Transport()
		req := &Request{ID: 1, PromptTokens: 7, OutputTokens: 500, Body: []byte(`{"messages":[]}`)}
		tr.Prepare(req, false)
		res := results.NewResult(1, 0, 0, 7, 500)
		tr.RoundTrip(context.Background(), Clock{}, req, res, NewSSEReader(nil, Clock{}.Now, 4096, DefaultMaxLine), func(int) {}, nil)
		out[hc] = res
	}
	return out
}

// TestReasoningMeasuredApart: a chat stream of 300 reasoning tokens then 100 answer
// tokens, through both clients, under both field names servers use, in each way of
// knowing the reasoning count: the server's usage detail, the per-chunk usage, the
// client's tokenizer. The record says what the server served: 400 output tokens, 300 of
// them reasoning (from the source the stream allowed), the first token at the first
// reasoning chunk and the first answer at chunk 300 (the 301st), each stamp the arrival
// of exactly that chunk.
func TestReasoningMeasuredApart(t *testing.T) {
	type want struct {
		reasoning int32
		source    string
	}
	cases := []struct {
		name   string
		stream reasoningStream
		tok    func(string) int
		want   want
	}{
		{"usage detail", reasoningStream{Detail: true}, nil, want{300, results.SourceUsage}},
		{"usage detail wins over chunk usage and tokenizer", reasoningStream{Detail: true, ChunkUsage: true}, words, want{300, results.SourceUsage}},
		{"chunk usage", reasoningStream{ChunkUsage: true}, nil, want{300, results.SourceChunkUsage}},
		{"chunk usage wins over tokenizer", reasoningStream{ChunkUsage: true}, words, want{300, results.SourceChunkUsage}},
		{"tokenizer", reasoningStream{}, words, want{300, results.SourceTokenizer}},
		{"tokenizer without any usage", reasoningStream{NoUsage: true}, words, want{300, results.SourceTokenizer}},
		// A chunk of reasoning and answer together cannot be split by its tokens: the
		// tokenizer counts the reasoning text instead, or nobody does.
		{"mixed chunk: tokenizer", reasoningStream{ChunkUsage: true, Mixed: true}, words, want{300, results.SourceTokenizer}},
		{"mixed chunk, no tokenizer: null", reasoningStream{ChunkUsage: true, Mixed: true}, nil, want{results.Null, ""}},
		{"no usage detail, no chunk usage, no tokenizer: null", reasoningStream{}, nil, want{results.Null, ""}},
		// A usage saying 0 after reasoning was streamed is no count (Ollama's constant):
		// the next way of knowing counts it, or nobody does.
		{"usage 0 after reasoning: chunk usage", reasoningStream{ZeroDetail: true, ChunkUsage: true}, nil, want{300, results.SourceChunkUsage}},
		{"usage 0 after reasoning: tokenizer", reasoningStream{ZeroDetail: true}, words, want{300, results.SourceTokenizer}},
		{"usage 0 after reasoning, no other way: null", reasoningStream{ZeroDetail: true}, nil, want{results.Null, ""}},
	}
	for _, field := range []string{"reasoning_content", "reasoning"} {
		for _, tc := range cases {
			s := tc.stream
			s.Field, s.Reasoning, s.Answer = field, 300, 100
			for hc, res := range roundTripEach(t, s.body(), tc.tok) {
				t.Run(field+"/"+tc.name+"/"+hc, func(t *testing.T) {
					if res.Status != results.StatusOK {
						t.Fatalf("%s %s", res.Status, res.Error)
					}
					chunks := 400
					if s.Mixed {
						chunks = 399 // the 300th reasoning token came with the first answer token
					}
					if len(res.ChunkNS) != chunks {
						t.Fatalf("%d output chunks, want %d", len(res.ChunkNS), chunks)
					}
					first := 300
					if s.Mixed {
						first = 299
					}
					if res.FirstTokenNS != res.SentNS+res.ChunkNS[0] || res.FirstAnswerNS != res.SentNS+res.ChunkNS[first] {
						t.Errorf("first token %d, first answer %d; want the arrivals of chunks 0 and %d: %d, %d",
							res.FirstTokenNS, res.FirstAnswerNS, first, res.SentNS+res.ChunkNS[0], res.SentNS+res.ChunkNS[first])
					}
					if !s.NoUsage && (res.OutputTokens != 400 || res.OutputTokensSource != results.SourceUsage) {
						t.Errorf("output %d (%s), want 400 (usage)", res.OutputTokens, res.OutputTokensSource)
					}
					if s.NoUsage && (res.OutputTokens != 400 || res.OutputTokensSource != results.SourceTokenizer) {
						t.Errorf("output %d (%s), want 400 (tokenizer)", res.OutputTokens, res.OutputTokensSource)
					}
					if res.ReasoningTokens != tc.want.reasoning || res.ReasoningTokensSource != tc.want.source {
						t.Errorf("reasoning %d (%q), want %d (%q)", res.ReasoningTokens, res.ReasoningTokensSource, tc.want.reasoning, tc.want.source)
					}
				})
			}
		}
	}
}

// TestNoReasoningNoReasoningCount: a stream without reasoning deltas has its first answer
// at its first token and no reasoning count unless its server gave one (then 0, as said).
func TestNoReasoningNoReasoningCount(t *testing.T) {
	for _, detail := range []bool{false, true} {
		s := reasoningStream{Field: "reasoning_content", Answer: 5, ChunkUsage: true, Detail: detail}
		for hc, res := range roundTripEach(t, s.body(), words) {
			if res.Status != results.StatusOK || len(res.ChunkNS) != 5 {
				t.Fatalf("%s: %s %s, %d chunks", hc, res.Status, res.Error, len(res.ChunkNS))
			}
			if res.FirstAnswerNS != res.FirstTokenNS {
				t.Errorf("%s: first answer %d, first token %d; want equal", hc, res.FirstAnswerNS, res.FirstTokenNS)
			}
			want, src := int32(results.Null), ""
			if detail {
				want, src = 0, results.SourceUsage
			}
			if res.ReasoningTokens != want || res.ReasoningTokensSource != src {
				t.Errorf("%s, detail %v: reasoning %d (%q), want %d (%q)", hc, detail, res.ReasoningTokens, res.ReasoningTokensSource, want, src)
			}
		}
	}
}

// TestOnlyReasoningNoAnswer: a stream that reasons and stops before answering has no
// first answer.
func TestOnlyReasoningNoAnswer(t *testing.T) {
	body := reasoningStream{Field: "reasoning", Reasoning: 3, ChunkUsage: true}.body()
	// The stream's last reasoning chunk carries no finish_reason: [DONE] ends it.
	for hc, res := range roundTripEach(t, body, nil) {
		if res.Status != results.StatusOK || len(res.ChunkNS) != 3 {
			t.Fatalf("%s: %s %s, %d chunks", hc, res.Status, res.Error, len(res.ChunkNS))
		}
		if res.FirstAnswerNS != results.Null || res.ReasoningTokens != 3 || res.ReasoningTokensSource != results.SourceChunkUsage {
			t.Errorf("%s: first answer %d, reasoning %d (%q); want null, 3 (chunk_usage)", hc, res.FirstAnswerNS, res.ReasoningTokens, res.ReasoningTokensSource)
		}
	}
}
