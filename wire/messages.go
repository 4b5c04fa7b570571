package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// messagesKind is Anthropic's Messages API (https://docs.anthropic.com/en/api/messages):
// POST /messages with "messages" (user and assistant turns only: a system message goes in
// the top-level "system"), a required max_tokens, the key in x-api-key and the
// anthropic-version header. Its stream is typed events (message_start, content_block_*,
// message_delta, message_stop, ping, error) that carry their usage unasked. vLLM, SGLang
// and Ollama serve it by converting the request to their chat request field by field,
// which drops ignore_eos and min_tokens (capOnly; docs/replay.md cites the sources).
var messagesKind = Kind{
	Name:           APIMessages,
	Path:           "/messages",
	StreamsUsage:   true,
	KeyHeader:      "x-api-key",
	Headers:        map[string]string{"anthropic-version": "2023-06-01"},
	Stop:           "message_stop",
	LengthFields:   capOnly,
	AppendPrompt:   appendMessagesPrompt,
	AppendMessages: appendMessagesMessages,
	AppendTools:    appendMessagesTools,
	Decode:         DecodeMessages,
	// Anthropic's reference (docs.anthropic.com/en/api/messages, image content blocks
	// with a base64 source), which vLLM's AnthropicMessagesRequest converts to chat's
	// image_url parts.
	AppendUserMessage: appendMessagesUserMessage,
}

