package transport

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
)

// TestChunkUsageBelievedOnlyWhenItMoves: a chunk's tokens are the increase of the
// stream's cumulative completion_tokens; a chunk with text whose usage does not increase
// it (Ollama's all-zero placeholder, a stall, a step back) leaves the stream without
// chunk_tokens and the progress counting a chunk a token, while the final usage chunk
// still gives output_tokens and the server's prompt count.
func TestChunkUsageBelievedOnlyWhenItMoves(t *testing.T) {
	chunk := func(usage string) string {
		if usage != "" {
			usage = `,"usage":` + usage
		}
		return `data: {"object":"text_completion","choices":[{"index":0,"text":" w","finish_reason":null}]` + usage + "}\n\n"
	}
	compl := func(n string) string {
		return chunk(`{"prompt_tokens":7,"completion_tokens":` + n + `,"total_tokens":0}`)
	}
	const zero = `{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`
	const final = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\ndata: [DONE]\n\n"
	cases := []struct {
		name     string
		body     string
		chunkTok []int32 // nil: none recorded
		progress []int   // the onTokens calls
	}{
		{"cumulative, a token a chunk", compl("1") + compl("2") + compl("3") + final, []int32{1, 1, 1}, []int{1, 1, 1}},
		{"cumulative, several tokens a chunk", compl("2") + compl("5") + compl("6") + final, []int32{2, 3, 1}, []int{2, 3, 1}},
		{"role chunk counts 0", `data: {"choices":[{"index":0,"delta":{"role":"assistant"}}],"usage":{"completion_tokens":0}}` + "\n\n" +
			compl("1") + compl("2") + compl("3") + final, []int32{1, 1, 1}, []int{1, 1, 1}},
		{"no per-chunk usage", chunk("") + chunk("") + chunk("") + final, nil, []int{1, 1, 1}},
		{"zero placeholder on every chunk (Ollama)", chunk(zero) + chunk(zero) + chunk(zero) +
			`data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":` + zero + "}\n\n" + final, nil, []int{1, 1, 1}},
		{"placeholder after counts", compl("1") + compl("2") + chunk(zero) + final, nil, []int{1, 1, 1}},
		{"count stalls", compl("1") + compl("1") + compl("3") + final, nil, []int{1, 1, 1}},
		{"count goes back", compl("2") + compl("1") + compl("3") + final, nil, []int{2, 1, 1}},
		{"count goes back on a chunk without text", compl("1") + compl("2") +
			`data: {"choices":[{"index":0,"text":""}],"usage":{"completion_tokens":0}}` + "\n\n" + compl("3") + final, nil, []int{1, 1, 1}},
	}
	c := &Client{}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSSEReader(strings.NewReader(tc.body), func() int64 { return 1 }, 32<<10, 0)
			res := results.NewResult(1, 0, 0, 7, 3)
			var progress []int
			c.readStream(ctx, ctx, s, res, func(n int) { progress = append(progress, n) })
			if res.Status != results.StatusOK || len(res.ChunkNS) != 3 {
				t.Fatalf("%s %q, %d chunks; want ok, 3", res.Status, res.Error, len(res.ChunkNS))
			}
			if !slices.Equal(res.ChunkTokens, tc.chunkTok) || (res.ChunkTokens == nil) != (tc.chunkTok == nil) {
				t.Errorf("chunk_tokens %v, want %v", res.ChunkTokens, tc.chunkTok)
			}
			if !slices.Equal(progress, tc.progress) {
				t.Errorf("progress %v, want %v", progress, tc.progress)
			}
			if res.OutputTokens != 3 || res.OutputTokensSource != results.SourceUsage || res.PromptTokensServer != 7 {
				t.Errorf("output %d (%s), prompt %d; want 3 (usage), 7 from the final usage chunk", res.OutputTokens, res.OutputTokensSource, res.PromptTokensServer)
			}
		})
	}
}
