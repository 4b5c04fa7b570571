//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/ollamatest"
	"github.com/llmreplay/llmreplay/replay/results"
)

// toolsTemplate renders each tool as three words and its description, before the
// messages (Ollama's templates see a request's tools as .Tools): so the engine counts a
// tool as its description's tokens plus 3, not the simulated engine's 16. The words are
// the builder's, one token each in the tiny model (docs/engines.md).
const toolsTemplate = "{{- range .Tools }} the of and{{ .Function.Description }}{{ end }}{{- range .Messages }}{{ .Content }}{{ end }}"

// TestOllamaTools replays a trace whose requests send 300 tokens of tools through the chat
// API against the real engine, whose template renders tools: --calibrate measures the
// template's 3 tokens per tool, and every request is ok with the engine's prompt tokens
// equal to the trace's; without --calibrate the default (16) misses each by 13 (and the
// engine's BOS adds one).
func TestOllamaTools(t *testing.T) {
	dir := t.TempDir()
	tr := ollamaTrace(t, dir, "--tool-tokens", "300", "--prompt-max", "800")
	srv := ollamatest.Start(t, ollamatest.Options{Template: toolsTemplate})
	for _, calibrate := range []bool{true, false} {
		res := filepath.Join(dir, "tools.parquet")
		args := []string{"replay", "--trace", tr, "--endpoint", srv.BaseURL, "--model", ollamatest.Model, "--api", "chat", "--limit", "10", "--quiet", "-o", res}
		if calibrate {
			res = filepath.Join(dir, "tools-calibrated.parquet")
			args = append(args[:len(args)-1], res, "--calibrate")
		}
		mustRun(t, args...)
		rows, meta, err := results.ReadFile(res)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 10 {
			t.Fatalf("%d rows, want 10", len(rows))
		}
		for _, r := range rows {
			want := r.PromptTokens
			if !calibrate {
				want += 3 - 16 + 1 // the template's tool against the default's, and the BOS only --calibrate corrects
			}
			if r.Status != results.StatusOK || r.PromptTokensServer != want {
				t.Errorf("calibrate %v: request %d: %s, the engine counted %d prompt tokens, want %d (the trace's %d)", calibrate, r.RequestID, r.Status, r.PromptTokensServer, want, r.PromptTokens)
			}
		}
		got := meta.Flags["tool-overhead"]
		if calibrate && !strings.HasPrefix(got, "3.00 tokens per tool + 1.0000 x description tokens (measured") {
			t.Errorf("calibrated tool overhead %q, want 3 tokens per tool measured", got)
		}
	}
}
