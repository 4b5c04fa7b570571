package sim

import (
	"strconv"
)

// The event-stream APIs' shapes: Anthropic Messages and OpenAI Responses, as vLLM streams
// them. Each event is "event: TYPE\ndata: JSON\n\n" and the stream has no [DONE].
//
// Messages follows vllm/entrypoints/anthropic/serving.py (message_stream_converter, which
// turns vLLM's chat chunks into events; pydantic's model_dump_json(exclude_unset=True)
// gives each object's fields in its class's order, vllm/entrypoints/anthropic/protocol.py):
// message_start with the first token (vLLM makes it of the chat stream's first chunk),
// then per content block content_block_start, its deltas and content_block_stop (a
// thinking block ends with a signature_delta first), then message_delta (stop_reason,
// usage) and message_stop. The usage's cache fields follow vLLM's Anthropic usage
// mapping (vllm-project/vllm pull request 40912): with prompt-token details on (the
// sim's prefix cache), input_tokens is the prompt less its cached tokens, which
// cache_read_input_tokens holds, and cache_creation_input_tokens is 0; without them,
// input_tokens is the whole prompt. The sim sends the same usage in message_start.
//
// Responses follows vllm/entrypoints/openai/responses/simple_streaming_events.py (the
// items and their events) and serving.py (response.created and response.in_progress
// before any token, response.completed at the end, its status "incomplete" when the
// output hit max_output_tokens; the sequence numbers count the events from 0), each event
// an openai-python type dumped in its fields' order by api_router.py's
// "event: TYPE\ndata: JSON". The response object carries the fields a client reads (id,
// created_at, incomplete_details, model, object, output, max_output_tokens, status,
// usage), not every field vLLM echoes from the request.

// appendWords appends the output words of tokens [from, to).
func (c *chunker) appendWords(b []byte, from, to int) []byte {
	for i := from; i < to; i++ {
		b = append(b, words[(i+c.wordOff)%len(words)]...)
	}
	return b
}

// appendEvent appends an event's name line and the start of its data line.
func appendEvent(b []byte, typ string) []byte {
	b = append(b, "event: "...)
	b = append(b, typ...)
	return append(b, "\ndata: "...)
}

// appendInt appends k (a JSON key with its punctuation) and the number v.
func appendInt(b []byte, k string, v int) []byte {
	b = append(b, k...)
	return strconv.AppendInt(b, int64(v), 10)
}

// phases reports whether the output has a reasoning part and an answer part.
func (c *chunker) phases() (thinking, answer bool) {
	return c.reasoning > 0, c.reasoning < c.target
}

// ---- Anthropic Messages ----

// stopReason is the Messages stop_reason of the finish reason, as vLLM maps it.
func (c *chunker) stopReason() string {
	if c.finish == "length" {
		return "max_tokens"
	}
	return "end_turn"
}

// appendMessagesUsage appends the usage object with output tokens.
func (c *chunker) appendMessagesUsage(b []byte, output int) []byte {
	in := c.prompt
	if c.details {
		in -= c.cached
	}
	b = appendInt(b, `{"input_tokens":`, in)
	b = appendInt(b, `,"output_tokens":`, output)
	if c.details {
		b = append(b, `,"cache_creation_input_tokens":0`...)
		b = appendInt(b, `,"cache_read_input_tokens":`, c.cached)
	}
	return append(b, '}')
}

// appendBlockStart appends content_block_start of block index: thinking or text.
func appendBlockStart(b []byte, index int, thinking bool) []byte {
	b = appendEvent(b, "content_block_start")
	if thinking {
		b = append(b, `{"type":"content_block_start","content_block":{"type":"thinking","thinking":""}`...)
	} else {
		b = append(b, `{"type":"content_block_start","content_block":{"type":"text","text":""}`...)
	}
	b = appendInt(b, `,"index":`, index)
	return append(b, "}\n\n"...)
}

