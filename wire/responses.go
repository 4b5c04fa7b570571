package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// APIResponses is OpenAI's Responses API: POST /responses with "input".
const APIResponses API = "responses"

// responsesKind is OpenAI's Responses API (platform.openai.com/docs/api-reference/responses
// and its streaming events reference): the prompt is "input" (a string, or for a
// conversation a list of input messages, which chat's {"role","content"} objects are),
// the output cap max_output_tokens for every engine, and the stream is typed events
// ({"type":"response.output_text.delta",...}) whose usage comes in response.completed,
// with no stream_options. Every body says "store":false: the API keeps every response
// for later retrieval unless told not to (vLLM and SGLang default store to true and keep
// them in the server's memory), which a replay never reads.
var responsesKind = Kind{
	Name:            APIResponses,
	Path:            "/responses",
	MaxTokens:       "max_output_tokens",
	OpenAIMaxTokens: "max_output_tokens",
	StreamsUsage:    true,
	AppendPrompt:    appendResponsesPrompt,
	AppendMessages:  appendResponsesMessages,
	AppendTools:     appendResponsesTools,
	Decode:          DecodeResponses,
	LengthFields:    responsesLengthFields,
	Stop:            "response.completed",
	// OpenAI's Responses reference (input message content: input_text and input_image,
	// whose image_url takes a data URL).
	AppendUserMessage: appendResponsesUserMessage,
}

// appendResponsesUserMessage appends a user input message whose content is an
// input_text part (none when text is empty) and one input_image part per image. Its
// "detail" is required by the API's schema (openai-python's ResponseInputImageParam):
// "auto", its documented default and what chat's bodies leave to the API.
func appendResponsesUserMessage(b, text []byte, images []Image) []byte {
	return appendTextFirst(b, text, images, `{"type":"input_text","text":"`, `{"type":"input_image","image_url":"`, `","detail":"auto"}`)
}

func init() { Register(&responsesKind) }

// responsesLengthFields: which length-forcing fields reach the sampler through
// /v1/responses. vLLM's ResponsesRequest (vllm/entrypoints/openai/responses/protocol.py,
// to_sampling_params) takes ignore_eos but has no min_tokens; SGLang's
// (python/sglang/srt/entrypoints/openai/protocol.py, ResponsesRequest.to_sampling_params)
// has neither, and its pydantic model drops unknown fields; llama.cpp's is not verified,
// so nothing beyond the cap is sent to it. A field that does not reach the sampler is
// not sent: it would say a length is forced where it is not.
func responsesLengthFields(b Backend) LengthFields {
	return LengthFields{IgnoreEOS: b == BackendVLLM}
}

func appendResponsesPrompt(b, prompt []byte, _ bool) []byte {
	b = append(b, `,"store":false,"input":`...)
	b = AppendJSONBytes(b, prompt)
	return append(b, '}')
}

func appendResponsesMessages(b, messages []byte) []byte {
	b = append(b, `,"store":false,"input":[`...)
	b = append(b, messages...)
	return append(b, `]}`...)
}

// appendResponsesTools appends one function tool in the Responses API's shape, flat:
// {"type":"function","name",...} (no nested "function" object as in chat).
func appendResponsesTools(b, desc []byte) []byte {
	b = append(b, `,"tools":[{"type":"function","name":"tool_0","description":"`...)
	b = append(b, desc...)
	return append(b, `","parameters":{"type":"object","properties":{}}}]`...)
}

// responsesEvent is what an event type means to a record.
type responsesEvent uint8

const (
	// evNone: a known event that carries nothing a record takes (the response's and
	// items' starts and ends, the .done events that repeat the deltas' text, and the
	// events of OpenAI's hosted tools and audio, which a replay never asks for).
	evNone      responsesEvent = iota
	evText                     // output text or a refusal: Output, Answer, Text
	evReasoning                // reasoning text or its summary: Output, Text, Reasoning
	evToolArgs                 // a function call's (or custom tool's) arguments: Output, Answer, ToolCalls
	evItemAdded                // an output item begins; a function call's names the call
	evEnd                      // response.completed or response.incomplete: Finished, usage
	evFailed                   // response.failed: IsError with the response's error
	evError                    // error: IsError with its message
)

