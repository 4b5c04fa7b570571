package wire

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
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
	`{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":400,"completion_tokens_details":{"reasoning_tokens":300}}}`,
	`{"choices":[],"usage":{"completion_tokens_details":{"reasoning_tokens":null,"accepted_prediction_tokens":0}}}`,
	`{"choices":[],"usage":{"completion_tokens_details":null}}`,
	`{"usage":{"completion_tokens_details":{"reasoning_tokens":1,"reasoning_tokens":2}}}`,
	`{"choices":[{"delta":{"reasoning_content":"a","content":"b"}}]}`,
	ollamaChunk, ollamaFinishChunk, ollamaUsageChunk,
	`null`, `[]`, `{}`, `{"a":[1,-0.5e+3,true,false,null,{"b":"c"}]}`, `{"a":01}`, `{"x":"\x01"}`,
}

func TestDecodeChunk(t *testing.T) {
	var ci Chunk
	if err := DecodeChunk([]byte(chunkSeeds[0]), &ci); err != nil || !ci.Output || ci.CompletionTokens != 1 || ci.PromptTokens != 100 || string(ci.Text) != " the" || ci.Finished {
		t.Errorf("vllm chunk: %+v, %v", ci, err)
	}
	if err := DecodeChunk([]byte(chunkSeeds[1]), &ci); err != nil || ci.Output || ci.Choices != 1 {
		t.Errorf("role chunk counts as output: %+v, %v", ci, err)
	}
	if err := DecodeChunk([]byte(chunkSeeds[6]), &ci); err != nil || !ci.IsError || ci.ErrorMessage != "boom" {
		t.Errorf("error chunk: %+v, %v", ci, err)
	}
	if err := DecodeChunk([]byte(`{"choices":[{"text":"x"`), &ci); err == nil {
		t.Errorf("cut chunk accepted")
	}
	// The fast path takes the common vLLM chunk without falling back.
	p := chunkParser{b: []byte(chunkSeeds[0])}
	if err := p.chunk(&Chunk{}); err != nil {
		t.Errorf("fast path refused a vLLM chunk: %v", err)
	}
}

// FuzzDecodeChunk: whenever the fast scanner accepts a chunk, encoding/json accepts it
// too and agrees on everything the client uses.
func FuzzDecodeChunk(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow Chunk
		p := chunkParser{b: data}
		if p.chunk(&fast) != nil {
			return
		}
		if err := decodeChunkJSON(data, &slow); err != nil {
			t.Fatalf("fast path accepted what encoding/json rejects (%v): %q", err, data)
		}
		if fast.Output != slow.Output || fast.Finished != slow.Finished || fast.Choices != slow.Choices ||
			fast.Usage != slow.Usage || fast.HasPrompt != slow.HasPrompt || fast.PromptTokens != slow.PromptTokens ||
			fast.HasCompletion != slow.HasCompletion || fast.CompletionTokens != slow.CompletionTokens || fast.IsError != slow.IsError ||
			fast.HasCached != slow.HasCached || fast.Cached != slow.Cached || fast.Answer != slow.Answer ||
			fast.HasReasoningTokens != slow.HasReasoningTokens || fast.ReasoningTokens != slow.ReasoningTokens ||
			len(fast.Text) != len(slow.Text) || string(fast.Reasoning) != string(slow.Reasoning) ||
			len(fast.ToolCalls) != len(slow.ToolCalls) {
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
		var ci Chunk
		if err := DecodeChunk([]byte(tc.chunk), &ci); err != nil || ci.Cached != tc.cached || ci.HasCached != tc.has || !ci.Usage {
			t.Errorf("%s: cached %d (said %v), err %v; want %d (said %v)", tc.name, ci.Cached, ci.HasCached, err, tc.cached, tc.has)
		}
		var slow Chunk
		if err := decodeChunkJSON([]byte(tc.chunk), &slow); err != nil || slow.Cached != tc.cached || slow.HasCached != tc.has {
			t.Errorf("%s, encoding/json: cached %d (said %v), err %v", tc.name, slow.Cached, slow.HasCached, err)
		}
	}
	// The fast path takes vLLM's shapes without falling back.
	for _, c := range []string{vllmFinalChunk, vllmNonStreaming} {
		p := chunkParser{b: []byte(c)}
		if err := p.chunk(&Chunk{}); err != nil {
			t.Errorf("fast path refused %s: %v", c, err)
		}
	}
}

