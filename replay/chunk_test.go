package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
)

var chunkSeeds = []string{
	`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":{"prompt_tokens":100,"total_tokens":101,"completion_tokens":1}}`,
	`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"hm\u00e9\n"}}]}`,
	`{"choices":[{"delta":{"reasoning":"x"},"finish_reason":"length"}],"usage":null}`,
	`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5}}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`,
	`{"error":{"message":"boom","code":500}}`,
	`{"object":"error","message":"overloaded","code":503}`,
	`{"Choices":[{"Text":"x"}]}`,
	`{"choices":[{"text":"a"}],"choices":[{"text":"b"}]}`,
	`{"choices":[{"text":5}]}`,
	`{"usage":{"prompt_tokens":1.5}}`,
	`{"usage":{"prompt_tokens":99999999999}}`,
	`{"choices":[{"text":"\ud83d\ude00 \ud800"}]}`,
	`{"choices":[null,{"text":"y"}]} `,
	`{"choices":[],"usage":{"prompt_tokens":24,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":16}}}`,
	`{"choices":[],"usage":{"prompt_tokens":24,"prompt_tokens_details":{"audio_tokens":null,"cached_tokens":null}}}`,
	`{"choices":[],"usage":{"prompt_tokens":24,"prompt_tokens_details":null}}`,
	`{"usage":{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":2}}}`,
	`{"usage":{"prompt_tokens_details":{"cached_tokens":"3"}}}`,
	`null`, `[]`, `{}`, `{"a":[1,-0.5e+3,true,false,null,{"b":"c"}]}`, `{"a":01}`, `{"x":"\x01"}`,
}

func TestParseChunk(t *testing.T) {
	var ci chunkInfo
	if err := parseChunk([]byte(chunkSeeds[0]), &ci); err != nil || !ci.output || ci.compl != 1 || ci.prompt != 100 || string(ci.text) != " the" || ci.finished {
		t.Errorf("vllm chunk: %+v, %v", ci, err)
	}
	if err := parseChunk([]byte(chunkSeeds[1]), &ci); err != nil || ci.output || ci.choices != 1 {
		t.Errorf("role chunk counts as output: %+v, %v", ci, err)
	}
	if err := parseChunk([]byte(chunkSeeds[6]), &ci); err != nil || !ci.isErr || ci.errMsg != "boom" {
		t.Errorf("error chunk: %+v, %v", ci, err)
	}
	if err := parseChunk([]byte(`{"choices":[{"text":"x"`), &ci); err == nil {
		t.Errorf("cut chunk accepted")
	}
	// The fast path takes the common vLLM chunk without falling back.
	p := chunkParser{b: []byte(chunkSeeds[0])}
	if err := p.chunk(&chunkInfo{}); err != nil {
		t.Errorf("fast path refused a vLLM chunk: %v", err)
	}
}

// FuzzParseChunk: whenever the fast scanner accepts a chunk, encoding/json accepts it
// too and agrees on everything the client uses.
func FuzzParseChunk(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow chunkInfo
		p := chunkParser{b: data}
		if p.chunk(&fast) != nil {
			return
		}
		if err := parseChunkJSON(data, &slow); err != nil {
			t.Fatalf("fast path accepted what encoding/json rejects (%v): %q", err, data)
		}
		if fast.output != slow.output || fast.finished != slow.finished || fast.choices != slow.choices ||
			fast.usage != slow.usage || fast.hasPrompt != slow.hasPrompt || fast.prompt != slow.prompt ||
			fast.hasCompl != slow.hasCompl || fast.compl != slow.compl || fast.isErr != slow.isErr ||
			fast.hasCached != slow.hasCached || fast.cached != slow.cached ||
			len(fast.text) != len(slow.text) {
			t.Fatalf("disagree on %q:\nfast %+v\nslow %+v", data, fast, slow)
		}
	})
}

// vLLM's usage with --enable-prompt-tokens-details (vllm-project/vllm#18149,
// PromptTokenUsageInfo): the last chunk of a stream (choices empty, include_usage) and the
// body of a non-streaming response carry the same usage object.
const (
	vllmFinalChunk = `{"id":"cmpl-0f3c","object":"text_completion","created":1747236359,"model":"Qwen/Qwen3-8B","choices":[],` +
		`"usage":{"prompt_tokens":24,"total_tokens":97,"completion_tokens":73,"prompt_tokens_details":{"cached_tokens":16}}}`
	vllmNonStreaming = `{"id":"chatcmpl-906b","object":"chat.completion","created":1747236359,"model":"Qwen/Qwen3-8B",` +
		`"choices":[{"index":0,"message":{"role":"assistant","reasoning_content":null,"content":"Hello!","tool_calls":[]},"logprobs":null,"finish_reason":"length","stop_reason":null}],` +
		`"usage":{"prompt_tokens":24,"total_tokens":280,"completion_tokens":256,"prompt_tokens_details":{"cached_tokens":16}},"prompt_logprobs":null}`
)