// responsesEvents are the event types OpenAI's streaming events reference defines (the
// ResponseStreamEvent union of openai-python, src/openai/types/responses/
// response_stream_event.py) and the two vLLM adds: any other type is a decode error that
// names it.
var responsesEvents = map[string]responsesEvent{
	"response.created":                             evNone,
	"response.in_progress":                         evNone,
	"response.queued":                              evNone,
	"response.completed":                           evEnd,
	"response.incomplete":                          evEnd,
	"response.failed":                              evFailed,
	"error":                                        evError,
	"response.output_item.added":                   evItemAdded,
	"response.output_item.done":                    evNone,
	"response.content_part.added":                  evNone,
	"response.content_part.done":                   evNone,
	"response.output_text.delta":                   evText,
	"response.output_text.done":                    evNone,
	"response.output_text.annotation.added":        evNone,
	"response.refusal.delta":                       evText,
	"response.refusal.done":                        evNone,
	"response.reasoning_text.delta":                evReasoning,
	"response.reasoning_text.done":                 evNone,
	"response.reasoning_summary_text.delta":        evReasoning,
	"response.reasoning_summary_text.done":         evNone,
	"response.reasoning_summary_part.added":        evNone,
	"response.reasoning_summary_part.done":         evNone,
	"response.function_call_arguments.delta":       evToolArgs,
	"response.function_call_arguments.done":        evNone,
	"response.custom_tool_call_input.delta":        evToolArgs,
	"response.custom_tool_call_input.done":         evNone,
	"response.audio.delta":                         evNone,
	"response.audio.done":                          evNone,
	"response.audio.transcript.delta":              evNone,
	"response.audio.transcript.done":               evNone,
	"response.code_interpreter_call_code.delta":    evNone,
	"response.code_interpreter_call_code.done":     evNone,
	"response.code_interpreter_call.completed":     evNone,
	"response.code_interpreter_call.in_progress":   evNone,
	"response.code_interpreter_call.interpreting":  evNone,
	"response.compaction.compacting":               evNone,
	"response.file_search_call.completed":          evNone,
	"response.file_search_call.in_progress":        evNone,
	"response.file_search_call.searching":          evNone,
	"response.web_search_call.completed":           evNone,
	"response.web_search_call.in_progress":         evNone,
	"response.web_search_call.searching":           evNone,
	"response.image_generation_call.completed":     evNone,
	"response.image_generation_call.generating":    evNone,
	"response.image_generation_call.in_progress":   evNone,
	"response.image_generation_call.partial_image": evNone,
	"response.mcp_call_arguments.delta":            evNone,
	"response.mcp_call_arguments.done":             evNone,
	"response.mcp_call.completed":                  evNone,
	"response.mcp_call.failed":                     evNone,
	"response.mcp_call.in_progress":                evNone,
	"response.mcp_list_tools.completed":            evNone,
	"response.mcp_list_tools.failed":               evNone,
	"response.mcp_list_tools.in_progress":          evNone,
	"response.shell_call_command.added":            evNone,
	"response.shell_call_command.delta":            evNone,
	"response.shell_call_command.done":             evNone,
	"response.shell_call_output_content.delta":     evNone,
	"response.shell_call_output_content.done":      evNone,
	// vLLM's own, until openai-python's has them (vllm/entrypoints/openai/responses/
	// protocol.py, ResponseReasoningPartAddedEvent and ResponseReasoningPartDoneEvent,
	// which its StreamingResponsesResponse may send): parts, no text.
	"response.reasoning_part.added": evNone,
	"response.reasoning_part.done":  evNone,
}

