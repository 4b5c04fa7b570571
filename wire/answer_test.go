package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

// answerCases are answers that were not streamed, in each API's published shape (OpenAI's
// Completion, ChatCompletion and Response objects, Anthropic's Message, vLLM's reasoning
// fields and older error object), with what a record takes from each.
var answerCases = []struct {
	name string
	api  API
	body string
	want Chunk
}{
	{"completions", APICompletions,
		`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" a b","finish_reason":"length"},{"index":1,"text":" c","finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}}`,
		Chunk{Output: true, Answer: true, Finished: true, Text: []byte(" a b c"), Usage: true, PromptTokens: 9, HasPrompt: true,
			CompletionTokens: 3, HasCompletion: true, Cached: 8, HasCached: true}},
	{"chat reasoning", APIChat,
		`{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","reasoning_content":"think"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":4,"completion_tokens_details":{"reasoning_tokens":3}}}`,
		Chunk{Output: true, Answer: true, Finished: true, Text: []byte("Hithink"), Reasoning: []byte("think"), Usage: true, PromptTokens: 5, HasPrompt: true,
			CompletionTokens: 4, HasCompletion: true, ReasoningTokens: 3, HasReasoningTokens: true}},
	{"chat tool call", APIChat,
		`{"choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
		Chunk{Output: true, Answer: true, Finished: true, ToolCalls: []ToolCallDelta{{ID: "call_1", Type: "function", Name: "f", Arguments: "{}"}}}},
	{"chat empty", APIChat, `{"choices":[{"message":{"content":""},"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":0}}`,
		Chunk{Finished: true, Usage: true, PromptTokens: 5, HasPrompt: true, HasCompletion: true}},
	{"chat error", APIChat, `{"error":{"message":"boom","type":"server_error"}}`, Chunk{IsError: true, ErrorMessage: "boom"}},
	{"vllm old error", APICompletions, `{"object":"error","message":"bad","code":400}`, Chunk{IsError: true, ErrorMessage: "bad"}},
	{"messages", APIMessages,
		`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"Hi"},{"type":"tool_use","id":"toolu_1","name":"f","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"cache_read_input_tokens":40,"cache_creation_input_tokens":2,"output_tokens":7}}`,
		Chunk{Output: true, Answer: true, Finished: true, Text: []byte("hmmHi"), Reasoning: []byte("hmm"), ToolCalls: []ToolCallDelta{{Index: 2, ID: "toolu_1", Type: "tool_use", Name: "f"}},
			Usage: true, PromptTokens: 45, HasPrompt: true, Cached: 40, HasCached: true, CompletionTokens: 7, HasCompletion: true}},
	{"messages error", APIMessages, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		Chunk{IsError: true, ErrorMessage: "overloaded_error: Overloaded"}},
	{"responses", APIResponses,
		`{"id":"resp_1","object":"response","status":"completed","error":null,"output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"plan"}]},{"type":"message","content":[{"type":"output_text","text":"Hi"}]},{"type":"function_call","call_id":"call_9","name":"f","arguments":"{}"}],"usage":{"input_tokens":8,"input_tokens_details":{"cached_tokens":0},"output_tokens":6,"output_tokens_details":{"reasoning_tokens":2}}}`,
		Chunk{Output: true, Answer: true, Finished: true, Text: []byte("planHi"), Reasoning: []byte("plan"), ToolCalls: []ToolCallDelta{{Index: 2, ID: "call_9", Type: "function", Name: "f"}},
			Usage: true, PromptTokens: 8, HasPrompt: true, HasCached: true, CompletionTokens: 6, HasCompletion: true, ReasoningTokens: 2, HasReasoningTokens: true}},
	{"responses failed", APIResponses, `{"object":"response","status":"failed","error":{"code":"server_error","message":"boom"},"output":[]}`,
		Chunk{IsError: true, ErrorMessage: "response.failed: server_error: boom"}},
}

// TestDecodeAnswer: each API's answer gives the figures its stream would have.
func TestDecodeAnswer(t *testing.T) {
	for _, c := range answerCases {
		enc, err := NewEncoder(c.api, BackendVLLM, false)
		if err != nil {
			t.Fatal(err)
		}
		var got Chunk
		if err := enc.DecodeAnswer([]byte(c.body), &got); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !chunksEqual(got, c.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
	enc, _ := NewEncoder(APIChat, BackendVLLM, false)
	var c Chunk
	for _, bad := range []string{``, `{"choices":[`, `{"usage":{"prompt_tokens":1.5}}`, `{"choices":[{"message":{"content":[{"type":"text"}]}}]}`, `[]x`} {
		if err := enc.DecodeAnswer([]byte(bad), &c); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	emb, _ := NewEncoder(APIEmbeddings, BackendVLLM, false)
	if err := emb.DecodeAnswer([]byte(`{}`), &c); err == nil {
		t.Error("an embeddings answer decoded as a generation's")
	}
}

// FuzzDecodeAnswer holds DecodeAnswer to encoding/json: a body that is not JSON is an
// error, and a body it decodes means the same once encoding/json has decoded it and
// written it again (its spacing, escapes, key order and duplicate keys gone).
func FuzzDecodeAnswer(f *testing.F) {
	for _, c := range answerCases {
		f.Add(string(c.api), c.body)
	}
	f.Fuzz(func(t *testing.T, api, body string) {
		enc, err := NewEncoder(API(api), BackendVLLM, false)
		if err != nil || enc.Kind().Unary {
			return
		}
		var c Chunk
		err = enc.DecodeAnswer([]byte(body), &c)
		if !json.Valid([]byte(body)) {
			if err == nil {
				t.Fatalf("%s %q: not JSON, decoded", api, body)
			}
			return
		}
		var v any
		if err != nil || json.Unmarshal([]byte(body), &v) != nil {
			return
		}
		again, _ := json.Marshal(v)
		var c2 Chunk
		if err := enc.DecodeAnswer(again, &c2); err != nil {
			t.Fatalf("%s %q: rewritten as %s: %v", api, body, again, err)
		}
		// An error object without a message is kept as its JSON text, which the rewrite
		// may escape otherwise ("&" as \u0026): the same JSON value is the same message.
		c.ErrorMessage, c2.ErrorMessage = sameJSON(c.ErrorMessage), sameJSON(c2.ErrorMessage)
		if !chunksEqual(c, c2) {
			t.Fatalf("%s %q:\n got %+v\nrewritten %s: %+v", api, body, c, again, c2)
		}
	})
}

// BenchmarkDecodeAnswer: a chat answer of 1,000 tokens with usage, decoded whole.
func BenchmarkDecodeAnswer(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat(" the", 1000) + `"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":100,"total_tokens":1100,"completion_tokens":1000}}`)
	enc, _ := NewEncoder(APIChat, BackendVLLM, false)
	var c Chunk
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := enc.DecodeAnswer(body, &c); err != nil || c.CompletionTokens != 1000 {
			b.Fatal(err)
		}
	}
}

// sameJSON is s as encoding/json writes its value when s is JSON, else s.
func sameJSON(s string) string {
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}
