package wire

import (
	"reflect"
	"strings"
	"testing"
)

// TestMessagesBody: the request as Anthropic's reference defines it (model, messages,
// max_tokens, stream), with no stream_options (the usage streams unasked) and, whatever the
// backend, none of the length-forcing fields that the engines' /v1/messages routes drop.
func TestMessagesBody(t *testing.T) {
	for _, b := range []Backend{BackendVLLM, BackendSGLang, BackendLlamaCPP, BackendTGI, BackendOpenAI} {
		e, err := NewEncoder(APIMessages, b, false)
		if err != nil {
			t.Fatal(err)
		}
		body := e.AppendBody(nil, e.AppendStart(nil, "m"), []byte("say \"hi\""), 7)
		want := `{"model":"m","stream":true,"temperature":0,"max_tokens":7,"messages":[{"role":"user","content":"say \"hi\""}]}`
		if string(body) != want {
			t.Errorf("%s body\n got %s\nwant %s", b, body, want)
		}
		if e.ForcesLength() || e.LengthFieldNames() != "max_tokens" {
			t.Errorf("%s: the messages API forces lengths (%v) with %s", b, e.ForcesLength(), e.LengthFieldNames())
		}
	}
	k, _ := Lookup(APIMessages)
	if k.Path != "/messages" || k.KeyHeader != "x-api-key" || k.Headers["anthropic-version"] != "2023-06-01" || !k.StreamsUsage || k.StopName() != "message_stop" {
		t.Errorf("kind %+v", k)
	}
	// The chat kind still forces lengths with vLLM: capOnly is the kind's alone.
	if e, _ := NewEncoder(APIChat, BackendVLLM, false); !e.ForcesLength() {
		t.Error("chat with vllm no longer forces lengths")
	}
}

// TestMessagesConversation: a leading system message becomes the top-level system field
// (the API takes only user and assistant messages); other messages pass as they are, and a
// shared context's mark is found where it was put.
func TestMessagesConversation(t *testing.T) {
	e, _ := NewEncoder(APIMessages, BackendVLLM, false)
	start := e.AppendStart(nil, "m")
	cases := []struct{ msgs, want string }{
		{`{"role":"system","content":"be \"brief\""},{"role":"user","content":"hi"}`,
			`,"system":"be \"brief\"","messages":[{"role":"user","content":"hi"}]}`},
		{`{"role":"system","content":"only"}`, `,"system":"only","messages":[]}`},
		{`{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}`,
			`,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`},
		// Not the form llmreplay builds: passed on as it is, for the server to judge.
		{`{"role":"system","content":[{"type":"text","text":"x"}]}`, `,"messages":[{"role":"system","content":[{"type":"text","text":"x"}]}]}`},
	}
	for _, tc := range cases {
		got := string(e.AppendMessagesBody(nil, start, []byte(tc.msgs), 3))
		if !strings.HasSuffix(got, tc.want) || !strings.HasPrefix(got, `{"model":"m","stream":true,"temperature":0,"max_tokens":3`) {
			t.Errorf("%s:\n got %s\nwant ...%s", tc.msgs, got, tc.want)
		}
	}
	tail := []byte(`,{"role":"user","content":"next"}`)
	body, at := e.AppendContextBody(nil, start, 3, tail)
	ctx := `{"role":"user","content":"ctx"}`
	if got := string(body[:at]) + ctx + string(body[at:]); !strings.HasSuffix(got, `"messages":[`+ctx+string(tail)+`]}`) {
		t.Errorf("context body %s", got)
	}
}

func TestMessagesTools(t *testing.T) {
	k, _ := Lookup(APIMessages)
	got := string(k.AppendTools(nil, []byte(`look \"up\"`)))
	want := `,"tools":[{"name":"tool_0","description":"look \"up\"","input_schema":{"type":"object","properties":{}}}]`
	if got != want {
		t.Errorf("tools\n got %s\nwant %s", got, want)
	}
}

