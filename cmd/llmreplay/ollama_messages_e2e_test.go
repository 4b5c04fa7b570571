//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/ollamatest"
	"github.com/llmreplay/llmreplay/replay/results"
)

// TestOllamaMessages replays a trace against Ollama's Anthropic Messages route
// (/v1/messages, middleware/anthropic.go in v0.17.4) with both HTTP clients and checks every
// record against what the engine does and says: every request ok, its output tokens
// message_delta's output_tokens and exactly its target (the tiny model generates
// max_tokens tokens, one text_delta each), its prompt message_delta's input_tokens (the
// engine's prompt_eval_count: the target plus BOS), not message_start's, which on Ollama is
// an estimate from the request's characters. Ollama sends no cache counts on this route, so
// prompt_tokens_cached is null.
func TestOllamaMessages(t *testing.T) {
	srv := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	dir := t.TempDir()
	tr := ollamaTrace(t, dir)
	for _, client := range []string{"raw", "net/http"} {
		name := strings.ReplaceAll(client, "/", "")
		t.Run(name, func(t *testing.T) {
			res := filepath.Join(dir, "messages-"+name+".parquet")
			mustRun(t, "replay", "--trace", tr, "--endpoint", srv.BaseURL, "--model", ollamatest.Model,
				"--api", "messages", "--api-key", "sk-ant-test", "--http-client", client, "--quiet", "-o", res)
			rows := readRows(t, res)
			checkExactRows(t, rows)
			for _, r := range rows {
				if r.PromptTokensCached != results.Null {
					t.Errorf("request %d: %d cached prompt tokens; Ollama sends no cache counts on /v1/messages", r.RequestID, r.PromptTokensCached)
				}
			}
			th := analyzeJSON(t, res)["throughput"].(map[string]any)
			if v, _ := th["output_tokens_per_s"].(float64); v <= 0 {
				t.Errorf("analyze: output_tokens_per_s = %v; the engine generated tokens", th["output_tokens_per_s"])
			}
		})
	}
}
