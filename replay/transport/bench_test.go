package transport

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/wire"
)

// BenchmarkReadStream: the client's cost per streamed chunk (vLLM completions chunks with
// continuous usage), SSE parsing and chunk decoding, no network.
func BenchmarkReadStream(b *testing.B) {
	var body bytes.Buffer
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&body, "data: {\"id\":\"cmpl-8c3f1e2a\",\"object\":\"text_completion\",\"created\":1733140000,\"model\":\"sim-fixed\",\"choices\":[{\"index\":0,\"text\":\" the\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":{\"prompt_tokens\":100,\"total_tokens\":%d,\"completion_tokens\":%d}}\n\n", 100+i, i)
	}
	body.WriteString("data: {\"id\":\"cmpl-8c3f1e2a\",\"object\":\"text_completion\",\"created\":1733140000,\"model\":\"sim-fixed\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"total_tokens\":200,\"completion_tokens\":100}}\n\ndata: [DONE]\n\n")
	benchReadStream(b, &Client{}, body.Bytes(), results.Null)
}

// messagesBenchStream is a Messages API stream of 100 output deltas, 50 thinking then 50
// text, as vLLM writes them (wire/testdata/messages/vllm-82df3f4-thinking.sse).
func messagesBenchStream() []byte {
	var body bytes.Buffer
	body.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"chatcmpl-9d2c4b7e1f8a4c6b\",\"content\":[],\"model\":\"sim-fixed\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":100,\"output_tokens\":0}}}\n\n")
	body.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"},\"index\":0}\n\n")
	for i := 0; i < 50; i++ {
		body.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\" the\"},\"index\":0}\n\n")
	}
	body.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	body.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"content_block\":{\"type\":\"text\",\"text\":\"\"},\"index\":1}\n\n")
	for i := 0; i < 50; i++ {
		body.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\" the\"},\"index\":1}\n\n")
	}
	body.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n")
	body.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"input_tokens\":100,\"output_tokens\":100}}\n\n")
	body.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return body.Bytes()
}

// BenchmarkReadStreamMessages is BenchmarkReadStream for the Messages API; its "own"
// variant decodes through a copy of the messages kind registered under another name, the
// path a kind outside package wire takes (wire.Encoder.Decode: a copy of the chunk per
// event), which the built-in kinds avoid.
func BenchmarkReadStreamMessages(b *testing.B) {
	raw := messagesBenchStream()
	for _, api := range []wire.API{wire.APIMessages, messagesOwn.Name} {
		b.Run(string(api), func(b *testing.B) {
			enc, err := wire.NewEncoder(api, wire.BackendVLLM, false)
			if err != nil {
				b.Fatal(err)
			}
			benchReadStream(b, &Client{enc: enc}, raw, results.Null)
		})
	}
}

// messagesOwn is the messages kind as a kind of its own would be: decoded through
// Kind.Decode.
var messagesOwn = func() wire.Kind {
	k, _ := wire.Lookup(wire.APIMessages)
	own := *k
	own.Name = "messages-own"
	return own
}()

func init() { wire.Register(&messagesOwn) }