// appendMessagesUserMessage appends a user message whose content is one image block per
// image, then a text block (none when text is empty: the API refuses an empty one):
// images before the text, as Anthropic's vision guide advises and its examples do.
func appendMessagesUserMessage(b, text []byte, images []Image) []byte {
	b = append(b, `{"role":"user","content":[`...)
	for i, img := range images {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"image","source":{"type":"base64","media_type":"`...)
		b = AppendJSONContent(b, []byte(img.MIME))
		b = append(b, `","data":"`...)
		b = append(b, img.Base64...)
		b = append(b, `"}}`...)
	}
	if len(text) > 0 {
		if len(images) > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"text","text":"`...)
		b = append(b, text...)
		b = append(b, `"}`...)
	}
	return append(b, `]}`...)
}

// capOnly: no length-forcing field reaches the sampler through the API, whatever the
// backend; its lengths are upper bounds.
func capOnly(Backend) LengthFields { return LengthFields{} }

func appendMessagesPrompt(b, prompt []byte, _ bool) []byte {
	b = append(b, `,"messages":[{"role":"user","content":`...)
	b = AppendJSONBytes(b, prompt)
	return append(b, `}]}`...)
}

// systemMessage is how a conversation's system message starts when llmreplay builds it.
var systemMessage = []byte(`{"role":"system","content":`)

// appendMessagesMessages appends the conversation, a leading system message (as a string
// content, in the form llmreplay builds) moved to the top-level "system": the API takes
// only user and assistant messages.
func appendMessagesMessages(b, messages []byte) []byte {
	if bytes.HasPrefix(messages, systemMessage) {
		p := chunkParser{b: messages, i: len(systemMessage)}
		if _, _, err := p.str(); err == nil && p.i < len(messages) && messages[p.i] == '}' {
			content, rest := messages[len(systemMessage):p.i], messages[p.i+1:]
			if len(rest) == 0 || rest[0] == ',' {
				b = append(b, `,"system":`...)
				b = append(b, content...)
				messages = bytes.TrimPrefix(rest, []byte(","))
			}
		}
	}
	b = append(b, `,"messages":[`...)
	b = append(b, messages...)
	return append(b, `]}`...)
}

// appendMessagesTools appends one tool in the Messages API's shape (name, description,
// input_schema).
func appendMessagesTools(b, desc []byte) []byte {
	b = append(b, `,"tools":[{"name":"tool_0","description":"`...)
	b = append(b, desc...)
	return append(b, `","input_schema":{"type":"object","properties":{}}}]`...)
}

// DecodeMessages decodes one event of a Messages API stream into c, reading its usage as
// SGLang writes it (input_tokens is the whole prompt, cache_read_input_tokens the part of
// it that hit the cache): Kind.Decode of the messages kind. A client decodes through
// Encoder.Decode, which reads it as the backend writes it. What each event means for a Chunk:
//
//	message_start        usage (Choices 0): input_tokens, cache_read_input_tokens (none
//	                     when the prompt comes to 0); its output_tokens is a
//	                     placeholder (0 or 1) and is not taken
//	content_block_start  Choices 1; a tool_use block names a call (ToolCalls, Output,
//	                     Answer); a text or thinking block's initial text is output
//	content_block_delta  Choices 1; text_delta (Output, Answer), thinking_delta (Output,
//	                     Reasoning), input_json_delta (ToolCalls' arguments, Output,
//	                     Answer), signature_delta and citations_delta (no output)
//	content_block_stop   Choices 1, nothing else
//	message_delta        usage (Choices 0): the cumulative output_tokens, and the
//	                     prompt's counts when it repeats them (vLLM, SGLang, Ollama do)
//	message_stop         Finished: the stream's stop
//	ping                 nothing
//	error                IsError with the error's message
//
// Any other event type, or a content_block_delta of another delta type, is an error
// naming it. Every event but tool calls and errors is read by a scanner that allocates
// nothing; anything unusual goes to encoding/json, the reference (FuzzDecodeMessages
// checks that they agree).
func DecodeMessages(data []byte, c *Chunk) error { return decodeMessages(data, c, false) }

// decodeMessages is DecodeMessages; uncached reads input_tokens as Anthropic's reference
// defines it, the prompt's uncached part, so that the prompt is input_tokens plus
// cache_read_input_tokens plus cache_creation_input_tokens.
func decodeMessages(data []byte, c *Chunk, uncached bool) error {
	c.reset()
	p := chunkParser{b: data}
	if p.messagesEvent(c, uncached) == nil {
		return nil
	}
	c.reset()
	return decodeMessagesJSON(data, c, uncached)
}

// messagesUsageJSON is a usage object as encoding/json reads it.
type messagesUsageJSON struct {
	InputTokens              *int32 `json:"input_tokens"`
	OutputTokens             *int32 `json:"output_tokens"`
	CacheReadInputTokens     *int32 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int32 `json:"cache_creation_input_tokens"`
}

// messagesEventJSON is one event as encoding/json reads it: the fields of every event
// type the reference defines that a Chunk takes.
type messagesEventJSON struct {
	Type    string `json:"type"`
	Index   *int   `json:"index"`
	Message *struct {
		Usage *messagesUsageJSON `json:"usage"`
	} `json:"message"`
	ContentBlock *messagesBlockJSON `json:"content_block"`
	Delta        *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		PartialJSON string `json:"partial_json"`
	} `json:"delta"`
	Usage *messagesUsageJSON `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// messagesBlockJSON is a content block: a stream's content_block_start, or an element of
// an answer's content (answer.go).
type messagesBlockJSON struct {
	Type     string `json:"type"`
	ID       string `json:"id"`
	Name     string `json:"name"`
	Text     string `json:"text"`
	Thinking string `json:"thinking"`
}

// contentBlock takes a content block at index: text is answer output, thinking
// reasoning, a tool_use block names a call.
func (c *Chunk) contentBlock(b *messagesBlockJSON, index int) {
	switch b.Type {
	case "text":
		c.output(b.Text, true)
	case "thinking":
		c.output(b.Thinking, false)
	case "tool_use":
		c.Output, c.Answer = true, true
		c.ToolCalls = append(c.ToolCalls, ToolCallDelta{Index: index, ID: b.ID, Type: "tool_use", Name: b.Name})
	}
}

// decodeMessagesJSON is the exact, slower path.
func decodeMessagesJSON(data []byte, c *Chunk, uncached bool) error {
	var ev messagesEventJSON
	if err := json.Unmarshal(data, &ev); err != nil {
		return err
	}
	index := 0
	if ev.Index != nil {
		index = *ev.Index
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil && ev.Message.Usage != nil {
			c.messagesUsage(ev.Message.Usage, uncached, false)
		}
	case "message_delta":
		if ev.Usage != nil {
			c.messagesUsage(ev.Usage, uncached, true)
		}
	case "content_block_start":
		c.Choices = 1
		if b := ev.ContentBlock; b != nil {
			c.contentBlock(b, index)
		}
	case "content_block_delta":
		c.Choices = 1
		d := ev.Delta
		if d == nil {
			return errors.New("content_block_delta event without a delta")
		}
		switch d.Type {
		case "text_delta":
			c.output(d.Text, true)
		case "thinking_delta":
			c.output(d.Thinking, false)
		case "input_json_delta":
			if d.PartialJSON != "" {
				c.Output, c.Answer = true, true
				c.ToolCalls = append(c.ToolCalls, ToolCallDelta{Index: index, Arguments: d.PartialJSON})
			}
		case "signature_delta", "citations_delta":
		default:
			return fmt.Errorf("content_block_delta of unknown delta type %q", d.Type)
		}
	case "content_block_stop":
		c.Choices = 1
	case "message_stop":
		c.Finished = true
	case "ping":
	case "error":
		c.IsError, c.ErrorMessage = true, "error event"
		if e := ev.Error; e != nil && e.Message != "" {
			c.ErrorMessage = e.Type + ": " + e.Message
		} else if e != nil && e.Type != "" {
			c.ErrorMessage = e.Type
		}
	case "":
		return errors.New("event without a type")
	default:
		return fmt.Errorf("unknown event type %q", ev.Type)
	}
	return nil
}

// output takes a text or thinking piece: output when not empty, answer when text.
func (c *Chunk) output(s string, answer bool) {
	if s == "" {
		return
	}
	c.Output = true
	c.Text = append(c.Text, s...)
	if answer {
		c.Answer = true
	} else {
		c.Reasoning = append(c.Reasoning, s...)
	}
}

// messagesUsage takes a message_start's or message_delta's usage (output: its
// output_tokens too). The prompt is input_tokens, plus with uncached the cache reads and
// writes the reference keeps apart; the cache hit is cache_read_input_tokens. A
// message_start whose prompt comes to 0 says nothing of it: SGLang's holds zeros there
// before its chat stream has a usage (no prompt is empty), and a record cut before
// message_delta keeps its prompt counts null rather than 0.
func (c *Chunk) messagesUsage(u *messagesUsageJSON, uncached, output bool) {
	c.Usage = true
	if u.InputTokens != nil {
		n := int64(*u.InputTokens)
		if uncached && u.CacheReadInputTokens != nil {
			n += int64(*u.CacheReadInputTokens)
		}
		if uncached && u.CacheCreationInputTokens != nil {
			n += int64(*u.CacheCreationInputTokens)
		}
		if n == 0 && !output {
			return
		}
		c.PromptTokens, c.HasPrompt = int32(min(max(n, math.MinInt32), math.MaxInt32)), true
	}
	if u.CacheReadInputTokens != nil {
		c.Cached, c.HasCached = *u.CacheReadInputTokens, true
	}
	if output && u.OutputTokens != nil {
		c.CompletionTokens, c.HasCompletion = *u.OutputTokens, true
	}
}

// messagesScan is an event as the scanner saw it: every field it may take, validated as
// encoding/json would read it into messagesEventJSON, and applied once the type is known
// (a key may come before "type").
type messagesScan struct {
	typ                        []byte
	delta, block, usage, msgUs bool // which objects came
	d                          messagesStrings
	b                          messagesStrings
	u, mu                      messagesUsageScan
}

// messagesStrings are a delta's or a content block's string fields.
type messagesStrings struct {
	typ, text, thinking  []byte
	textEsc, thinkingEsc bool
}

// messagesUsageScan is a usage object's counts; has* say which were numbers.
type messagesUsageScan struct {
	input, output, cacheRead, cacheCreation             int32
	hasInput, hasOutput, hasCacheRead, hasCacheCreation bool
}

// messagesEvent scans the events a stream is made of in the shapes the reference and the
// engines write: message_start, a text or thinking content_block_start, a text, thinking
// or signature content_block_delta, content_block_stop, message_delta, message_stop and
// ping. Tool calls, errors, unknown types and any key or value it does not expect go to
// encoding/json.
func (p *chunkParser) messagesEvent(c *Chunk, uncached bool) error {
	var top seen
	var s messagesScan
	err := p.object(func(k []byte) error {
		switch string(k) {
		case "type":
			if err := top.first(0); err != nil {
				return err
			}
			raw, esc, err := p.str()
			if err != nil || esc {
				return errFallback
			}
			s.typ = raw
			return nil
		case "index":
			if err := top.first(1); err != nil {
				return err
			}
			return p.intOrNull()
		case "delta":
			if err := top.first(2); err != nil {
				return err
			}
			s.delta = true
			return p.messagesStrings(&s.d, true)
		case "content_block":
			if err := top.first(3); err != nil {
				return err
			}
			s.block = true
			return p.messagesStrings(&s.b, false)
		case "usage":
			if err := top.first(4); err != nil {
				return err
			}
			s.usage = true
			return p.messagesUsage(&s.u)
		case "message":
			if err := top.first(5); err != nil {
				return err
			}
			return p.messagesMessage(&s)
		}
		return errFallback
	})
	if err != nil {
		return err
	}
	p.ws()
	if p.i != len(p.b) {
		return errFallback
	}
	return s.apply(c, uncached)
}

// apply gives c what the scanned event says, or falls back for what the scanner leaves to
// encoding/json.
func (s *messagesScan) apply(c *Chunk, uncached bool) error {
	switch string(s.typ) {
	case "content_block_delta":
		if !s.delta {
			return errFallback
		}
		// Tool arguments, citations and unknown types fall back: the exact way.
		return c.piece(&s.d, "text_delta", "thinking_delta", "signature_delta")
	case "content_block_start":
		if !s.block {
			return errFallback
		}
		return c.piece(&s.b, "text", "thinking", "")
	case "message_start":
		if s.msgUs {
			c.takeUsage(&s.mu, uncached, false)
		}
	case "message_delta":
		if s.usage {
			c.takeUsage(&s.u, uncached, true)
		}
	case "content_block_stop":
		c.Choices = 1
	case "message_stop":
		c.Finished = true
	case "ping":
	default:
		return errFallback
	}
	return nil
}

// piece takes a scanned delta or block start of a text or thinking kind (textType,
// thinkingType), or of quiet, a kind that carries no output ("" for none); any other kind
// falls back.
func (c *Chunk) piece(f *messagesStrings, textType, thinkingType, quiet string) error {
	c.Choices = 1
	switch t := string(f.typ); {
	case t == textType:
		return c.scanned(f.text, f.textEsc, true)
	case t == thinkingType:
		return c.scanned(f.thinking, f.thinkingEsc, false)
	case quiet != "" && t == quiet:
		return nil
	}
	return errFallback
}

// scanned takes a text or thinking piece as scanned (Chunk.output).
func (c *Chunk) scanned(raw []byte, esc, answer bool) error {
	n := len(c.Text)
	var err error
	if c.Text, err = appendStr(c.Text, raw, esc); err != nil {
		return err
	}
	if len(c.Text) > n {
		c.Output = true
		if answer {
			c.Answer = true
		} else {
			c.Reasoning = append(c.Reasoning, c.Text[n:]...)
		}
	}
	return nil
}

// takeUsage is messagesUsage for a scanned usage.
func (c *Chunk) takeUsage(u *messagesUsageScan, uncached, output bool) {
	j := messagesUsageJSON{}
	if u.hasInput {
		j.InputTokens = &u.input
	}
	if u.hasOutput {
		j.OutputTokens = &u.output
	}
	if u.hasCacheRead {
		j.CacheReadInputTokens = &u.cacheRead
	}
	if u.hasCacheCreation {
		j.CacheCreationInputTokens = &u.cacheCreation
	}
	c.messagesUsage(&j, uncached, output)
}

// intOrNull scans an integer that fits an int, or null, as encoding/json reads an *int.
func (p *chunkParser) intOrNull() error {
	if p.null() {
		return nil
	}
	t, err := p.number()
	if err != nil {
		return err
	}
	if _, err := strconv.ParseInt(string(t), 10, 64); err != nil {
		return errFallback
	}
	return nil
}

// messagesStrings scans a delta or a content block: an object of string fields type,
// text, thinking and signature, and for a delta (message_delta's) stop_reason and
// stop_sequence, which the reference decoder ignores whatever they hold.
func (p *chunkParser) messagesStrings(d *messagesStrings, delta bool) error {
	var ds seen
	return p.object(func(k []byte) error {
		var bit uint
		switch string(k) {
		case "type":
			bit = 0
		case "text":
			bit = 1
		case "thinking":
			bit = 2
		case "signature":
			bit = 3
		case "stop_reason", "stop_sequence":
			if !delta {
				return errFallback
			}
			bit = uint(len(k)) // 11 and 13
			if err := ds.first(bit); err != nil {
				return err
			}
			return p.skip(2)
		default:
			return errFallback
		}
		if err := ds.first(bit); err != nil {
			return err
		}
		raw, esc, err := p.str()
		if err != nil {
			return err
		}
		switch bit {
		case 0:
			if esc {
				return errFallback
			}
			d.typ = raw
		case 1:
			d.text, d.textEsc = raw, esc
		case 2:
			d.thinking, d.thinkingEsc = raw, esc
		}
		return nil
	})
}

// messagesMessage scans message_start's message: its usage, every other field skipped
// (the reference decoder reads the usage alone).
func (p *chunkParser) messagesMessage(s *messagesScan) error {
	var ms seen
	return p.object(func(k []byte) error {
		if string(k) != "usage" {
			return p.skip(2)
		}
		if err := ms.first(0); err != nil {
			return err
		}
		if p.null() {
			return nil
		}
		s.msgUs = true
		return p.messagesUsage(&s.mu)
	})
}

// messagesUsage scans a usage object's counts; its other fields (service_tier,
// cache_creation's breakdown) are skipped.
func (p *chunkParser) messagesUsage(u *messagesUsageScan) error {
	if p.peek() != '{' {
		return errFallback // null: the reference decoder's nil usage is not worth a path
	}
	var us seen
	return p.object(func(k []byte) error {
		var err error
		switch string(k) {
		case "input_tokens":
			if err = us.first(0); err == nil {
				u.input, u.hasInput, err = p.int32OrNull()
			}
		case "output_tokens":
			if err = us.first(1); err == nil {
				u.output, u.hasOutput, err = p.int32OrNull()
			}
		case "cache_read_input_tokens":
			if err = us.first(2); err == nil {
				u.cacheRead, u.hasCacheRead, err = p.int32OrNull()
			}
		case "cache_creation_input_tokens":
			if err = us.first(3); err == nil {
				u.cacheCreation, u.hasCacheCreation, err = p.int32OrNull()
			}
		default:
			err = p.skip(3)
		}
		return err
	})
}