// DecodeResponses decodes one event of a Responses API stream into c: a text delta is
// output and answer, a reasoning delta (reasoning_text or reasoning_summary_text) output
// and reasoning, a function call's output_item.added and arguments deltas output, answer
// and tool calls, response.completed and response.incomplete the stream's stop with the
// usage (Choices 0: the final usage), response.failed and error a server error. An event
// of a type the reference does not define is an error naming it. The deltas, nearly every
// event of a stream, go through a hand-written scanner that allocates nothing; anything
// else goes through encoding/json (FuzzDecodeResponses checks they agree).
func DecodeResponses(data []byte, c *Chunk) error {
	c.reset()
	p := chunkParser{b: data}
	if p.responsesEvent(c) == nil {
		return nil
	}
	c.reset()
	return decodeResponsesJSON(data, c)
}

// responsesEvent scans the events a stream is made of: those that carry nothing a record
// takes, the text and reasoning deltas, a message's or reasoning's output_item.added and
// the stop with its usage; a function call's events, errors and anything unusual fall
// back to encoding/json.
func (p *chunkParser) responsesEvent(c *Chunk) error {
	var typ, delta, itemType []byte
	var esc, hasDelta, hasResponse, hasItem bool
	var u scannedUsage
	var top seen
	err := p.object(func(k []byte) error {
		var err error
		switch string(k) {
		case "type":
			if err = top.first(0); err == nil {
				var e bool
				typ, e, err = p.str()
				if e {
					err = errFallback
				}
			}
		case "delta":
			if err = top.first(1); err == nil {
				delta, esc, err = p.str()
				hasDelta = true
			}
		case "response":
			if err = top.first(2); err == nil {
				hasResponse = true
				err = p.responseObject(&u)
			}
		case "item":
			if err = top.first(3); err == nil {
				hasItem = true
				itemType, err = p.itemObject()
			}
		case "output_index":
			if err = top.first(4); err == nil {
				_, _, err = p.int32OrNull()
			}
		default:
			err = p.skip(1)
		}
		return err
	})
	if err != nil {
		return err
	}
	p.ws()
	if p.i != len(p.b) || typ == nil {
		return errFallback
	}
	ev, ok := responsesEvents[string(typ)]
	if !ok {
		return errFallback
	}
	switch ev {
	case evNone:
		return nil
	case evText, evReasoning:
		if !hasDelta || len(delta) == 0 {
			return nil
		}
		c.Text, err = appendText(c.Text, delta, esc)
		if err != nil {
			return err
		}
		c.setDelta(ev)
		return nil
	case evItemAdded:
		if !hasItem || string(itemType) == "function_call" {
			return errFallback // a function call's names it: the exact way
		}
		return nil
	case evEnd:
		if !hasResponse {
			return errFallback
		}
		c.Finished = true
		u.set(c)
		return nil
	}
	return errFallback
}

// scannedUsage is a response object's usage as the scanner read it.
type scannedUsage struct {
	usage, hasPrompt, hasCompletion, hasCached, hasReasoning bool
	prompt, completion, cached, reasoning                    int32
}

// set puts the usage in c as the final usage (Choices 0).
func (u *scannedUsage) set(c *Chunk) {
	if !u.usage {
		return
	}
	c.Usage = true
	c.PromptTokens, c.HasPrompt = u.prompt, u.hasPrompt
	c.CompletionTokens, c.HasCompletion = u.completion, u.hasCompletion
	c.Cached, c.HasCached = u.cached, u.hasCached
	c.ReasoningTokens, c.HasReasoningTokens = u.reasoning, u.hasReasoning
}

// responseObject scans an event's response object (not null: that takes the exact way)
// for its usage.
func (p *chunkParser) responseObject(u *scannedUsage) error {
	var rs seen
	return p.object(func(k []byte) error {
		if string(k) != "usage" {
			return p.skip(2)
		}
		if err := rs.first(0); err != nil {
			return err
		}
		if p.null() {
			return nil
		}
		u.usage = true
		var us seen
		return p.object(func(k []byte) error {
			var err error
			switch string(k) {
			case "input_tokens":
				if err = us.first(0); err == nil {
					u.prompt, u.hasPrompt, err = p.int32OrNull()
				}
			case "output_tokens":
				if err = us.first(1); err == nil {
					u.completion, u.hasCompletion, err = p.int32OrNull()
				}
			case "input_tokens_details":
				if err = us.first(2); err == nil {
					err = p.detail("cached_tokens", &u.cached, &u.hasCached)
				}
			case "output_tokens_details":
				if err = us.first(3); err == nil {
					err = p.detail("reasoning_tokens", &u.reasoning, &u.hasReasoning)
				}
			default:
				err = p.skip(3)
			}
			return err
		})
	})
}