// benchReadStream reads the stream raw of 100 output chunks (100 tokens) with c, b.N
// times, and reports the cost per chunk; each record is checked: ok, 100 chunks of 100
// tokens, wantReasoning reasoning tokens (results.Null: none).
func benchReadStream(b *testing.B, c *Client, raw []byte, wantReasoning int32) {
	s := NewSSEReader(nil, func() int64 { return 1 }, 32<<10, 0)
	res := results.NewResult(1, 0, 0, 100, 100)
	ctx := context.Background()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Reset(bytes.NewReader(raw))
		res.ChunkNS, res.ChunkTokens, res.FirstTokenNS, res.FirstAnswerNS, res.ReasoningTokens = res.ChunkNS[:0], nil, results.Null, results.Null, results.Null
		c.readStream(ctx, ctx, s, res, nil)
		if res.Status != results.StatusOK || len(res.ChunkNS) != 100 || res.OutputTokens != 100 || res.ReasoningTokens != wantReasoning {
			b.Fatalf("%s %s %d chunks, %d tokens, %d reasoning", res.Status, res.Error, len(res.ChunkNS), res.OutputTokens, res.ReasoningTokens)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/chunk")
}

// BenchmarkReadStreamResponses is BenchmarkReadStream for the Responses API: 100
// response.output_text.delta events in vLLM's shape (wire/testdata/responses), the
// stream's start and end events around them, usage in response.completed.
func BenchmarkReadStreamResponses(b *testing.B) {
	var body bytes.Buffer
	body.WriteString("event: response.created\ndata: {\"response\":{\"id\":\"resp_1\",\"created_at\":1733140000,\"model\":\"sim-fixed\",\"object\":\"response\",\"output\":[],\"status\":\"in_progress\",\"usage\":null},\"sequence_number\":0,\"type\":\"response.created\"}\n\n")
	body.WriteString("event: response.output_item.added\ndata: {\"item\":{\"id\":\"msg_1\",\"content\":[],\"role\":\"assistant\",\"status\":\"in_progress\",\"type\":\"message\"},\"output_index\":0,\"sequence_number\":1,\"type\":\"response.output_item.added\"}\n\n")
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&body, "event: response.output_text.delta\ndata: {\"content_index\":0,\"delta\":\" the\",\"item_id\":\"msg_1\",\"logprobs\":[],\"output_index\":0,\"sequence_number\":%d,\"type\":\"response.output_text.delta\"}\n\n", i+1)
	}
	body.WriteString("event: response.completed\ndata: {\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"usage\":{\"input_tokens\":100,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":100,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":200}},\"sequence_number\":102,\"type\":\"response.completed\"}\n\n")
	enc, err := wire.NewEncoder(wire.APIResponses, wire.BackendVLLM, false)
	if err != nil {
		b.Fatal(err)
	}
	benchReadStream(b, &Client{enc: enc}, body.Bytes(), 0)
}

// BenchmarkReadStreamReasoning: BenchmarkReadStream for a reasoning model's chat stream,
// 100 chunks of which the first 70 are reasoning (delta.reasoning_content, as vLLM's
// reasoning parsers stream), with continuous usage and the usage's reasoning count; the
// client keeps the reasoning text (it has a tokenizer) and counts nothing.
func BenchmarkReadStreamReasoning(b *testing.B) { benchReasoning(b, 70) }

// BenchmarkReadStreamChat: the same chat stream without reasoning (the usage says 0),
// the baseline of BenchmarkReadStreamReasoning.
func BenchmarkReadStreamChat(b *testing.B) { benchReasoning(b, 0) }

// benchReasoning reads a chat stream of 100 chunks whose first reasoningChunks are
// reasoning.
func benchReasoning(b *testing.B, reasoningChunks int) {
	var body bytes.Buffer
	for i := 1; i <= 100; i++ {
		delta := `{"reasoning_content":" the"}`
		if i > reasoningChunks {
			delta = `{"content":" the"}`
		}
		fmt.Fprintf(&body, "data: {\"id\":\"chatcmpl-8c3f1e2a\",\"object\":\"chat.completion.chunk\",\"created\":1733140000,\"model\":\"sim-fixed\",\"choices\":[{\"index\":0,\"delta\":%s,\"logprobs\":null,\"finish_reason\":null}],\"usage\":{\"prompt_tokens\":100,\"total_tokens\":%d,\"completion_tokens\":%d}}\n\n", delta, 100+i, i)
	}
	fmt.Fprintf(&body, "data: {\"id\":\"chatcmpl-8c3f1e2a\",\"object\":\"chat.completion.chunk\",\"created\":1733140000,\"model\":\"sim-fixed\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"total_tokens\":200,\"completion_tokens\":100,\"completion_tokens_details\":{\"reasoning_tokens\":%d}}}\n\ndata: [DONE]\n\n", reasoningChunks)
	benchReadStream(b, &Client{opts: ClientOptions{CountTokens: func(s string) int { return len(s) }}}, body.Bytes(), int32(reasoningChunks))
}
