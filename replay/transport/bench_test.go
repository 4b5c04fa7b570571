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
	raw := body.Bytes()
	c := &Client{}
	s := NewSSEReader(nil, func() int64 { return 1 }, 32<<10, 0)
	res := results.NewResult(1, 0, 0, 100, 100)
	ctx := context.Background()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Reset(bytes.NewReader(raw))
		res.ChunkNS, res.ChunkTokens, res.FirstTokenNS = res.ChunkNS[:0], nil, results.Null
		c.readStream(ctx, ctx, s, res, nil)
		if res.Status != results.StatusOK || len(res.ChunkNS) != 100 {
			b.Fatalf("%s %s %d", res.Status, res.Error, len(res.ChunkNS))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/chunk")
}
