package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// The bodies follow OpenAI's Responses API reference (POST /responses: model, input,
// max_output_tokens, stream, store, tools); the length-forcing fields are those each
// engine's ResponsesRequest passes to its sampler (responsesLengthFields).
func TestResponsesBody(t *testing.T) {
	for _, tc := range []struct {
		backend Backend
		want    string
		forces  bool
		fields  string
	}{
		{BackendVLLM, `{"model":"m","stream":true,"temperature":0,"ignore_eos":true,"max_output_tokens":3,"store":false,"input":"say \"hi\""}`, true, "max_output_tokens and ignore_eos"},
		{BackendSGLang, `{"model":"m","stream":true,"temperature":0,"max_output_tokens":3,"store":false,"input":"say \"hi\""}`, false, "max_output_tokens"},
		{BackendLlamaCPP, `{"model":"m","stream":true,"temperature":0,"max_output_tokens":3,"store":false,"input":"say \"hi\""}`, false, "max_output_tokens"},
		{BackendOpenAI, `{"model":"m","stream":true,"temperature":0,"max_output_tokens":3,"store":false,"input":"say \"hi\""}`, false, "max_output_tokens"},
	} {
		e, err := NewEncoder(APIResponses, tc.backend, false)
		if err != nil {
			t.Fatal(err)
		}
		got := e.AppendBody(nil, e.AppendStart(nil, "m"), []byte(`say "hi"`), 3)
		if string(got) != tc.want {
			t.Errorf("%s body\n got %s\nwant %s", tc.backend, got, tc.want)
		}
		if !json.Valid(got) {
			t.Errorf("%s body is not JSON", tc.backend)
		}
		if e.ForcesLength() != tc.forces || e.LengthFieldNames() != tc.fields {
			t.Errorf("%s: forces %v, fields %q", tc.backend, e.ForcesLength(), e.LengthFieldNames())
		}
	}
	// Chat keeps every field of its backend.
	if e, _ := NewEncoder(APIChat, BackendVLLM, false); !e.ForcesLength() || e.LengthFieldNames() != "max_tokens, min_tokens and ignore_eos" {
		t.Errorf("chat vllm: forces %v, fields %q", e.ForcesLength(), e.LengthFieldNames())
	}
	if e, _ := NewEncoder(APIChat, BackendLlamaCPP, false); e.LengthFieldNames() != "max_tokens, n_predict and ignore_eos" {
		t.Errorf("chat llamacpp: fields %q", e.LengthFieldNames())
	}

	// A conversation is a list of input messages; its shared context goes in place.
	e, _ := NewEncoder(APIResponses, BackendVLLM, false)
	msgs := `{"role":"user","content":"a"},{"role":"assistant","content":"b"}`
	got := e.AppendMessagesBody(nil, e.AppendStart(nil, "m"), []byte(msgs), 2)
	if !strings.HasSuffix(string(got), `"store":false,"input":[`+msgs+`]}`) || !json.Valid(got) {
		t.Errorf("messages body %s", got)
	}
	body, at := e.AppendContextBody(nil, e.AppendStart(nil, "m"), 2, []byte(`,{"role":"user","content":"c"}`))
	sent := string(body[:at]) + `{"role":"user","content":"a"}` + string(body[at:])
	if !json.Valid([]byte(sent)) || !strings.Contains(sent, `"input":[{"role":"user","content":"a"},{"role":"user","content":"c"}]`) {
		t.Errorf("context body %s", sent)
	}
	// One function tool, flat as the Responses API has it.
	tools := string(responsesKind.AppendTools([]byte(`{"a":1`), []byte(`say \"x\"`))) + "}"
	var v struct {
		Tools []struct {
			Type, Name, Description string
			Parameters              map[string]any
		}
	}
	if err := json.Unmarshal([]byte(tools), &v); err != nil || len(v.Tools) != 1 || v.Tools[0].Type != "function" ||
		v.Tools[0].Name != "tool_0" || v.Tools[0].Description != `say "x"` || v.Tools[0].Parameters["type"] != "object" {
		t.Errorf("tools %s: %+v %v", tools, v, err)
	}
}

// responsesSeeds are events in the shapes of OpenAI's streaming events reference, vLLM's,
// SGLang's and Ollama's (wire/testdata/responses/SOURCES.md), and some that must fall
// back or fail.
var responsesSeeds = []string{
	`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hello","sequence_number":5}`,
	`{"content_index":0,"delta":" world\n\"q\"","item_id":"msg_1","logprobs":[],"output_index":1,"sequence_number":9,"type":"response.output_text.delta"}`,
	`{"type":"response.reasoning_text.delta","item_id":"rs_1","output_index":0,"content_index":0,"delta":"think","sequence_number":3}`,
	`{"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"sum\u00e9"}`,
	`{"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"{\"a\":"}`,
	`{"type":"response.output_item.added","output_index":1,"item":{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_9","name":"tool_0","arguments":""}}`,
	`{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","content":[]}}`,
	`{"type":"response.created","response":{"id":"resp_1","status":"in_progress","usage":null,"output":[]},"sequence_number":0}`,
	`{"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":8},"output_tokens":30,"output_tokens_details":{"reasoning_tokens":20},"total_tokens":42}}}`,
	`{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":5,"output_tokens":16}}}`,
	`{"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"boom"}}}`,
	`{"type":"error","code":"rate_limit_exceeded","message":"slow down","param":null,"sequence_number":2}`,
	`{"type":"response.output_text.done","text":"Hello world","sequence_number":10}`,
	`{"type":"response.bogus.delta","delta":"x"}`,
	`{"delta":"x"}`,
	`{"type":"response.output_text.delta","delta":"a","delta":"b"}`,
	`{"Type":"response.output_text.delta","delta":"x"}`,
	`{"type":"response.output_text.delta","delta":"\ud83d\ude00 \\ \/"}`,
	`{"type":"response.output_text.delta","delta":null}`,
	`{"type":"response.output_text.delta","delta":"trunc`,
	`{"content_index":0,"item_id":"rs_1","output_index":0,"part":{"text":"","type":"reasoning_text"},"sequence_number":3,"type":"response.reasoning_part.added"}`,
}

