//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/ollamatest"
	"github.com/llmreplay/llmreplay/replay/results"
)

// markersTemplate puts a word before each message and three after them all (Ollama's
// templates see a request's messages as .Messages): the engine counts a request as its BOS
// and three tokens, plus one a message, plus the messages' text. The words are the builder's,
// one token each in the tiny model (docs/engines.md).
const markersTemplate = "{{- range .Messages }} the{{ .Content }}{{ end }} of and the"

// TestOllamaCalibratedConversations replays conversations with actual history through the
// chat, Messages and Responses APIs against the real engine with a template of known markers: with
// --calibrate every turn, history and all, is counted by the engine as exactly the trace's
// prompt tokens (the calibration measures 5 tokens for a one-message prompt and 2 for each
// earlier answer and user message); without it the engine adds its template to each:
// 4 + the turn's 2k+1 messages.
func TestOllamaCalibratedConversations(t *testing.T) {
	srv := ollamatest.Start(t, ollamatest.Options{Template: markersTemplate})
	dir := t.TempDir()
	conv := filepath.Join(dir, "conv.parquet")
	mustRun(t, "trace", "synth", "--arrival", "poisson", "--rate", "2", "--duration", "8s",
		"--prompt-tokens", "uniform:16,64", "--output-tokens", "uniform:8,24", "--turns", "uniform:3,4",
		"--sessions", "2", "--seed", "3", "-o", conv)
	for _, api := range []string{"chat", "messages", "responses"} {
		for _, calibrate := range []bool{true, false} {
			res := filepath.Join(dir, api+map[bool]string{true: "-calibrated", false: ""}[calibrate]+".parquet")
			args := []string{"replay", "--trace", conv, "--endpoint", srv.BaseURL, "--model", ollamatest.Model, "--api", api,
				"--concurrency", "1", "--sessions", "sequential", "--history", "actual", "--quiet", "-o", res}
			if calibrate {
				args = append(args, "--calibrate")
			}
			mustRun(t, args...)
			rows, meta, err := results.ReadFile(res)
			if err != nil {
				t.Fatal(err)
			}
			if got := meta.Flags["history-overhead"]; calibrate && !strings.HasPrefix(got, "5.00 tokens per request ") ||
				calibrate && !strings.Contains(got, "+ 2.00 per earlier answer and user message") {
				t.Errorf("%s: history-overhead %q, want 5 per request and 2 per earlier answer and user message", api, got)
			}
			later := 0
			for _, r := range rows {
				want := r.PromptTokens
				if !calibrate {
					want += 4 + 2*r.Turn + 1
				}
				if r.Status != results.StatusOK || r.PromptTokensServer != want {
					t.Errorf("%s, calibrate %v: request %d (turn %d): %s %q, the engine counted %d prompt tokens, want %d (the trace's %d)",
						api, calibrate, r.RequestID, r.Turn, r.Status, r.Error, r.PromptTokensServer, want, r.PromptTokens)
				}
				if r.Turn > 0 {
					later++
				}
			}
			t.Logf("%s, calibrate %v: %d turns, %d of them later turns", api, calibrate, len(rows), later)
			if later == 0 {
				t.Errorf("%s: no later turns: the trace has no conversations", api)
			}
		}
	}
}
