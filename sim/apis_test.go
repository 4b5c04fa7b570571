package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/tokenize"
)

// The event shapes below are written from the public references and the engine's source,
// not from the sim: Anthropic's Messages streaming reference
// (https://docs.anthropic.com/en/api/messages-streaming) as vLLM serves it
// (vllm/entrypoints/anthropic/protocol.py, AnthropicStreamEvent and AnthropicUsage), and
// OpenAI's Responses streaming reference (https://platform.openai.com/docs/api-reference/responses-streaming)
// as vLLM serves it (vllm/entrypoints/openai/responses/protocol.py, ResponseUsage).

type anthUsage struct {
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
}

type anthEvent struct {
	Type    string `json:"type"`
	Index   *int   `json:"index"`
	Message *struct {
		ID    string     `json:"id"`
		Model string     `json:"model"`
		Usage *anthUsage `json:"usage"`
	} `json:"message"`
	ContentBlock *struct {
		Type string `json:"type"`
	} `json:"content_block"`
	Delta *struct {
		Type       string  `json:"type"`
		Text       *string `json:"text"`
		Thinking   *string `json:"thinking"`
		Signature  *string `json:"signature"`
		StopReason *string `json:"stop_reason"`
	} `json:"delta"`
	Usage *anthUsage `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

type respUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type respObject struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Status            string `json:"status"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Output []struct {
		Type    string `json:"type"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"output"`
	Usage *respUsage `json:"usage"`
}

type respEvent struct {
	Type           string      `json:"type"`
	SequenceNumber *int        `json:"sequence_number"`
	OutputIndex    *int        `json:"output_index"`
	ItemID         string      `json:"item_id"`
	Delta          *string     `json:"delta"`
	Text           *string     `json:"text"`
	Response       *respObject `json:"response"`
	Item           *struct {
		Type string `json:"type"`
	} `json:"item"`
}

// sseEvent is one event of a stream: its event name ("" when none) and its data.
type sseEvent struct{ name, data string }

// readSSE splits an SSE body into events, failing on a line that is neither an event
// name, data nor the blank line between events.
func readSSE(t *testing.T, body io.Reader) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" || cur.name != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[len("data: "):]
		default:
			t.Fatalf("line %q is not SSE", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// postRaw sends body to url and returns the response, its body read.
func postRaw(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// streamed is what a client decoded of one stream: the reasoning and answer text, how
// many deltas carried each, and the usage's counts (-1 when absent).
type streamed struct {
	reasoning, answer             string
	reasoningDeltas, answerDeltas int
	prompt, cached, output        int
	usageReasoning                int
	stop                          string
}

func countTokens(t *testing.T, s string) int {
	t.Helper()
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	return enc.Count(s)
}

// decodeMessages decodes a Messages stream event by event, checking the grammar of the
// reference: message_start, then blocks (start, deltas, stop; a thinking block's
// signature before its stop), message_delta, message_stop, and every event's name equal
// to its data's type.
func decodeMessages(t *testing.T, evs []sseEvent) streamed {
	t.Helper()
	got := streamed{prompt: -1, cached: -1, output: -1, usageReasoning: -1}
	var types []string
	open, block, signed, stops := -1, "", false, 0
	for i, e := range evs {
		var ev anthEvent
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatalf("event %d %q: %v", i, e.data, err)
		}
		if e.name != ev.Type {
			t.Fatalf("event %d named %q carries type %q", i, e.name, ev.Type)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "message_start":
			if i != 0 || ev.Message == nil || ev.Message.Usage == nil || ev.Message.Usage.InputTokens == nil {
				t.Fatalf("event %d: bad message_start %s", i, e.data)
			}
		case "content_block_start":
			// Blocks are numbered from 0 in order: a start's index is the stops so far.
			if open != -1 || ev.Index == nil || *ev.Index != stops || ev.ContentBlock == nil {
				t.Fatalf("event %d: block start %s with block %d open", i, e.data, open)
			}
			open, block, signed = *ev.Index, ev.ContentBlock.Type, false
		case "content_block_delta":
			if ev.Index == nil || *ev.Index != open || ev.Delta == nil {
				t.Fatalf("event %d: delta %s outside its block %d", i, e.data, open)
			}
			switch {
			case ev.Delta.Type == "thinking_delta" && block == "thinking" && ev.Delta.Thinking != nil:
				got.reasoning += *ev.Delta.Thinking
				got.reasoningDeltas++
			case ev.Delta.Type == "text_delta" && block == "text" && ev.Delta.Text != nil:
				got.answer += *ev.Delta.Text
				got.answerDeltas++
			case ev.Delta.Type == "signature_delta" && block == "thinking" && ev.Delta.Signature != nil && *ev.Delta.Signature != "":
				signed = true
			default:
				t.Fatalf("event %d: delta %s in a %s block", i, e.data, block)
			}
		case "content_block_stop":
			if ev.Index == nil || *ev.Index != open || block == "thinking" && !signed {
				t.Fatalf("event %d: stop %s of block %d (%s, signed %v)", i, e.data, open, block, signed)
			}
			open = -1
			stops++
		case "message_delta":
			if open != -1 || ev.Delta == nil || ev.Delta.StopReason == nil || ev.Usage == nil || ev.Usage.OutputTokens == nil || ev.Usage.InputTokens == nil {
				t.Fatalf("event %d: bad message_delta %s", i, e.data)
			}
			got.stop, got.output = *ev.Delta.StopReason, *ev.Usage.OutputTokens
			got.prompt = *ev.Usage.InputTokens
			if c := ev.Usage.CacheReadInputTokens; c != nil {
				got.cached = *c
				got.prompt += *c + *ev.Usage.CacheCreationInputTokens
			}
		case "message_stop":
			if i != len(evs)-1 {
				t.Fatalf("message_stop is event %d of %d", i, len(evs))
			}
		default:
			t.Fatalf("event %d: unexpected type %q", i, ev.Type)
		}
	}
	if len(types) < 2 || types[len(types)-1] != "message_stop" || types[len(types)-2] != "message_delta" {
		t.Fatalf("stream does not end message_delta, message_stop: %v", types)
	}
	return got
}

// decodeResponses decodes a Responses stream event by event: every event's name equals
// its data's type, sequence numbers run 0, 1, 2, ...; response.created and
// response.in_progress first, response.completed last; deltas inside their item.
func decodeResponses(t *testing.T, evs []sseEvent) streamed {
	t.Helper()
	got := streamed{prompt: -1, cached: -1, output: -1, usageReasoning: -1}
	items := map[string]string{} // item id -> type, while added and not done
	for i, e := range evs {
		var ev respEvent
		if err := json.Unmarshal([]byte(e.data), &ev); err != nil {
			t.Fatalf("event %d %q: %v", i, e.data, err)
		}
		if e.name != ev.Type || ev.SequenceNumber == nil || *ev.SequenceNumber != i {
			t.Fatalf("event %d named %q: %s, want its type and sequence_number %d", i, e.name, e.data, i)
		}
		switch ev.Type {
		case "response.created", "response.in_progress":
			if i > 1 || ev.Response == nil || ev.Response.Status != "in_progress" || ev.Response.Object != "response" {
				t.Fatalf("event %d: %s", i, e.data)
			}
		case "response.output_item.added":
			var it struct {
				Item struct{ ID, Type string } `json:"item"`
			}
			json.Unmarshal([]byte(e.data), &it)
			items[it.Item.ID] = it.Item.Type
		case "response.content_part.added", "response.content_part.done", "response.output_text.done", "response.reasoning_text.done":
			if items[ev.ItemID] == "" {
				t.Fatalf("event %d: %s of an item not open", i, ev.Type)
			}
		case "response.output_item.done":
			var it struct {
				Item struct{ ID string } `json:"item"`
			}
			json.Unmarshal([]byte(e.data), &it)
			delete(items, it.Item.ID)
		case "response.reasoning_text.delta":
			if items[ev.ItemID] != "reasoning" || ev.Delta == nil {
				t.Fatalf("event %d: reasoning delta in item %q", i, items[ev.ItemID])
			}
			got.reasoning += *ev.Delta
			got.reasoningDeltas++
		case "response.output_text.delta":
			if items[ev.ItemID] != "message" || ev.Delta == nil {
				t.Fatalf("event %d: text delta in item %q", i, items[ev.ItemID])
			}
			got.answer += *ev.Delta
			got.answerDeltas++
		case "response.completed":
			if i != len(evs)-1 || ev.Response == nil || ev.Response.Usage == nil || len(items) != 0 {
				t.Fatalf("event %d of %d: %s (items open %v)", i, len(evs), e.data, items)
			}
			u := ev.Response.Usage
			got.prompt, got.cached, got.output, got.usageReasoning = u.InputTokens, u.InputTokensDetails.CachedTokens, u.OutputTokens, u.OutputTokensDetails.ReasoningTokens
			if u.TotalTokens != u.InputTokens+u.OutputTokens {
				t.Fatalf("total_tokens %d != %d + %d", u.TotalTokens, u.InputTokens, u.OutputTokens)
			}
			got.stop = ev.Response.Status
		default:
			t.Fatalf("event %d: unexpected type %q", i, ev.Type)
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].name != "response.completed" {
		t.Fatalf("stream does not end with response.completed")
	}
	return got
}

// decodeChat decodes a chat stream's chunks: delta.reasoning and delta.content, and the
// final usage.
func decodeChat(t *testing.T, evs []sseEvent) streamed {
	t.Helper()
	got := streamed{prompt: -1, cached: -1, output: -1, usageReasoning: -1}
	if len(evs) == 0 || evs[len(evs)-1].data != "[DONE]" {
		t.Fatalf("no [DONE]")
	}
	for i, e := range evs[:len(evs)-1] {
		var ch struct {
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					Reasoning *string `json:"reasoning"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens            int `json:"prompt_tokens"`
				CompletionTokens        int `json:"completion_tokens"`
				CompletionTokensDetails *struct {
					ReasoningTokens int `json:"reasoning_tokens"`
				} `json:"completion_tokens_details"`
			} `json:"usage"`
		}
		if e.name != "" || json.Unmarshal([]byte(e.data), &ch) != nil {
			t.Fatalf("chunk %d: %q %q", i, e.name, e.data)
		}
		for _, c := range ch.Choices {
			if r := c.Delta.Reasoning; r != nil {
				got.reasoning += *r
				got.reasoningDeltas++
			}
			if s := c.Delta.Content; s != nil && *s != "" {
				got.answer += *s
				got.answerDeltas++
			}
			if c.FinishReason != nil {
				got.stop = *c.FinishReason
			}
		}
		if u := ch.Usage; u != nil {
			got.prompt, got.output = u.PromptTokens, u.CompletionTokens
			if u.CompletionTokensDetails != nil {
				got.usageReasoning = u.CompletionTokensDetails.ReasoningTokens
			}
		}
	}
	return got
}

// apiRequest is a streamed request of n tokens with the same prompt (a system prompt and
// one user message) in each API's shape.
func apiRequest(api apiKind, n int, stream bool) (path, body string) {
	switch api {
	case apiChat:
		return "/v1/chat/completions", fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there"}],"max_tokens":%d,"ignore_eos":true,"stream":%v,"stream_options":%s}`,
			n, stream, map[bool]string{true: `{"include_usage":true}`, false: `null`}[stream])
	case apiMessages:
		return "/v1/messages", fmt.Sprintf(`{"model":"m","system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"Hello there"}]}],"max_tokens":%d,"stream":%v}`, n, stream)
	}
	return "/v1/responses", fmt.Sprintf(`{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":[{"type":"input_text","text":"Hello there"}]}],"max_output_tokens":%d,"stream":%v}`, n, stream)
}

func fastFixed() Config {
	cfg, _ := Profile("fixed")
	cfg.Model, cfg.FixedTTFT, cfg.FixedITL = "m", time.Millisecond, 100*time.Microsecond
	return cfg
}

// TestAPIStreamsReasoning: each API's stream, decoded with encoding/json from the
// references' shapes, carries round(share x n) reasoning tokens then the answer's, each
// token its own delta, with the usage the engine reports; the prompt is the same chat
// prompt by every API.
func TestAPIStreamsReasoning(t *testing.T) {
	for _, usageFlag := range []bool{false, true} {
		cfg := fastFixed()
		cfg.ReasoningShare, cfg.ReasoningUsage = 0.3, usageFlag
		r := startSim(t, cfg)
		base := strings.TrimSuffix(r.BaseURL(), "/v1")
		const n = 23
		wantR := int(math.Round(0.3 * n)) // 7
		prompts := map[apiKind]int{}
		for _, api := range []apiKind{apiChat, apiMessages, apiResponses} {
			path, body := apiRequest(api, n, true)
			resp, b := postRaw(t, base+path, body)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" {
				t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
			}
			evs := readSSE(t, bytes.NewReader(b))
			var got streamed
			switch api {
			case apiChat:
				got = decodeChat(t, evs)
			case apiMessages:
				got = decodeMessages(t, evs)
			case apiResponses:
				got = decodeResponses(t, evs)
			}
			if got.reasoningDeltas != wantR || got.answerDeltas != n-wantR {
				t.Errorf("%s: %d reasoning and %d answer deltas, want %d and %d", path, got.reasoningDeltas, got.answerDeltas, wantR, n-wantR)
			}
			if rt, at := countTokens(t, got.reasoning), countTokens(t, got.answer); rt != wantR || at != n-wantR {
				t.Errorf("%s: reasoning text %d tokens, answer %d, want %d and %d", path, rt, at, wantR, n-wantR)
			}
			if got.output != n {
				t.Errorf("%s: usage output %d, want %d", path, got.output, n)
			}
			wantUR := -1
			if api == apiResponses || api == apiChat && usageFlag {
				wantUR = wantR
			}
			if got.usageReasoning != wantUR {
				t.Errorf("%s (reasoning usage %v): usage reasoning tokens %d, want %d", path, usageFlag, got.usageReasoning, wantUR)
			}
			wantStop := map[apiKind]string{apiChat: "length", apiMessages: "max_tokens", apiResponses: "incomplete"}[api]
			if got.stop != wantStop {
				t.Errorf("%s: stop %q, want %q", path, got.stop, wantStop)
			}
			prompts[api] = got.prompt
		}
		// The whole chat answer's usage says the reasoning tokens as the stream's does.
		path, body := apiRequest(apiChat, n, false)
		_, b := postRaw(t, base+path, body)
		var whole struct {
			Usage struct {
				Details *struct {
					ReasoningTokens int `json:"reasoning_tokens"`
				} `json:"completion_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &whole); err != nil || (whole.Usage.Details != nil) != usageFlag || usageFlag && whole.Usage.Details.ReasoningTokens != wantR {
			t.Errorf("whole chat answer (reasoning usage %v): %s", usageFlag, b)
		}
		// The system prompt and the user message, by the ChatML template, whatever the API.
		want := 1 + countTokens(t, "system\n") + countTokens(t, "Be brief.") + 1 + countTokens(t, "\n") +
			1 + countTokens(t, "user\n") + countTokens(t, "Hello there") + 1 + countTokens(t, "\n") + 1 + countTokens(t, "assistant\n")
		for api, p := range prompts {
			if p != want {
				t.Errorf("%s: prompt tokens %d, want %d", apiNames[api], p, want)
			}
		}
	}
}

// TestAPIStreamsAllOrNoReasoning: a share of 0 streams no reasoning block or item, a
// share of 1 no answer block or item; the streams stay well formed.
func TestAPIStreamsAllOrNoReasoning(t *testing.T) {
	for _, share := range []float64{0, 1} {
		cfg := fastFixed()
		cfg.ReasoningShare = share
		r := startSim(t, cfg)
		base := strings.TrimSuffix(r.BaseURL(), "/v1")
		for _, api := range []apiKind{apiChat, apiMessages, apiResponses} {
			path, body := apiRequest(api, 5, true)
			_, b := postRaw(t, base+path, body)
			evs := readSSE(t, bytes.NewReader(b))
			got := map[apiKind]func(*testing.T, []sseEvent) streamed{apiChat: decodeChat, apiMessages: decodeMessages, apiResponses: decodeResponses}[api](t, evs)
			wantR := int(share * 5)
			if got.reasoningDeltas != wantR || got.answerDeltas != 5-wantR {
				t.Errorf("share %v %s: %d reasoning, %d answer deltas", share, path, got.reasoningDeltas, got.answerDeltas)
			}
			blocks := bytes.Count(b, []byte("event: content_block_start")) + bytes.Count(b, []byte("event: response.output_item.added"))
			if api != apiChat && blocks != 1 {
				t.Errorf("share %v %s: %d blocks or items, want 1:\n%s", share, path, blocks, b)
			}
		}
	}
}

// TestAPIWholeAnswers: stream false gives each API's whole answer, with the reasoning
// apart from the text and the usage of the stream.
func TestAPIWholeAnswers(t *testing.T) {
	cfg := fastFixed()
	cfg.ReasoningShare = 0.5
	r := startSim(t, cfg)
	base := strings.TrimSuffix(r.BaseURL(), "/v1")

	path, body := apiRequest(apiMessages, 10, false)
	resp, b := postRaw(t, base+path, body)
	var m struct {
		Type    string `json:"type"`
		Role    string `json:"role"`
		Content []struct {
			Type, Text, Thinking, Signature string
		} `json:"content"`
		StopReason string    `json:"stop_reason"`
		Usage      anthUsage `json:"usage"`
	}
	if err := json.Unmarshal(b, &m); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
	}
	if m.Type != "message" || m.Role != "assistant" || len(m.Content) != 2 || m.Content[0].Type != "thinking" || m.Content[1].Type != "text" ||
		countTokens(t, m.Content[0].Thinking) != 5 || countTokens(t, m.Content[1].Text) != 5 || m.Content[0].Signature == "" ||
		m.StopReason != "max_tokens" || m.Usage.OutputTokens == nil || *m.Usage.OutputTokens != 10 {
		t.Errorf("messages answer %s", b)
	}

	path, body = apiRequest(apiResponses, 10, false)
	resp, b = postRaw(t, base+path, body)
	var o respObject
	if err := json.Unmarshal(b, &o); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s: %v", resp.StatusCode, b, err)
	}
	if o.Object != "response" || o.Status != "incomplete" || o.IncompleteDetails == nil || o.IncompleteDetails.Reason != "max_output_tokens" ||
		len(o.Output) != 2 || o.Output[0].Type != "reasoning" || o.Output[1].Type != "message" ||
		countTokens(t, o.Output[0].Content[0].Text) != 5 || countTokens(t, o.Output[1].Content[0].Text) != 5 ||
		o.Usage == nil || o.Usage.OutputTokens != 10 || o.Usage.OutputTokensDetails.ReasoningTokens != 5 {
		t.Errorf("responses answer %s", b)
	}

	path, body = apiRequest(apiChat, 10, false)
	resp, b = postRaw(t, base+path, body)
	var c struct {
		Choices []struct {
			Message struct{ Content, Reasoning string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 || len(c.Choices) != 1 ||
		countTokens(t, c.Choices[0].Message.Reasoning) != 5 || countTokens(t, c.Choices[0].Message.Content) != 5 {
		t.Errorf("chat answer %d %s: %v", resp.StatusCode, b, err)
	}
}

// TestAPIErrorShapes: a bad request of each API is answered 400 in that API's error
// shape, naming the field; an unknown model 404; a fault's status in the same shape.
func TestAPIErrorShapes(t *testing.T) {
	r := startSim(t, fastFixed())
	base := strings.TrimSuffix(r.BaseURL(), "/v1")
	for _, c := range []struct {
		path, body string
		status     int
		want       string // in the message
	}{
		{"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 400, "max_tokens is required"},
		{"/v1/messages", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, 400, "max_tokens must be positive"},
		{"/v1/messages", `{"max_tokens":3,"messages":[{"role":"user","content":"x"}]}`, 400, "model is required"},
		{"/v1/messages", `{"model":"m","max_tokens":3,"messages":[]}`, 400, "at least one item"},
		{"/v1/messages", `{"model":"m","max_tokens":3,"messages":[{"role":"tool","content":"x"}]}`, 400, "messages[0].role"},
		{"/v1/messages", `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":[{"type":"image"}]}]}`, 400, "messages[0].content[0]"},
		{"/v1/messages", `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"t"}]}`, 400, "tools[0].input_schema"},
		{"/v1/messages", `{"model":"m","max_tokens":99999999,"messages":[{"role":"user","content":"x"}]}`, 400, "maximum context length"},
		{"/v1/messages", `{"model":"other","max_tokens":3,"messages":[{"role":"user","content":"x"}]}`, 404, "does not exist"},
		{"/v1/messages", `{`, 400, "invalid JSON"},
		{"/v1/responses", `{"model":"m"}`, 400, "input is required"},
		{"/v1/responses", `{"input":"x","max_output_tokens":0}`, 400, "max_output_tokens must be at least 1"},
		{"/v1/responses", `{"input":[{"type":"reasoning"}]}`, 400, "input[0].type"},
		{"/v1/responses", `{"input":[{"role":"user","content":[{"type":"input_image"}]}]}`, 400, "input[0].content[0]"},
		{"/v1/responses", `{"input":"x","tools":[{"type":"web_search"}]}`, 400, "tools[0].type"},
		{"/v1/responses", `{"input":"x","tools":[{"type":"function"}]}`, 400, "tools[0].name"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"description":"d"}}]}`, 400, "tools[0].function.name"},
	} {
		resp, b := postRaw(t, base+c.path, c.body)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: status %d, want %d: %s", c.path, c.body, resp.StatusCode, c.status, b)
			continue
		}
		if c.path == "/v1/messages" {
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			wantType := map[int]string{400: "invalid_request_error", 404: "not_found_error"}[c.status]
			if json.Unmarshal(b, &e) != nil || e.Type != "error" || e.Error.Type != wantType || !strings.Contains(e.Error.Message, c.want) {
				t.Errorf("%s %s: %s, want an Anthropic %s saying %q", c.path, c.body, b, wantType, c.want)
			}
			continue
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error.Code != c.status || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("%s %s: %s, want an OpenAI error saying %q", c.path, c.body, b, c.want)
		}
	}

	cfg := fastFixed()
	cfg.Faults.Status503 = 1
	f := startSim(t, cfg)
	path, body := apiRequest(apiMessages, 3, true)
	resp, b := postRaw(t, strings.TrimSuffix(f.BaseURL(), "/v1")+path, body)
	if resp.StatusCode != 503 || !bytes.Contains(b, []byte(`"type":"error","error":{"type":"overloaded_error"`)) {
		t.Errorf("messages 503 fault: %d %s", resp.StatusCode, b)
	}
}

// TestResponsesCapsMaxOutputTokens: the Responses API caps max_output_tokens at the
// context left, as vLLM does, where chat refuses it.
func TestResponsesCapsMaxOutputTokens(t *testing.T) {
	cfg := fastFixed()
	cfg.MaxModelLen = 64
	r := startSim(t, cfg)
	base := strings.TrimSuffix(r.BaseURL(), "/v1")
	_, b := postRaw(t, base+"/v1/responses", `{"input":"Hello there","max_output_tokens":1000}`)
	var o respObject
	if err := json.Unmarshal(b, &o); err != nil || o.Usage == nil || o.Usage.InputTokens+o.Usage.OutputTokens != 64 {
		t.Fatalf("%s: %v", b, err)
	}
	resp, b := postRaw(t, base+"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hello there"}],"max_tokens":1000}`)
	if resp.StatusCode != 400 {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
}

// TestToolTokens: tools add, per tool, their description's cl100k tokens and
// ToolOverheadTokens to the prompt, in every API's shape, and the prefix cache hashes
// them (two requests differing only in a tool's description share no cached block).
func TestToolTokens(t *testing.T) {
	r := startSim(t, fastFixed())
	base := strings.TrimSuffix(r.BaseURL(), "/v1")
	d1, d2 := "Look up the weather for a city.", strings.Repeat("Search the code base. ", 20)
	want := 2*ToolOverheadTokens + countTokens(t, d1) + countTokens(t, d2)
	for _, c := range []struct{ path, without, with string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1}`,
			fmt.Sprintf(`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1,"tools":[{"type":"function","function":{"name":"a","description":%q,"parameters":{"type":"object"}}},{"type":"function","function":{"name":"b","description":%q}}]}`, d1, d2)},
		{"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":1}`,
			fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"Hi"}],"max_tokens":1,"tools":[{"name":"a","description":%q,"input_schema":{"type":"object"}},{"name":"b","description":%q,"input_schema":{}}]}`, d1, d2)},
		{"/v1/responses", `{"input":"Hi","max_output_tokens":1}`,
			fmt.Sprintf(`{"input":"Hi","max_output_tokens":1,"tools":[{"type":"function","name":"a","description":%q,"parameters":{}},{"type":"function","name":"b","description":%q}]}`, d1, d2)},
	} {
		p0, p1 := promptOf(t, base+c.path, c.without), promptOf(t, base+c.path, c.with)
		if p1-p0 != want {
			t.Errorf("%s: tools added %d prompt tokens, want %d", c.path, p1-p0, want)
		}
		if c.path == "/v1/messages" {
			// count_tokens counts the same prompt, tools included, without max_tokens.
			_, b := postRaw(t, base+"/v1/messages/count_tokens", strings.Replace(c.with, `"max_tokens":1,`, "", 1))
			var ct struct {
				InputTokens int `json:"input_tokens"`
				Context     struct {
					Original int `json:"original_input_tokens"`
				} `json:"context_management"`
			}
			if json.Unmarshal(b, &ct) != nil || ct.InputTokens != p1 || ct.Context.Original != p1 {
				t.Errorf("count_tokens with tools: %s, want %d", b, p1)
			}
			resp, b := postRaw(t, base+"/v1/messages/count_tokens", `{"messages":[{"role":"user","content":"Hi"}]}`)
			if resp.StatusCode != 400 || !bytes.Contains(b, []byte(`"type":"invalid_request_error"`)) {
				t.Errorf("count_tokens without model: %d %s", resp.StatusCode, b)
			}
		}
		if c.path == "/v1/chat/completions" {
			// /tokenize counts the same prompt, tools included.
			_, b := postRaw(t, base+"/tokenize", strings.Replace(c.with, `"max_tokens":1,`, "", 1))
			var tk struct{ Count int }
			if json.Unmarshal(b, &tk) != nil || tk.Count != p1 {
				t.Errorf("/tokenize with tools: %s, want count %d", b, p1)
			}
		}
	}

	cfg, _ := Profile("tiny")
	cfg.TimeScale = 100
	pr := startSim(t, cfg)
	pbase := strings.TrimSuffix(pr.BaseURL(), "/v1")
	long := strings.Repeat("Tool text. ", 100)
	body := func(desc string) string {
		return fmt.Sprintf(`{"messages":[{"role":"user","content":"Hi"}],"max_tokens":1,"stream":true,"stream_options":{"include_usage":true},"tools":[{"type":"function","function":{"name":"a","description":%q}}]}`, desc)
	}
	postRaw(t, pbase+"/v1/chat/completions", body(long))
	if c := cachedOf(t, pbase+"/v1/chat/completions", body(long)); c < 100 {
		t.Errorf("same tools: %d cached tokens, want the tools' blocks", c)
	}
	// The tool's overhead tokens are the same for every tool (a template's constant
	// tools header): only their whole blocks are shared.
	if c, want := cachedOf(t, pbase+"/v1/chat/completions", body("Other. "+long)), ToolOverheadTokens/cfg.PrefixBlockTokens*cfg.PrefixBlockTokens; c != want {
		t.Errorf("other tool description: %d cached tokens, want %d (the tools come first)", c, want)
	}
}

// promptOf is the prompt tokens of a whole answer's usage.
func promptOf(t *testing.T, url, body string) int {
	t.Helper()
	resp, b := postRaw(t, url, body)
	var u struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			InputTokens  int `json:"input_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &u) != nil {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, b)
	}
	return u.Usage.PromptTokens + u.Usage.InputTokens
}

