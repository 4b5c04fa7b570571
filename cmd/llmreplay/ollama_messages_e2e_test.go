//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/ollamatest"
	"github.com/llmreplay/llmreplay/replay/results"
)

// checkExactRecord holds one record of the tiny model to what the engine does: ok, exactly
// its target's output tokens as the server's usage counts them, one chunk a token, the
// prompt counted by the server as its target plus BOS.
func checkExactRecord(t *testing.T, r results.Result) {
	t.Helper()
	if r.Status != results.StatusOK {
		t.Fatalf("request %d: %s: %s", r.RequestID, r.Status, r.Error)
	}
	if r.OutputTokens != r.OutputTokensTarget || r.OutputTokensSource != results.SourceUsage {
		t.Errorf("request %d: output %d tokens (source %s); the engine generates exactly the target, %d",
			r.RequestID, r.OutputTokens, r.OutputTokensSource, r.OutputTokensTarget)
	}
	if len(r.ChunkNS) != int(r.OutputTokens) {
		t.Errorf("request %d: %d chunks for %d tokens; the engine streams one a token", r.RequestID, len(r.ChunkNS), r.OutputTokens)
	}
	if r.PromptTokensServer != r.PromptTokens+1 {
		t.Errorf("request %d: the server counted %d prompt tokens; the tiny model counts the target %d plus BOS",
			r.RequestID, r.PromptTokensServer, r.PromptTokens)
	}
}

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
			ollamaRun(t, "replay", "--trace", tr, "--endpoint", srv.BaseURL, "--model", ollamatest.Model,
				"--api", "messages", "--api-key", "sk-ant-test", "--http-client", client, "--quiet", "-o", res)
			rows := readRows(t, res)
			if len(rows) < 10 {
				t.Fatalf("%d rows; want the trace's (>= 10)", len(rows))
			}
			for _, r := range rows {
				checkExactRecord(t, r)
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
