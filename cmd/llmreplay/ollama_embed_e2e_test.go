//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/ollamatest"
	"github.com/llmreplay/llmreplay/replay/results"
)

// TestOllamaEmbeddings replays a short trace with --api embeddings against Ollama's
// /v1/embeddings (its OpenAI middleware, v0.17.4) with both HTTP clients: every request ok
// with one embedding per input, and the engine's own usage (prompt_tokens, the sum of its
// inputs' prompt evaluations) equal to what was sent: each input's builder tokens plus
// the BOS the tiny model puts before every prompt.
func TestOllamaEmbeddings(t *testing.T) {
	srv := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	dir := t.TempDir()
	tr := ollamaTrace(t, dir)
	const inputs = 3
	for _, client := range []string{"raw", "net/http"} {
		t.Run(strings.ReplaceAll(client, "/", ""), func(t *testing.T) {
			res := filepath.Join(dir, "embed-"+strings.ReplaceAll(client, "/", "")+".parquet")
			mustRun(t, "replay", "--trace", tr, "--endpoint", srv.BaseURL, "--model", ollamatest.Model,
				"--api", "embeddings", "--inputs", "3", "--http-client", client, "--quiet", "--limit", "12", "-o", res)
			rows := readRows(t, res)
			if len(rows) != 12 {
				t.Fatalf("%d records, want 12", len(rows))
			}
			for _, r := range rows {
				if r.Status != results.StatusOK || r.Inputs != inputs || r.PromptTokensServer != r.PromptTokens+inputs ||
					r.FirstTokenNS != results.Null || len(r.ChunkNS) != 0 || r.OutputTokens != results.Null || r.EndNS <= r.SentNS {
					t.Errorf("request %d: %s %q, %d inputs, prompt_tokens %d, server %d (want %d), first token %d, %d chunks",
						r.RequestID, r.Status, r.Error, r.Inputs, r.PromptTokens, r.PromptTokensServer, r.PromptTokens+inputs, r.FirstTokenNS, len(r.ChunkNS))
				}
			}
		})
	}
}