// detail scans a usage's details object (or null) for its count named name.
func (p *chunkParser) detail(name string, v *int32, has *bool) error {
	if p.null() {
		return nil
	}
	var ds seen
	return p.object(func(k []byte) error {
		if string(k) != name {
			return p.skip(4)
		}
		if err := ds.first(0); err != nil {
			return err
		}
		var err error
		*v, *has, err = p.int32OrNull()
		return err
	})
}

// itemObject scans an event's output item (not null) and returns its type; the fields
// the exact way reads (type, call_id, name) must be strings or null there too.
func (p *chunkParser) itemObject() ([]byte, error) {
	var typ []byte
	var is seen
	err := p.object(func(k []byte) error {
		var bit uint
		switch string(k) {
		case "type":
		case "call_id":
			bit = 1
		case "name":
			bit = 2
		default:
			return p.skip(2)
		}
		if err := is.first(bit); err != nil {
			return err
		}
		if p.null() {
			return nil
		}
		raw, esc, err := p.str()
		if err == nil && bit == 0 {
			if esc {
				return errFallback
			}
			typ = raw
		}
		return err
	})
	return typ, err
}

// setDelta marks c, whose Text holds a text or reasoning delta, as the event ev says.
func (c *Chunk) setDelta(ev responsesEvent) {
	c.Output, c.Choices = true, 1
	if ev == evReasoning {
		c.Reasoning = append(c.Reasoning, c.Text...)
	} else {
		c.Answer = true
	}
}

// appendText appends the decoded content of a string scanned by str, without allocating
// for the escapes text carries (\n, \", \\, \t...); a \u escape goes through
// encoding/json (appendStr), which also decides surrogates and replacements.
func appendText(dst, raw []byte, esc bool) ([]byte, error) {
	if !esc || bytes.Contains(raw, []byte(`\u`)) {
		return appendStr(dst, raw, esc)
	}
	if !utf8.Valid(raw) {
		return dst, errFallback
	}
	for i := 0; i < len(raw); i++ {
		ch := raw[i]
		if ch != '\\' {
			dst = append(dst, ch)
			continue
		}
		i++ // str validated the escape: a byte follows
		switch raw[i] {
		case 'n':
			ch = '\n'
		case 't':
			ch = '\t'
		case 'r':
			ch = '\r'
		case 'b':
			ch = '\b'
		case 'f':
			ch = '\f'
		default: // ", \ and /
			ch = raw[i]
		}
		dst = append(dst, ch)
	}
	return dst, nil
}