// cachedOf is a chat stream's cached prompt tokens.
func cachedOf(t *testing.T, url, body string) int {
	t.Helper()
	_, b := postRaw(t, url, body)
	var cached = -1
	for _, e := range readSSE(t, bytes.NewReader(b)) {
		var ch struct {
			Usage *struct {
				Details *struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(e.data), &ch) == nil && ch.Usage != nil && ch.Usage.Details != nil {
			cached = ch.Usage.Details.Cached
		}
	}
	if cached < 0 {
		t.Fatalf("no cached_tokens in %s", b)
	}
	return cached
}

// TestMessagesCacheUsage: with the prefix cache, Messages usage says the cached prompt
// tokens as Anthropic does: input_tokens without them, cache_read_input_tokens them.
func TestMessagesCacheUsage(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.Model, cfg.TimeScale = "m", 100
	r := startSim(t, cfg)
	base := strings.TrimSuffix(r.BaseURL(), "/v1")
	body := fmt.Sprintf(`{"model":"m","system":%q,"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"stream":true}`, strings.Repeat("Context here. ", 200))
	var first, second streamed
	for i, got := range []*streamed{&first, &second} {
		_, b := postRaw(t, base+"/v1/messages", body)
		evs := readSSE(t, bytes.NewReader(b))
		*got = decodeMessages(t, evs)
		var start anthEvent
		json.Unmarshal([]byte(evs[0].data), &start)
		u := start.Message.Usage
		if u.CacheReadInputTokens == nil || *u.InputTokens+*u.CacheReadInputTokens != got.prompt || *u.CacheReadInputTokens != got.cached {
			t.Errorf("request %d: message_start usage %s, message_delta prompt %d cached %d", i, evs[0].data, got.prompt, got.cached)
		}
	}
	if first.cached != 0 || second.cached < 16 || second.prompt != first.prompt {
		t.Errorf("cached %d then %d of %d and %d prompt tokens", first.cached, second.cached, first.prompt, second.prompt)
	}
}

// TestAPIFaultShapes: a malformed chunk fault in the event APIs is one event whose JSON
// is cut short, the rest of the stream intact; a disconnect ends the stream before its
// closing event.
func TestAPIFaultShapes(t *testing.T) {
	cfg := fastFixed()
	cfg.Faults.Malformed = 1
	r := startSim(t, cfg)
	base := strings.TrimSuffix(r.BaseURL(), "/v1")
	for _, api := range []apiKind{apiMessages, apiResponses} {
		path, body := apiRequest(api, 8, true)
		_, b := postRaw(t, base+path, body)
		bad := 0
		var good []sseEvent
		for _, e := range readSSE(t, bytes.NewReader(b)) {
			if !json.Valid([]byte(e.data)) {
				bad++
				continue
			}
			good = append(good, e)
		}
		if bad != 1 {
			t.Errorf("%s: %d malformed events, want 1", path, bad)
		}
		if api == apiMessages {
			decodeMessages(t, good)
		}
	}
	cfg = fastFixed()
	cfg.Faults.Disconnect = 1
	d := startSim(t, cfg)
	for _, api := range []apiKind{apiMessages, apiResponses} {
		path, body := apiRequest(api, 8, true)
		resp, err := http.Post(strings.TrimSuffix(d.BaseURL(), "/v1")+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil || bytes.Contains(b, []byte("message_stop")) || bytes.Contains(b, []byte("response.completed")) {
			t.Errorf("%s: disconnect read %v, body:\n%s", path, err, b)
		}
	}
}

// TestRequestLogReasoning: the request log records each API and its reasoning tokens.
func TestRequestLogReasoning(t *testing.T) {
	cfg := fastFixed()
	cfg.ReasoningShare = 0.5
	cfg.RequestLog = filepath.Join(t.TempDir(), "log.jsonl")
	r := startSim(t, cfg)
	base := strings.TrimSuffix(r.BaseURL(), "/v1")
	for _, api := range []apiKind{apiChat, apiMessages, apiResponses} {
		path, body := apiRequest(api, 8, true)
		postRaw(t, base+path, body)
	}
	postRaw(t, base+"/v1/completions", `{"prompt":"x","max_tokens":8,"stream":true}`)
	r.Close()
	b, err := os.ReadFile(cfg.RequestLog)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var rec LogRecord
		if err := json.Unmarshal(line, &rec); err != nil || rec.Outcome != "ok" {
			t.Fatalf("%s: %v", line, err)
		}
		got[rec.API] = rec.ReasoningTokens
	}
	want := map[string]int{"chat": 4, "messages": 4, "responses": 4, "completions": 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("reasoning tokens by API %v, want %v", got, want)
	}
}

// TestStreamErrorFault: the stream-error fault ends a stream with the engine's mid-stream
// error in each API's shape, before the last token: chat and completions an error chunk
// then [DONE]; Messages and Responses an "event: error" and nothing after it (no
// message_stop, no response.completed), Responses' sequence numbers unbroken. Whole
// answers get a 500 in the API's error shape. Seeds without the fault plan as before.
func TestStreamErrorFault(t *testing.T) {
	cfg := fastFixed()
	cfg.ReasoningShare, cfg.Faults.StreamError = 0.5, 1
	r := startSim(t, cfg)
	base := strings.TrimSuffix(r.BaseURL(), "/v1")
	const n = 40
	for _, api := range []apiKind{apiCompletions, apiChat, apiMessages, apiResponses} {
		path, body := apiRequest(api, n, true)
		if api == apiCompletions {
			path, body = "/v1/completions", fmt.Sprintf(`{"prompt":"x","max_tokens":%d,"stream":true}`, n)
		}
		resp, b := postRaw(t, base+path, body)
		evs := readSSE(t, bytes.NewReader(b))
		if resp.StatusCode != 200 || len(evs) < 1 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		last := evs[len(evs)-1]
		switch api {
		case apiCompletions, apiChat:
			var e struct {
				Error struct {
					Message string `json:"message"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if last.data != "[DONE]" || len(evs) < 2 || json.Unmarshal([]byte(evs[len(evs)-2].data), &e) != nil || e.Error.Code != 500 || e.Error.Message == "" {
				t.Errorf("%s: does not end with an error chunk and [DONE]:\n%s", path, b)
			}
		case apiMessages:
			var e anthEvent
			if last.name != "error" || json.Unmarshal([]byte(last.data), &e) != nil || e.Type != "error" || e.Error == nil || e.Error.Message == "" {
				t.Errorf("%s: last event %q %s, want an error event", path, last.name, last.data)
			}
			if bytes.Contains(b, []byte("message_stop")) {
				t.Errorf("%s: message_stop after the error", path)
			}
		case apiResponses:
			for i, e := range evs {
				var ev respEvent
				if json.Unmarshal([]byte(e.data), &ev) != nil || ev.SequenceNumber == nil || *ev.SequenceNumber != i || ev.Type != e.name {
					t.Fatalf("%s: event %d %q %s", path, i, e.name, e.data)
				}
			}
			if last.name != "error" || bytes.Contains(b, []byte("response.completed")) {
				t.Errorf("%s: last event %q, want error and no response.completed", path, last.name)
			}
		}
		marks := map[apiKind][]string{apiCompletions: {`"text":"`}, apiChat: {`"delta":{"content":"`, `"delta":{"reasoning":"`},
			apiMessages: {`"type":"thinking_delta"`, `"type":"text_delta"`}, apiResponses: {`"type":"response.reasoning_text.delta"`, `"type":"response.output_text.delta"`}}[api]
		tokens := 0
		for _, m := range marks {
			tokens += bytes.Count(b, []byte(m))
		}
		if tokens >= n {
			t.Errorf("%s: %d tokens before the error, want fewer than %d", path, tokens, n)
		}
		_, body = apiRequest(api, n, false)
		if api == apiCompletions {
			body = fmt.Sprintf(`{"prompt":"x","max_tokens":%d}`, n)
		}
		resp, b = postRaw(t, base+path, body)
		if resp.StatusCode != 500 || !bytes.Contains(b, []byte(streamErrorMsg)) || (api == apiMessages) != bytes.Contains(b, []byte(`"type":"error"`)) {
			t.Errorf("%s whole: %d %s", path, resp.StatusCode, b)
		}
		// With the timing trailers asked for, the error answer is whole too.
		if res := post(t, http.DefaultClient, base+path, body); res.status != 500 || res.readErr != nil || !bytes.Contains(res.body, []byte(streamErrorMsg)) {
			t.Errorf("%s whole, timing asked: %d %v %s", path, res.status, res.readErr, res.body)
		}
	}
	if got := r.srv.faultCount[faultStreamError].Load(); got != 12 {
		t.Errorf("stream-error faults counted %d, want 12", got)
	}

	// The fault is drawn after every other, so plans without it are unchanged.
	plain, err := New(fastFixed())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	withFaults := fastFixed()
	withFaults.Faults = Faults{Malformed: 0.5, Disconnect: 0.5, StreamError: 0.5}
	w, err := New(withFaults)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	withFaults.Faults.StreamError = 0
	wo, err := New(withFaults)
	if err != nil {
		t.Fatal(err)
	}
	defer wo.Close()
	drawn := 0
	for i := range uint64(200) {
		a, b := w.makePlan(i, 50, 0, false), wo.makePlan(i, 50, 0, false)
		if a.errorAt >= 0 {
			drawn++
		}
		a.errorAt = -1
		if a != b {
			t.Fatalf("plan %d: %+v with the stream-error fault, %+v without", i, a, b)
		}
	}
	if drawn < 50 || drawn > 150 {
		t.Errorf("stream-error drawn %d times in 200 at rate 0.5", drawn)
	}
}

// TestStreamErrorAtFirstToken: an error before the first token follows the Responses
// preamble with the next sequence number, and Messages sends it alone.
func TestStreamErrorAtFirstToken(t *testing.T) {
	s, err := New(fastFixed())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pl := plan{target: 5, finish: "length", stallAt: -1, malformedAt: -1, disconnectAt: -1, errorAt: 0}
	ck := s.newChunker(apiResponses, 10, false, &pl)
	evs := readSSE(t, bytes.NewReader(ck.appendStreamError(ck.appendResponsesPreamble(nil), 0)))
	for i, e := range evs {
		var ev respEvent
		if json.Unmarshal([]byte(e.data), &ev) != nil || ev.SequenceNumber == nil || *ev.SequenceNumber != i {
			t.Fatalf("event %d: %s", i, e.data)
		}
	}
	if len(evs) != 3 || evs[2].name != "error" {
		t.Fatalf("events %v", evs)
	}
	ck = s.newChunker(apiMessages, 10, false, &pl)
	if evs := readSSE(t, bytes.NewReader(ck.appendStreamError(nil, 0))); len(evs) != 1 || evs[0].name != "error" {
		t.Fatalf("messages: %v", evs)
	}
}

// TestEventAPIsIgnoreLengthForcing: vLLM passes neither min_tokens nor ignore_eos through
// /v1/messages or /v1/responses, so neither forces the length there: with natural
// stopping on, answers stop early (end_turn, completed) as they do on chat without them,
// while chat honours ignore_eos.
func TestEventAPIsIgnoreLengthForcing(t *testing.T) {
	cfg := fastFixed()
	cfg.EOSMeanTokens = 2
	r := startSim(t, cfg)
	base := strings.TrimSuffix(r.BaseURL(), "/v1")
	const n = 200 // P(a draw of mean 2 reaches 200) is 2^-199
	for i := range 5 {
		_, b := postRaw(t, base+"/v1/messages", fmt.Sprintf(`{"model":"m","max_tokens":%d,"min_tokens":%d,"ignore_eos":true,"stream":true,"messages":[{"role":"user","content":"x"}]}`, n, n))
		got := decodeMessages(t, readSSE(t, bytes.NewReader(b)))
		if got.stop != "end_turn" || got.output >= n || got.answerDeltas != got.output {
			t.Errorf("messages %d: stop %q after %d tokens (%d deltas)", i, got.stop, got.output, got.answerDeltas)
		}
		_, b = postRaw(t, base+"/v1/responses", fmt.Sprintf(`{"input":"x","max_output_tokens":%d,"min_tokens":%d,"ignore_eos":true,"stream":true}`, n, n))
		got = decodeResponses(t, readSSE(t, bytes.NewReader(b)))
		if got.stop != "completed" || got.output >= n || got.answerDeltas != got.output {
			t.Errorf("responses %d: status %q after %d tokens (%d deltas)", i, got.stop, got.output, got.answerDeltas)
		}
	}
	_, b := postRaw(t, base+"/v1/chat/completions", fmt.Sprintf(`{"max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, n))
	if got := decodeChat(t, readSSE(t, bytes.NewReader(b))); got.output != n || got.stop != "length" {
		t.Errorf("chat with ignore_eos: %d tokens, %q", got.output, got.stop)
	}
}

// TestMessagesSystemJoined: a Messages request's top-level system prompt and its system
// messages become one system message, their texts joined, first, as vLLM converts them;
// so does the Responses API's instructions.
func TestMessagesSystemJoined(t *testing.T) {
	r := startSim(t, fastFixed())
	base := strings.TrimSuffix(r.BaseURL(), "/v1")
	chat := promptOf(t, base+"/v1/chat/completions", `{"messages":[{"role":"system","content":"Be brief. Use lists."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"More"}],"max_tokens":1}`)
	msgs := promptOf(t, base+"/v1/messages", `{"model":"m","max_tokens":1,"system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":"Hi"},{"role":"system","content":" Use lists."},{"role":"assistant","content":[{"type":"text","text":"Hel"},{"type":"text","text":"lo"}]},{"role":"user","content":"More"}]}`)
	resp := promptOf(t, base+"/v1/responses", `{"max_output_tokens":1,"instructions":"Be brief. Use lists.","input":[{"role":"user","content":"Hi"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hello"}]},{"role":"user","content":"More"}]}`)
	if msgs != chat || resp != chat {
		t.Errorf("prompt tokens: messages %d, responses %d, chat %d", msgs, resp, chat)
	}
}

// dechunk undoes appendChunk's framing.
func dechunk(t *testing.T, b []byte) []byte {
	t.Helper()
	var out []byte
	for len(b) > 0 {
		line, rest, ok := bytes.Cut(b, []byte("\r\n"))
		var n int
		if _, err := fmt.Sscanf(string(line), "%x", &n); !ok || err != nil || len(rest) < n+2 {
			t.Fatalf("bad chunk at %q", b)
		}
		out, b = append(out, rest[:n]...), rest[n+2:]
	}
	return out
}

// TestAppendDueAnySplit: the precise writer's bytes for a stream written whole or cut into
// two writes at any token equal the goroutine path's (start, tokens, end), for every API and reasoning
// share, so the reasoning-to-answer turn is right whichever write it falls in.
func TestAppendDueAnySplit(t *testing.T) {
	for _, share := range []float64{0, 0.3, 0.5, 1} {
		cfg := fastFixed()
		cfg.ReasoningShare, cfg.ReasoningUsage = share, true
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for api := range apiKind(4) {
			for target := 1; target <= 9; target++ {
				pl := plan{target: target, finish: "length", stallAt: -1, malformedAt: -1, disconnectAt: -1, errorAt: -1, wordOff: 5, id: 99}
				ck := s.newChunker(api, 12, false, &pl)
				want := ck.appendStart(nil)
				for i := range target {
					want = ck.appendToken(want, i)
				}
				want = ck.appendEnd(want, true)
				for k := 1; k <= target; k++ { // k == target: one write (a write has a token at least)
					out, scratch := ck.appendDue(nil, nil, 0, k, true)
					if k < target {
						out, _ = ck.appendDue(out, scratch, k, target, true)
					}
					if got := dechunk(t, out); !bytes.Equal(got, want) {
						t.Fatalf("%s share %v target %d split %d:\n%s\nwant\n%s", apiNames[api], share, target, k, got, want)
					}
				}
			}
		}
		s.Close()
	}
}

// TestFirstAnswerTimes: the X-Sim-First-Answer-Ns trailer is the model time of the first
// answer token: on an idle engine, as long after the first token as the last token of a
// request that stops at that token; on the fixed profile TTFT + R x ITL. An answer that is
// all reasoning has none.
func TestFirstAnswerTimes(t *testing.T) {
	cfg, _ := Profile("tiny")
	cfg.Model, cfg.TimeScale, cfg.PrefixCache, cfg.ReasoningShare = "m", 100, false, 0.5
	r := startSim(t, cfg)
	url := r.BaseURL() + "/chat/completions"
	body := func(n int) map[string]any {
		return map[string]any{"messages": []map[string]string{{"role": "user", "content": "Hello there"}}, "max_tokens": n, "ignore_eos": true}
	}
	long := post(t, http.DefaultClient, url, body(20))  // reasoning 10: token 10 is the first answer
	short := post(t, http.DefaultClient, url, body(11)) // its last token is token 10
	got := long.modelNs(t, TrailerFirstAnswer) - long.modelNs(t, TrailerFirst)
	want := short.modelNs(t, TrailerLast) - short.modelNs(t, TrailerFirst)
	if got != want || got <= 0 {
		t.Errorf("first answer %v after the first token, want %v", got, want)
	}

	fc := fastFixed()
	fc.ReasoningShare = 1
	f := startSim(t, fc)
	res := post(t, http.DefaultClient, f.BaseURL()+"/chat/completions", body(4))
	if v := res.trailer.Get(TrailerFirstAnswer); v != "" || res.trailer.Get(TrailerFirst) == "" {
		t.Errorf("all reasoning: first answer trailer %q", v)
	}
	fc.ReasoningShare = 0.25
	f = startSim(t, fc)
	res = post(t, http.DefaultClient, f.BaseURL()+"/chat/completions", body(8))
	if got := res.modelNs(t, TrailerFirstAnswer) - res.modelNs(t, TrailerFirst); got != 2*fc.FixedITL {
		t.Errorf("fixed: first answer %v after the first token, want 2 ITL", got)
	}
}

// TestRequestLogFirstAnswerWrite: the request log's first_answer_write_unix_ns is the
// stamp of the write that carried the first answer token, on the precise writer and on
// the goroutine path, and first_answer_ns its model time.
func TestRequestLogFirstAnswerWrite(t *testing.T) {
	for _, goroutine := range []bool{false, true} {
		cfg := fastFixed()
		cfg.FixedITL = 2 * time.Millisecond
		cfg.ReasoningShare = 0.4
		cfg.RequestLog, cfg.RequestLogWrites = filepath.Join(t.TempDir(), "log.jsonl"), true
		r := startSim(t, cfg)
		r.srv.noPrecise.Store(goroutine)
		base := strings.TrimSuffix(r.BaseURL(), "/v1")
		for _, api := range []apiKind{apiChat, apiMessages, apiResponses} {
			path, body := apiRequest(api, 10, true)
			postRaw(t, base+path, body)
		}
		r.Close()
		b, err := os.ReadFile(cfg.RequestLog)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var rec LogRecord
			if err := json.Unmarshal(line, &rec); err != nil || rec.Outcome != "ok" {
				t.Fatalf("%s: %v", line, err)
			}
			const answerAt = 4 // round(0.4 x 10)
			sum, at := 0, int64(0)
			for j, n := range rec.WriteTokens {
				if sum <= answerAt && answerAt < sum+n {
					at = rec.WriteUnixNs[j]
				}
				sum += n
			}
			if at == 0 || rec.FirstAnswerWriteUnixNs != at {
				t.Errorf("goroutine %v %s: first_answer_write_unix_ns %d, want the stamp %d of the write with token %d (writes %v of %v)",
					goroutine, rec.API, rec.FirstAnswerWriteUnixNs, at, answerAt, rec.WriteTokens, rec.WriteUnixNs)
			}
			if rec.FirstAnswerNs-rec.FirstNs != int64(answerAt*cfg.FixedITL) {
				t.Errorf("%s: first_answer_ns %d, first_ns %d", rec.API, rec.FirstAnswerNs, rec.FirstNs)
			}
		}
	}
}