// TestDecodeDeltas: reasoning and tool-call deltas land in their own fields, on the fast
// path and the exact one alike, while Text and Output stay what the client counted before
// they were decoded (reasoning is generated text; a tool call is output without text).
func TestDecodeDeltas(t *testing.T) {
	cases := []struct {
		name, chunk     string
		text, reasoning string
		calls           []ToolCallDelta
		output, fast    bool
		answer          bool
	}{
		{"content", `{"choices":[{"index":0,"delta":{"content":"Hi"}}]}`, "Hi", "", nil, true, true, true},
		{"reasoning_content (vLLM, SGLang)", `{"choices":[{"index":0,"delta":{"reasoning_content":"hm\u00e9"}}]}`, "hmé", "hmé", nil, true, true, false},
		{"reasoning", `{"choices":[{"delta":{"reasoning":"so","content":null}}]}`, "so", "so", nil, true, true, false},
		{"reasoning then content", `{"choices":[{"delta":{"reasoning_content":"a","content":"b"}}]}`, "ab", "a", nil, true, true, true},
		{"null reasoning", `{"choices":[{"delta":{"reasoning_content":null,"content":"x"}}]}`, "x", "", nil, true, true, true},
		{"tool call opens", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
			"", "", []ToolCallDelta{{Index: 0, ID: "call_1", Type: "function", Name: "get_weather"}}, true, false, true},
		{"tool call arguments", `{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"city\":"}}]}}]}`,
			"", "", []ToolCallDelta{{Index: 1, Arguments: `{"city":`}}, true, false, true},
		{"two tool calls", `{"choices":[{"delta":{"tool_calls":[{"function":{"name":"a"}},{"function":{"name":"b"}}]}}]}`,
			"", "", []ToolCallDelta{{Index: 0, Name: "a"}, {Index: 1, Name: "b"}}, true, false, true},
		{"null tool calls", `{"choices":[{"delta":{"tool_calls":null,"content":"x"}}]}`, "x", "", nil, true, true, true},
		{"empty tool calls", `{"choices":[{"delta":{"tool_calls":[]}}]}`, "", "", nil, false, false, false},
		{"odd tool calls", `{"choices":[{"delta":{"tool_calls":{"x":1}}}]}`, "", "", nil, true, false, true},
	}
	var ci Chunk // reused, as a client does
	for _, tc := range cases {
		if err := DecodeChunk([]byte(tc.chunk), &ci); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if ci.Answer != tc.answer {
			t.Errorf("%s: answer %v, want %v", tc.name, ci.Answer, tc.answer)
		}
		if string(ci.Text) != tc.text || string(ci.Reasoning) != tc.reasoning || ci.Output != tc.output ||
			fmt.Sprint(ci.ToolCalls) != fmt.Sprint(tc.calls) || len(ci.ToolCalls) != len(tc.calls) {
			t.Errorf("%s: text %q reasoning %q output %v calls %+v; want %q %q %v %+v",
				tc.name, ci.Text, ci.Reasoning, ci.Output, ci.ToolCalls, tc.text, tc.reasoning, tc.output, tc.calls)
		}
		p := chunkParser{b: []byte(tc.chunk)}
		if fastOK := p.chunk(&Chunk{}) == nil; fastOK != tc.fast {
			t.Errorf("%s: fast path took it: %v, want %v", tc.name, fastOK, tc.fast)
		}
	}
}

// TestReasoningTokens: usage.completion_tokens_details.reasoning_tokens (vLLM, SGLang,
// OpenAI) is read by the fast path and by encoding/json alike; absent or null is no count.
func TestReasoningTokens(t *testing.T) {
	for _, tc := range []struct {
		chunk string
		n     int32
		has   bool
	}{
		{`{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":400,"completion_tokens_details":{"reasoning_tokens":300}}}`, 300, true},
		{`{"choices":[],"usage":{"completion_tokens_details":{"accepted_prediction_tokens":0,"reasoning_tokens":0}}}`, 0, true},
		{`{"choices":[],"usage":{"completion_tokens_details":{"reasoning_tokens":null}}}`, 0, false},
		{`{"choices":[],"usage":{"completion_tokens_details":null}}`, 0, false},
		{`{"choices":[],"usage":{"completion_tokens":4}}`, 0, false},
	} {
		var fast, slow Chunk
		p := chunkParser{b: []byte(tc.chunk)}
		if err := p.chunk(&fast); err != nil {
			t.Fatalf("%s: fast path refused: %v", tc.chunk, err)
		}
		if err := decodeChunkJSON([]byte(tc.chunk), &slow); err != nil {
			t.Fatal(err)
		}
		for _, c := range []Chunk{fast, slow} {
			if c.ReasoningTokens != tc.n || c.HasReasoningTokens != tc.has {
				t.Errorf("%s: %d %v, want %d %v", tc.chunk, c.ReasoningTokens, c.HasReasoningTokens, tc.n, tc.has)
			}
		}
	}
}