// responsesUsage is the Responses API's usage object.
type responsesUsage struct {
	InputTokens        *int32 `json:"input_tokens"`
	OutputTokens       *int32 `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens *int32 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails *struct {
		ReasoningTokens *int32 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

// errNoType is the error of an event without a type.
var errNoType = errors.New(`event without a "type"`)

// decodeResponsesJSON is the exact path: the event's type first, then the fields its type
// has, each with encoding/json.
func decodeResponsesJSON(data []byte, c *Chunk) error {
	var head struct {
		Type  *string         `json:"type"`
		Delta json.RawMessage `json:"delta"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return err
	}
	if head.Type == nil {
		return errNoType
	}
	typ := *head.Type
	ev, ok := responsesEvents[typ]
	if !ok {
		return fmt.Errorf("unknown event type %q (not in OpenAI's Responses streaming events)", ShortText([]byte(typ)))
	}
	switch ev {
	case evText, evReasoning:
		var s string
		if len(head.Delta) > 0 {
			if err := json.Unmarshal(head.Delta, &s); err != nil {
				return fmt.Errorf("%s: delta: %w", typ, err)
			}
		}
		if s != "" {
			c.Text = append(c.Text, s...)
			c.setDelta(ev)
		}
	case evToolArgs:
		var e struct {
			Delta       string `json:"delta"`
			OutputIndex int    `json:"output_index"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("%s: %w", typ, err)
		}
		if e.Delta != "" {
			c.Output, c.Answer, c.Choices = true, true, 1
			c.ToolCalls = append(c.ToolCalls, ToolCallDelta{Index: e.OutputIndex, Arguments: e.Delta})
		}
	case evItemAdded:
		return decodeItemAdded(data, c)
	case evEnd:
		return decodeResponseEnd(data, c, typ)
	case evFailed:
		var e struct {
			Response *struct {
				Error *apiError `json:"error"`
			} `json:"response"`
		}
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("%s: %w", typ, err)
		}
		c.IsError, c.ErrorMessage = true, "response.failed"
		if e.Response != nil && e.Response.Error != nil {
			c.ErrorMessage = "response.failed: " + e.Response.Error.text()
		}
	case evError:
		var e apiError
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("%s: %w", typ, err)
		}
		c.IsError, c.ErrorMessage = true, e.text()
	}
	return nil
}

// apiError is the error of an error event or of a failed response.
type apiError struct {
	Code    *string `json:"code"`
	Message string  `json:"message"`
}

func (e apiError) text() string {
	msg := e.Message
	if msg == "" {
		msg = "no message"
	}
	if e.Code != nil && *e.Code != "" {
		return *e.Code + ": " + msg
	}
	return msg
}

// decodeItemAdded decodes response.output_item.added: a function call's names the call,
// its name being the call's first generated tokens (as chat's first tool-call delta). Its
// item's arguments are not taken: vLLM's (simple_streaming_events.py,
// _event_add_tc_output_item) repeat the first piece, which the arguments delta right
// after it carries again; OpenAI's are empty.
func decodeItemAdded(data []byte, c *Chunk) error {
	var e struct {
		OutputIndex int `json:"output_index"`
		Item        *struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
			Name   string `json:"name"`
		} `json:"item"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return fmt.Errorf("response.output_item.added: %w", err)
	}
	if e.Item == nil || e.Item.Type != "function_call" {
		return nil
	}
	c.Output, c.Answer, c.Choices = true, true, 1
	c.ToolCalls = append(c.ToolCalls, ToolCallDelta{Index: e.OutputIndex, ID: e.Item.CallID, Type: "function", Name: e.Item.Name})
	return nil
}

// decodeResponseEnd decodes response.completed and response.incomplete: the stream's stop
// and the response's usage. An incomplete response (cut by max_output_tokens, the normal
// end of a request asking for an exact length, or by a content filter) ends as chat's
// finish_reason "length" or "content_filter" does: finished, its usage the output it had.
func decodeResponseEnd(data []byte, c *Chunk, typ string) error {
	var e struct {
		Response *struct {
			Usage *responsesUsage `json:"usage"`
		} `json:"response"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return fmt.Errorf("%s: %w", typ, err)
	}
	c.Finished = true
	if e.Response == nil || e.Response.Usage == nil {
		return nil
	}
	e.Response.Usage.set(c)
	return nil
}

// set puts u in c as the final usage (Choices 0).
func (u *responsesUsage) set(c *Chunk) {
	c.Usage = true
	if u.InputTokens != nil {
		c.PromptTokens, c.HasPrompt = *u.InputTokens, true
	}
	if u.OutputTokens != nil {
		c.CompletionTokens, c.HasCompletion = *u.OutputTokens, true
	}
	if d := u.InputTokensDetails; d != nil && d.CachedTokens != nil {
		c.Cached, c.HasCached = *d.CachedTokens, true
	}
	if d := u.OutputTokensDetails; d != nil && d.ReasoningTokens != nil {
		c.ReasoningTokens, c.HasReasoningTokens = *d.ReasoningTokens, true
	}
}