// TestParseCachedTokens: usage.prompt_tokens_details.cached_tokens is read by the fast
// path and by encoding/json alike; absent, null or a null count is not a count.
func TestParseCachedTokens(t *testing.T) {
	cases := []struct {
		name   string
		chunk  string
		cached int32
		has    bool
	}{
		{"vllm final stream chunk", vllmFinalChunk, 16, true},
		{"vllm non-streaming body", vllmNonStreaming, 16, true},
		{"openai zero", `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0}}}`, 0, true},
		{"details null (vllm-ascend)", `{"choices":[],"usage":{"prompt_tokens":25,"completion_tokens":1,"prompt_tokens_details":null}}`, 0, false},
		{"count null", `{"choices":[],"usage":{"prompt_tokens":25,"prompt_tokens_details":{"cached_tokens":null}}}`, 0, false},
		{"absent", chunkSeeds[4], 0, false},
	}
	for _, tc := range cases {
		var ci chunkInfo
		if err := parseChunk([]byte(tc.chunk), &ci); err != nil || ci.cached != tc.cached || ci.hasCached != tc.has || !ci.usage {
			t.Errorf("%s: cached %d (said %v), err %v; want %d (said %v)", tc.name, ci.cached, ci.hasCached, err, tc.cached, tc.has)
		}
		var slow chunkInfo
		if err := parseChunkJSON([]byte(tc.chunk), &slow); err != nil || slow.cached != tc.cached || slow.hasCached != tc.has {
			t.Errorf("%s, encoding/json: cached %d (said %v), err %v", tc.name, slow.cached, slow.hasCached, err)
		}
	}
	// The fast path takes vLLM's shapes without falling back.
	for _, c := range []string{vllmFinalChunk, vllmNonStreaming} {
		p := chunkParser{b: []byte(c)}
		if err := p.chunk(&chunkInfo{}); err != nil {
			t.Errorf("fast path refused %s: %v", c, err)
		}
	}
}

// cachedServer streams like vLLM with --enable-prompt-tokens-details: one chunk per token,
// then the usage chunk, whose prompt_tokens_details.cached_tokens is half the prompt's
// words for an even count and which has no prompt_tokens_details for an odd one.
func cachedServer(w http.ResponseWriter, r *http.Request) {
	var b reqBody
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &b); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, 400)
		return
	}
	n := len(strings.Fields(b.Prompt))
	w.Header().Set("Content-Type", "text/event-stream")
	for i := 1; i <= b.MaxTokens; i++ {
		fmt.Fprint(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" tok\",\"finish_reason\":null}]}\n\n")
	}
	details := ""
	if n%2 == 0 {
		details = fmt.Sprintf(`,"prompt_tokens_details":{"cached_tokens":%d}`, n/2)
	}
	fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d,\"completion_tokens\":%d%s}}\n\ndata: [DONE]\n\n",
		n, n+b.MaxTokens, b.MaxTokens, details)
}

// TestCachedTokensBothClients: both HTTP clients record the server's cached_tokens in
// PromptTokensCached, and null when the server did not say.
func TestCachedTokensBothClients(t *testing.T) {
	base := startServer(t, http.HandlerFunc(cachedServer))
	for _, hc := range []string{HTTPClientRaw, HTTPClientNetHTTP} {
		c := newTestClient(t, base, func(o *ClientOptions) { o.HTTPClient = hc })
		reqs := uniformTrace(6, time.Millisecond, 0, 3)
		for i := range reqs {
			reqs[i].PromptTokens = int32(10 + i)
		}
		_, res, _ := runTrace(t, context.Background(), c, reqs, nil)
		if len(res) != len(reqs) {
			t.Fatalf("%s: %d results", hc, len(res))
		}
		for _, r := range res {
			want := int32(results.Null)
			if r.PromptTokens%2 == 0 {
				want = r.PromptTokens / 2
			}
			if r.Status != results.StatusOK || r.PromptTokensCached != want {
				t.Errorf("%s: request %d (%d prompt tokens): %s, cached %d, want %d", hc, r.RequestID, r.PromptTokens, r.Status, r.PromptTokensCached, want)
			}
		}
	}
}