// Ollama's /v1/completions stream (v0.17.4, stream_options.include_usage), as served:
// every chunk, the finish chunk too, carries an all-zero placeholder usage; the real
// usage comes last, with no choices.
const (
	ollamaChunk       = `{"id":"cmpl-738","object":"text_completion","created":1796432546,"choices":[{"text":" station","index":0,"finish_reason":null}],"model":"tiny","system_fingerprint":"fp_ollama","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`
	ollamaFinishChunk = `{"id":"cmpl-738","object":"text_completion","created":1796432546,"choices":[{"text":"","index":0,"finish_reason":"length"}],"model":"tiny","system_fingerprint":"fp_ollama","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}}`
	ollamaUsageChunk  = `{"id":"cmpl-738","object":"text_completion","created":1796432546,"choices":[],"model":"tiny","system_fingerprint":"fp_ollama","usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}}`
)

// TestDecodeOllamaPlaceholder: the fast path takes Ollama's chunks and reports the
// placeholder as what it is, a usage whose completion count is 0 (the client decides
// what to believe of it), and the last chunk's real usage.
func TestDecodeOllamaPlaceholder(t *testing.T) {
	cases := []struct {
		chunk              string
		output, finished   bool
		choices            int
		prompt, completion int32
	}{
		{ollamaChunk, true, false, 1, 0, 0},
		{ollamaFinishChunk, false, true, 1, 0, 0},
		{ollamaUsageChunk, false, false, 0, 4, 3},
	}
	for _, tc := range cases {
		p := chunkParser{b: []byte(tc.chunk)}
		var ci Chunk
		if err := p.chunk(&ci); err != nil {
			t.Errorf("fast path refused %s: %v", tc.chunk, err)
			continue
		}
		if ci.Output != tc.output || ci.Finished != tc.finished || ci.Choices != tc.choices || !ci.Usage ||
			!ci.HasPrompt || !ci.HasCompletion || ci.PromptTokens != tc.prompt || ci.CompletionTokens != tc.completion {
			t.Errorf("%s: %+v", tc.chunk, ci)
		}
	}
}

// TestDecodeChunkAllocs: the common chunk decodes into a reused Chunk without allocating.
func TestDecodeChunkAllocs(t *testing.T) {
	var ci Chunk
	data := []byte(chunkSeeds[0])
	DecodeChunk(data, &ci)
	if n := testing.AllocsPerRun(100, func() { DecodeChunk(data, &ci) }); n != 0 {
		t.Errorf("%v allocations per chunk", n)
	}
}

// TestHTTPErrorText: the server's message when the body is an error object, else the body,
// on one line and cut at 200 bytes.
func TestHTTPErrorText(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"error":{"message":"model not found","code":404}}`, "HTTP 400: model not found"},
		{`{"object":"error","message":"too long","code":400}`, "HTTP 400: too long"},
		{`{"error":"plain"}`, "HTTP 400: plain"},
		{"not json\n  at all", "HTTP 400: not json at all"},
		{strings.Repeat("x", 300), "HTTP 400: " + strings.Repeat("x", 200) + "..."},
	} {
		if got := HTTPErrorText(400, []byte(tc.body)); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.body, got, tc.want)
		}
	}
	if Encoded("") || Encoded(" Identity ") || !Encoded("gzip") {
		t.Error("Encoded")
	}
}

// TestChunkReset: reset zeroes every field but the slices' room, whatever fields Chunk has.
func TestChunkReset(t *testing.T) {
	var ci Chunk
	v := reflect.ValueOf(&ci).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int32:
			f.SetInt(7)
		case reflect.String:
			f.SetString("x")
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 4))
		default:
			t.Fatalf("field %s of kind %s: teach this test to set it", v.Type().Field(i).Name, f.Kind())
		}
	}
	ci.reset()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() == reflect.Slice {
			if f.Len() != 0 || f.Cap() != 4 {
				t.Errorf("%s: len %d cap %d, want 0 and its room (4)", v.Type().Field(i).Name, f.Len(), f.Cap())
			}
		} else if !f.IsZero() {
			t.Errorf("%s not reset: %v", v.Type().Field(i).Name, f)
		}
	}
}