func TestDecodeResponses(t *testing.T) {
	for _, tc := range []struct {
		data string
		want Chunk
		err  string
	}{
		{data: responsesSeeds[0], want: Chunk{Output: true, Answer: true, Choices: 1, Text: []byte("Hello")}},
		{data: responsesSeeds[1], want: Chunk{Output: true, Answer: true, Choices: 1, Text: []byte(" world\n\"q\"")}},
		{data: responsesSeeds[2], want: Chunk{Output: true, Choices: 1, Text: []byte("think"), Reasoning: []byte("think")}},
		{data: responsesSeeds[3], want: Chunk{Output: true, Choices: 1, Text: []byte("sumé"), Reasoning: []byte("sumé")}},
		{data: responsesSeeds[4], want: Chunk{Output: true, Answer: true, Choices: 1, ToolCalls: []ToolCallDelta{{Index: 1, Arguments: `{"a":`}}}},
		{data: responsesSeeds[5], want: Chunk{Output: true, Answer: true, Choices: 1, ToolCalls: []ToolCallDelta{{Index: 1, ID: "call_9", Type: "function", Name: "tool_0"}}}},
		{data: responsesSeeds[6]},
		{data: responsesSeeds[7]},
		{data: responsesSeeds[8], want: Chunk{Finished: true, Usage: true, HasPrompt: true, PromptTokens: 12, HasCompletion: true, CompletionTokens: 30,
			HasCached: true, Cached: 8, HasReasoningTokens: true, ReasoningTokens: 20}},
		{data: responsesSeeds[9], want: Chunk{Finished: true, Usage: true, HasPrompt: true, PromptTokens: 5, HasCompletion: true, CompletionTokens: 16}},
		{data: responsesSeeds[10], want: Chunk{IsError: true, ErrorMessage: "response.failed: server_error: boom"}},
		{data: responsesSeeds[11], want: Chunk{IsError: true, ErrorMessage: "rate_limit_exceeded: slow down"}},
		{data: responsesSeeds[12]},
		{data: responsesSeeds[13], err: `unknown event type "response.bogus.delta"`},
		{data: responsesSeeds[14], err: `event without a "type"`},
		{data: responsesSeeds[15], want: Chunk{Output: true, Answer: true, Choices: 1, Text: []byte("b")}},
		{data: responsesSeeds[16], want: Chunk{Output: true, Answer: true, Choices: 1, Text: []byte("x")}},
		{data: responsesSeeds[17], want: Chunk{Output: true, Answer: true, Choices: 1, Text: []byte("😀 \\ /")}},
		{data: responsesSeeds[18]},
		{data: responsesSeeds[19], err: "unexpected end of JSON input"},
		{data: responsesSeeds[20]}, // vLLM's own event: known, carries nothing
	} {
		var c Chunk
		c.Text = []byte("stale") // a reused chunk starts empty
		err := DecodeResponses([]byte(tc.data), &c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.data, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.data, err)
			continue
		}
		if !chunksEqual(c, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.data, c, tc.want)
		}
	}
}

// chunksEqual compares every field of two chunks, an empty slice equal to a nil one.
func chunksEqual(a, b Chunk) bool {
	norm := func(c Chunk) Chunk {
		if len(c.Text) == 0 {
			c.Text = nil
		}
		if len(c.Reasoning) == 0 {
			c.Reasoning = nil
		}
		if len(c.ToolCalls) == 0 {
			c.ToolCalls = nil
		}
		return c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// TestDecodeResponsesAllocs: the deltas, nearly every event of a stream, decode into a
// reused chunk without allocating, escapes included; so do a stream's start and stop
// (response.created, a message's output_item.added, response.completed with its usage).
func TestDecodeResponsesAllocs(t *testing.T) {
	for _, s := range []string{responsesSeeds[0], responsesSeeds[1], responsesSeeds[2], responsesSeeds[6], responsesSeeds[7], responsesSeeds[8], responsesSeeds[9], `{"type":"response.content_part.added","item_id":"m","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`} {
		var c Chunk
		data := []byte(s)
		if err := DecodeResponses(data, &c); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() { DecodeResponses(data, &c) }); n != 0 {
			t.Errorf("%s: %v allocations per event", s, n)
		}
	}
}

// FuzzDecodeResponses: whenever the scanner accepts an event, encoding/json (the
// reference decoder) accepts it too and agrees on every field of the chunk.
func FuzzDecodeResponses(f *testing.F) {
	for _, s := range responsesSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, slow Chunk
		p := chunkParser{b: data}
		if p.responsesEvent(&fast) != nil {
			return
		}
		if err := decodeResponsesJSON(data, &slow); err != nil {
			t.Fatalf("scanner accepted what encoding/json rejects (%v): %q", err, data)
		}
		if !chunksEqual(fast, slow) {
			t.Fatalf("disagree on %q:\nscanner %+v\njson    %+v", data, fast, slow)
		}
	})
}