// appendBlockStop appends the end of block index; a thinking block's signature first.
func (c *chunker) appendBlockStop(b []byte, index int, thinking bool) []byte {
	if thinking {
		b = appendEvent(b, "content_block_delta")
		b = append(b, `{"type":"content_block_delta","delta":{"type":"signature_delta","signature":"`...)
		b = append(b, c.sig...)
		b = appendInt(b, `"},"index":`, index)
		b = append(b, "}\n\n"...)
	}
	b = appendEvent(b, "content_block_stop")
	b = appendInt(b, `{"type":"content_block_stop","index":`, index)
	return append(b, "}\n\n"...)
}

// appendMessagesStart appends message_start and the first block's start.
func (c *chunker) appendMessagesStart(b []byte) []byte {
	b = appendEvent(b, "message_start")
	b = append(b, `{"type":"message_start","message":{"id":"`...)
	b = append(b, c.id...)
	b = append(b, `","content":[],"model":`...)
	b = append(b, c.model...)
	b = append(b, `,"stop_reason":null,"stop_sequence":null,"usage":`...)
	b = c.appendMessagesUsage(b, 0)
	b = append(b, "}}\n\n"...)
	return appendBlockStart(b, 0, c.reasoning > 0)
}

// appendMessagesToken appends token i's delta, and before the first answer token the
// thinking block's end and the text block's start.
func (c *chunker) appendMessagesToken(b []byte, i int) []byte {
	index, thinking := 0, i < c.reasoning
	if c.reasoning > 0 && !thinking {
		index = 1
		if i == c.reasoning {
			b = c.appendBlockStop(b, 0, true)
			b = appendBlockStart(b, 1, false)
		}
	}
	b = appendEvent(b, "content_block_delta")
	if thinking {
		b = append(b, `{"type":"content_block_delta","delta":{"type":"thinking_delta","thinking":"`...)
	} else {
		b = append(b, `{"type":"content_block_delta","delta":{"type":"text_delta","text":"`...)
	}
	b = append(b, words[(i+c.wordOff)%len(words)]...)
	b = appendInt(b, `"},"index":`, index)
	return append(b, "}\n\n"...)
}

// appendMessagesEnd appends the last block's stop, message_delta and message_stop.
func (c *chunker) appendMessagesEnd(b []byte) []byte {
	thinking, answer := c.phases()
	index := 0
	if thinking && answer {
		index = 1
	}
	b = c.appendBlockStop(b, index, !answer)
	b = appendEvent(b, "message_delta")
	b = append(b, `{"type":"message_delta","delta":{"stop_reason":"`...)
	b = append(b, c.stopReason()...)
	b = append(b, `"},"usage":`...)
	b = c.appendMessagesUsage(b, c.target)
	b = append(b, "}\n\n"...)
	b = appendEvent(b, "message_stop")
	return append(b, `{"type":"message_stop"}`+"\n\n"...)
}

// appendMessagesWhole appends the non-streaming answer (vLLM's messages_full_converter,
// dumped with exclude_none).
func (c *chunker) appendMessagesWhole(b []byte) []byte {
	b = append(b, `{"id":"`...)
	b = append(b, c.id...)
	b = append(b, `","type":"message","role":"assistant","content":[`...)
	thinking, answer := c.phases()
	if thinking {
		b = append(b, `{"type":"thinking","thinking":"`...)
		b = c.appendWords(b, 0, c.reasoning)
		b = append(b, `","signature":"`...)
		b = append(b, c.sig...)
		b = append(b, `"}`...)
	}
	if answer {
		if thinking {
			b = append(b, ',')
		}
		b = append(b, `{"type":"text","text":"`...)
		b = c.appendWords(b, c.reasoning, c.target)
		b = append(b, `"}`...)
	}
	b = append(b, `],"model":`...)
	b = append(b, c.model...)
	b = append(b, `,"stop_reason":"`...)
	b = append(b, c.stopReason()...)
	b = append(b, `","usage":`...)
	b = c.appendMessagesUsage(b, c.target)
	return append(b, '}')
}

