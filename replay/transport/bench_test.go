package transport

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
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

// benchReadStream reads the stream raw of 100 output chunks with c, b.N times, each
// record checked: ok, 100 chunks, wantReasoning reasoning tokens (results.Null: none).
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
		if res.Status != results.StatusOK || len(res.ChunkNS) != 100 || res.ReasoningTokens != wantReasoning {
			b.Fatalf("%s %s %d chunks, %d reasoning", res.Status, res.Error, len(res.ChunkNS), res.ReasoningTokens)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/chunk")
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