// messagesSeeds are events from Anthropic's streaming reference, the engines' shapes, and
// the odd ones the scanner must leave to encoding/json.
var messagesSeeds = []string{
	`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":3,"cache_read_input_tokens":10,"output_tokens":1}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}`,
	`{"type":"content_block_start","index":2,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3"}}`,
	`{"type":"ping"}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me solve"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hello"}}`,
	`{"type":"content_block_delta","delta":{"type":"text_delta","text":" w\u00f6rld\n"},"index":1}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"char_location"}}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":""}}`,
	`{"type":"content_block_delta","index":1,"delta":{"text":"late type","type":"text_delta"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"shout_delta","text":"HI"}}`,
	`{"type":"content_block_delta","index":1}`,
	`{"type":"content_block_delta","index":1.5,"delta":{"type":"text_delta","text":"x"}}`,
	`{"type":"content_block_delta","index":"1","delta":{"type":"text_delta","text":"x"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"a","text":"b"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"\ud800"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":5}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":null}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"},"extra":true}`,
	`{"Type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"x"}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"content_block_stop","index":0,"delta":{"type":"text_delta","text":"x"}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`,
	`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"input_tokens":24,"output_tokens":73,"cache_read_input_tokens":16}}`,
	`{"type":"message_stop"}`,
	`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
	`{"type":"message_pause"}`,
	`{}`, `null`, `[]`, `{"type":"ping"} x`, `{"type":"ping","type":"message_stop"}`, `{"type":"\u0070ing"}`,
	`{"type":"message_start","message":{"id":"msg_5b1e","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0}}}`,
}

// TestDecodeMessages: what each event of the reference says, on both paths.
func TestDecodeMessages(t *testing.T) {
	type want struct {
		output, answer, finished, usage, isErr bool
		choices                                int
		text, reasoning, errMsg                string
		prompt, compl, cached                  int32
		hasPrompt, hasCompl, hasCached         bool
		calls                                  []ToolCallDelta
	}
	cases := []struct {
		name, event string
		want        want
	}{
		{"message_start: engines' input_tokens is the prompt; output_tokens is a placeholder", messagesSeeds[0],
			want{usage: true, prompt: 25, hasPrompt: true, cached: 10, hasCached: true}},
		{"message_start of zeros (SGLang's, before its usage): nothing said of the prompt", messagesSeeds[38], want{usage: true}},
		{"thinking start", messagesSeeds[1], want{choices: 1}},
		{"tool_use start names a call", messagesSeeds[3], want{choices: 1, output: true, answer: true,
			calls: []ToolCallDelta{{Index: 1, ID: "toolu_01", Type: "tool_use", Name: "get_weather"}}}},
		{"redacted thinking", messagesSeeds[4], want{choices: 1}},
		{"ping", messagesSeeds[5], want{}},
		{"thinking delta", messagesSeeds[6], want{choices: 1, output: true, text: "Let me solve", reasoning: "Let me solve"}},
		{"signature delta", messagesSeeds[7], want{choices: 1}},
		{"text delta", messagesSeeds[8], want{choices: 1, output: true, answer: true, text: "Hello"}},
		{"escaped text, index last (vLLM's order)", messagesSeeds[9], want{choices: 1, output: true, answer: true, text: " wörld\n"}},
		{"tool arguments", messagesSeeds[10], want{choices: 1, output: true, answer: true,
			calls: []ToolCallDelta{{Index: 1, Arguments: `{"location": "San Fra`}}}},
		{"empty tool arguments", messagesSeeds[11], want{choices: 1}},
		{"citations", messagesSeeds[12], want{choices: 1}},
		{"empty text", messagesSeeds[13], want{choices: 1}},
		{"block stop", messagesSeeds[25], want{choices: 1}},
		{"message_delta (Anthropic's)", messagesSeeds[27], want{usage: true, compl: 15, hasCompl: true}},
		{"message_delta (SGLang's)", messagesSeeds[28], want{usage: true, compl: 73, hasCompl: true, prompt: 24, hasPrompt: true, cached: 16, hasCached: true}},
		{"message_stop", messagesSeeds[29], want{finished: true}},
		{"error", messagesSeeds[30], want{isErr: true, errMsg: "overloaded_error: Overloaded"}},
	}
	for _, tc := range cases {
		for _, path := range []string{"DecodeMessages", "encoding/json"} {
			var c Chunk
			var err error
			if path == "DecodeMessages" {
				err = DecodeMessages([]byte(tc.event), &c)
			} else {
				err = decodeMessagesJSON([]byte(tc.event), &c, false)
			}
			got := want{c.Output, c.Answer, c.Finished, c.Usage, c.IsError, c.Choices, string(c.Text), string(c.Reasoning), c.ErrorMessage,
				c.PromptTokens, c.CompletionTokens, c.Cached, c.HasPrompt, c.HasCompletion, c.HasCached, c.ToolCalls}
			if len(got.calls) == 0 {
				got.calls = nil
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s, %s: %v\n got %+v\nwant %+v", tc.name, path, err, got, tc.want)
			}
		}
	}
	// Anthropic's own reading (every backend but sglang): input_tokens is the uncached part.
	var c Chunk
	if err := decodeMessages([]byte(messagesSeeds[0]), &c, true); err != nil || c.PromptTokens != 25+3+10 || c.Cached != 10 {
		t.Errorf("uncached reading: prompt %d cached %d, %v", c.PromptTokens, c.Cached, err)
	}
	e, _ := NewEncoder(APIMessages, BackendOpenAI, false)
	if err := e.Decode([]byte(messagesSeeds[0]), &c); err != nil || c.PromptTokens != 38 {
		t.Errorf("--backend openai: prompt %d, want input_tokens plus the cache reads and writes (38), %v", c.PromptTokens, err)
	}
	e, _ = NewEncoder(APIMessages, BackendVLLM, false)
	if err := e.Decode([]byte(messagesSeeds[0]), &c); err != nil || c.PromptTokens != 38 {
		t.Errorf("--backend vllm: prompt %d, want input_tokens plus the cache reads and writes (38), %v", c.PromptTokens, err)
	}
	e, _ = NewEncoder(APIMessages, BackendSGLang, false)
	if err := e.Decode([]byte(messagesSeeds[0]), &c); err != nil || c.PromptTokens != 25 {
		t.Errorf("--backend sglang: prompt %d, want input_tokens alone (25), %v", c.PromptTokens, err)
	}
}

// TestDecodeMessagesErrors: events the reference does not define, and broken ones, are
// errors that name what was wrong.
func TestDecodeMessagesErrors(t *testing.T) {
	for event, want := range map[string]string{
		messagesSeeds[31]: `unknown event type "message_pause"`,
		messagesSeeds[15]: `unknown delta type "shout_delta"`,
		messagesSeeds[16]: "without a delta",
		`{"index":0}`:     "event without a type",
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"cut`: "unexpected end of JSON input",
		messagesSeeds[35]: "invalid character",
	} {
		var c Chunk
		if err := DecodeMessages([]byte(event), &c); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", event, err, want)
		}
	}
}

// TestMessagesHTTPError: an error body in the API's shape gives its message.
func TestMessagesHTTPError(t *testing.T) {
	body := `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`
	if got := HTTPErrorText(400, []byte(body)); got != "HTTP 400: max_tokens: Field required" {
		t.Errorf("HTTPErrorText: %q", got)
	}
}

// TestDecodeMessagesScanner: the scanner takes the events of the reference's and the
// engines' shapes itself (all but tool calls and errors), and leaves the rest to
// encoding/json.
func TestDecodeMessagesScanner(t *testing.T) {
	for i, accept := range map[int]bool{0: true, 1: true, 2: true, 5: true, 6: true, 7: true, 8: true, 9: true, 13: true, 14: true,
		25: true, 26: true, 27: true, 28: true, 29: true,
		3: false, 4: false, 10: false, 12: false, 15: false, 17: false, 19: false, 22: false, 23: false, 24: false, 30: false, 36: false, 37: false} {
		p := chunkParser{b: []byte(messagesSeeds[i])}
		if err := p.messagesEvent(&Chunk{}, false); (err == nil) != accept {
			t.Errorf("scanner on %s: %v, want accepted %v", messagesSeeds[i], err, accept)
		}
	}
}

func TestDecodeMessagesAllocs(t *testing.T) {
	var c Chunk
	for _, i := range []int{0, 1, 6, 7, 8, 25, 27, 29} {
		data := []byte(messagesSeeds[i])
		DecodeMessages(data, &c)
		if n := testing.AllocsPerRun(100, func() { DecodeMessages(data, &c) }); n != 0 {
			t.Errorf("%s: %v allocations per event", data, n)
		}
	}
}

// FuzzDecodeMessages: whenever the scanner accepts an event, encoding/json accepts it too
// and agrees on every field of the Chunk.
func FuzzDecodeMessages(f *testing.F) {
	for _, s := range messagesSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, uncached := range []bool{false, true} {
			var fast, slow Chunk
			p := chunkParser{b: data}
			if p.messagesEvent(&fast, uncached) != nil {
				return
			}
			if err := decodeMessagesJSON(data, &slow, uncached); err != nil {
				t.Fatalf("scanner accepted what encoding/json rejects (%v): %q", err, data)
			}
			normChunk(&fast)
			normChunk(&slow)
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("disagree on %q (uncached %v):\nscanner %+v\njson    %+v", data, uncached, fast, slow)
			}
		}
	})
}

// normChunk makes empty slices nil, so that DeepEqual compares contents.
func normChunk(c *Chunk) {
	if len(c.Text) == 0 {
		c.Text = nil
	}
	if len(c.Reasoning) == 0 {
		c.Reasoning = nil
	}
	if len(c.ToolCalls) == 0 {
		c.ToolCalls = nil
	}
}