// ---- OpenAI Responses ----

// appendItemID appends the reasoning item's or the message item's id, made of the
// response id.
func (c *chunker) appendItemID(b []byte, reasoning bool) []byte {
	if reasoning {
		b = append(b, "rs_"...)
	} else {
		b = append(b, "msg_"...)
	}
	return append(b, c.id[len("resp_"):]...)
}

// seqOf is the sequence number of token i's delta event: two events (created,
// in_progress) before the first item's two (added, part added), and five between the
// reasoning item's last delta and the message's first (three done, two added).
func (c *chunker) seqOf(i int) int {
	n := 4 + i
	if c.reasoning > 0 && i >= c.reasoning {
		n += 5
	}
	return n
}

// appendResponse appends the response object; final adds the output and the usage.
func (c *chunker) appendResponse(b []byte, final bool) []byte {
	b = append(b, `{"id":"`...)
	b = append(b, c.id...)
	b = appendInt(b, `","created_at":`, int(c.created))
	status := "in_progress"
	if final && c.finish == "length" {
		status = "incomplete"
		b = append(b, `,"incomplete_details":{"reason":"max_output_tokens"}`...)
	} else {
		if final {
			status = "completed"
		}
		b = append(b, `,"incomplete_details":null`...)
	}
	b = append(b, `,"model":`...)
	b = append(b, c.model...)
	b = append(b, `,"object":"response","output":[`...)
	if final {
		thinking, answer := c.phases()
		if thinking {
			b = c.appendReasoningItem(b, true)
		}
		if answer {
			if thinking {
				b = append(b, ',')
			}
			b = c.appendMessageItem(b, true)
		}
	}
	b = appendInt(b, `],"max_output_tokens":`, c.maxTokens)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","usage":`...)
	if !final {
		return append(b, "null}"...)
	}
	b = appendInt(b, `{"input_tokens":`, c.prompt)
	b = appendInt(b, `,"input_tokens_details":{"cached_tokens":`, c.cached)
	b = appendInt(b, `},"output_tokens":`, c.target)
	b = appendInt(b, `,"output_tokens_details":{"reasoning_tokens":`, c.reasoning)
	b = appendInt(b, `},"total_tokens":`, c.prompt+c.target)
	return append(b, "}}"...)
}

// appendReasoningItem appends the reasoning item, in progress (empty) or done.
func (c *chunker) appendReasoningItem(b []byte, done bool) []byte {
	b = append(b, `{"id":"`...)
	b = c.appendItemID(b, true)
	b = append(b, `","summary":[],"type":"reasoning","content":`...)
	if !done {
		return append(b, `null,"encrypted_content":null,"status":"in_progress"}`...)
	}
	b = append(b, `[{"text":"`...)
	b = c.appendWords(b, 0, c.reasoning)
	return append(b, `","type":"reasoning_text"}],"encrypted_content":null,"status":"completed"}`...)
}

// appendMessageItem appends the message item, in progress (empty) or done.
func (c *chunker) appendMessageItem(b []byte, done bool) []byte {
	b = append(b, `{"id":"`...)
	b = c.appendItemID(b, false)
	if !done {
		return append(b, `","content":[],"role":"assistant","status":"in_progress","type":"message"}`...)
	}
	b = append(b, `","content":[`...)
	b = c.appendOutputText(b, true)
	return append(b, `],"role":"assistant","status":"completed","type":"message"}`...)
}

// appendOutputText appends the message's output_text part, empty or whole.
func (c *chunker) appendOutputText(b []byte, whole bool) []byte {
	b = append(b, `{"annotations":[],"text":"`...)
	if whole {
		b = c.appendWords(b, c.reasoning, c.target)
	}
	return append(b, `","type":"output_text","logprobs":[]}`...)
}

// appendResponsesPreamble appends response.created and response.in_progress, which vLLM
// sends as the stream opens, before any token.
func (c *chunker) appendResponsesPreamble(b []byte) []byte {
	for seq, typ := range [...]string{"response.created", "response.in_progress"} {
		b = appendEvent(b, typ)
		b = append(b, `{"response":`...)
		b = c.appendResponse(b, false)
		b = appendInt(b, `,"sequence_number":`, seq)
		b = append(b, `,"type":"`...)
		b = append(b, typ...)
		b = append(b, "\"}\n\n"...)
	}
	return b
}

// appendItemStart appends an item's output_item.added and content_part.added, the
// first of them numbered seq.
func (c *chunker) appendItemStart(b []byte, reasoning bool, seq int) []byte {
	b = c.appendItemEvent(b, reasoning, false, seq)
	return c.appendPartEvent(b, reasoning, false, seq+1)
}

// outputIndex is the item's place in the output: the reasoning item first.
func (c *chunker) outputIndex(reasoning bool) int {
	if !reasoning && c.reasoning > 0 {
		return 1
	}
	return 0
}

// appendItemEvent appends output_item.added (done false, the item empty) or
// output_item.done (the item whole), numbered seq.
func (c *chunker) appendItemEvent(b []byte, reasoning, done bool, seq int) []byte {
	typ := "response.output_item.added"
	if done {
		typ = "response.output_item.done"
	}
	b = appendEvent(b, typ)
	b = append(b, `{"item":`...)
	if reasoning {
		b = c.appendReasoningItem(b, done)
	} else {
		b = c.appendMessageItem(b, done)
	}
	b = appendInt(b, `,"output_index":`, c.outputIndex(reasoning))
	return c.appendSeqType(b, seq, typ)
}

// appendPartEvent appends content_part.added (done false, the part empty) or
// content_part.done (the part whole), numbered seq.
func (c *chunker) appendPartEvent(b []byte, reasoning, done bool, seq int) []byte {
	typ := "response.content_part.added"
	if done {
		typ = "response.content_part.done"
	}
	b = appendEvent(b, typ)
	b = append(b, `{"content_index":0,"item_id":"`...)
	b = c.appendItemID(b, reasoning)
	b = appendInt(b, `","output_index":`, c.outputIndex(reasoning))
	if reasoning {
		b = append(b, `,"part":{"text":"`...)
		if done {
			b = c.appendWords(b, 0, c.reasoning)
		}
		b = append(b, `","type":"reasoning_text"}`...)
	} else {
		b = append(b, `,"part":`...)
		b = c.appendOutputText(b, done)
	}
	return c.appendSeqType(b, seq, typ)
}

// appendSeqType ends an event's object with its sequence number and type.
func (c *chunker) appendSeqType(b []byte, seq int, typ string) []byte {
	b = appendInt(b, `,"sequence_number":`, seq)
	b = append(b, `,"type":"`...)
	b = append(b, typ...)
	return append(b, "\"}\n\n"...)
}

// appendItemDone appends an item's three done events, the first numbered seq.
func (c *chunker) appendItemDone(b []byte, reasoning bool, seq int) []byte {
	typ, from, to := "response.output_text.done", c.reasoning, c.target
	if reasoning {
		typ, from, to = "response.reasoning_text.done", 0, c.reasoning
	}
	b = appendEvent(b, typ)
	b = append(b, `{"content_index":0,"item_id":"`...)
	b = c.appendItemID(b, reasoning)
	if reasoning {
		b = append(b, `","output_index":`...)
	} else {
		b = append(b, `","logprobs":[],"output_index":`...)
	}
	b = strconv.AppendInt(b, int64(c.outputIndex(reasoning)), 10)
	b = appendInt(b, `,"sequence_number":`, seq)
	b = append(b, `,"text":"`...)
	b = c.appendWords(b, from, to)
	b = append(b, `","type":"`...)
	b = append(b, typ...)
	b = append(b, "\"}\n\n"...)
	b = c.appendPartEvent(b, reasoning, true, seq+1)
	return c.appendItemEvent(b, reasoning, true, seq+2)
}

// appendResponsesToken appends token i's delta, and before the first answer token the
// reasoning item's end and the message item's start.
func (c *chunker) appendResponsesToken(b []byte, i int) []byte {
	reasoning := i < c.reasoning
	seq := c.seqOf(i)
	if c.reasoning > 0 && i == c.reasoning {
		b = c.appendItemDone(b, true, seq-5)
		b = c.appendItemStart(b, false, seq-2)
	}
	if reasoning {
		b = appendEvent(b, "response.reasoning_text.delta")
	} else {
		b = appendEvent(b, "response.output_text.delta")
	}
	b = append(b, `{"content_index":0,"delta":"`...)
	b = append(b, words[(i+c.wordOff)%len(words)]...)
	b = append(b, `","item_id":"`...)
	b = c.appendItemID(b, reasoning)
	if reasoning {
		b = append(b, `","output_index":0`...)
	} else {
		b = appendInt(b, `","logprobs":[],"output_index":`, c.outputIndex(false))
	}
	b = appendInt(b, `,"sequence_number":`, seq)
	if reasoning {
		return append(b, `,"type":"response.reasoning_text.delta"}`+"\n\n"...)
	}
	return append(b, `,"type":"response.output_text.delta"}`+"\n\n"...)
}

// appendResponsesEnd appends the last item's done events and response.completed.
func (c *chunker) appendResponsesEnd(b []byte) []byte {
	_, answer := c.phases()
	seq := c.seqOf(c.target-1) + 1
	b = c.appendItemDone(b, !answer, seq)
	b = appendEvent(b, "response.completed")
	b = append(b, `{"response":`...)
	b = c.appendResponse(b, true)
	b = appendInt(b, `,"sequence_number":`, seq+3)
	return append(b, `,"type":"response.completed"}`+"\n\n"...)
}

// streamErrorMsg is the stream-error fault's message.
const streamErrorMsg = "simulated fault: generation failed"

// appendStreamError appends the engine's mid-stream error, in place of token i and all
// after it, and the stream's end: for chat and completions vLLM's error chunk
// (data: {"error":{...}}) then [DONE], as its chat and completions generators end on an
// exception; for Messages an "event: error" and nothing after it, as
// message_stream_converter ends (vLLM's type there is "internal_error"; the sim uses
// "api_error", Anthropic's reference type); for Responses an "event: error" with the next
// sequence number, as serving.py ends on a GenerationError, and no response.completed.
func (c *chunker) appendStreamError(b []byte, i int) []byte {
	switch c.api {
	case apiMessages:
		b = appendEvent(b, "error")
		return append(b, `{"type":"error","error":{"type":"api_error","message":"`+streamErrorMsg+`"}}`+"\n\n"...)
	case apiResponses:
		seq := 2
		if i > 0 {
			seq = c.seqOf(i-1) + 1
		}
		b = appendEvent(b, "error")
		b = append(b, `{"code":"server_error","message":"`+streamErrorMsg+`","param":null`...)
		return c.appendSeqType(b, seq, "error")
	}
	b = append(b, `data: {"error":{"message":"`+streamErrorMsg+`","type":"InternalServerError","param":null,"code":500}}`+"\n\n"...)
	return append(b, "data: [DONE]\n\n"...)
}

// appendEventMalformed appends an event whose JSON is cut short.
func (c *chunker) appendEventMalformed(b []byte) []byte {
	if c.api == apiMessages {
		b = appendEvent(b, "content_block_delta")
		return append(b, `{"type":"content_block_delta","de`+"\n\n"...)
	}
	b = appendEvent(b, "response.output_text.delta")
	return append(b, `{"content_index":0,"de`+"\n\n"...)
}
