//go:build unix

package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/ollamatest"
	"github.com/llmreplay/llmreplay/replay/results"
)

// TestOllamaResponses replays a trace against Ollama's /v1/responses (openai/responses.go
// and middleware/openai.go of v0.17.4 serve it: the request becomes a chat request, its
// max_output_tokens the num_predict) with both HTTP clients, and checks every record as
// TestOllamaReplay does for chat (checkExactRows): ok, exactly its target's output tokens
// as the usage of response.completed counts them, one chunk a token, the prompt counted as
// its target plus BOS; conversations' turns too, their history sent as input messages;
// calibrated through the API, every prompt exactly its target. The same server's stream
// for one request has the event types, in order, of the fixture
// wire/testdata/responses/ollama-v0.17.4.sse (LLMREPLAY_WRITE_FIXTURES=1 writes the
// fixture from it instead).
func TestOllamaResponses(t *testing.T) {
	srv := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	dir := t.TempDir()
	tr := ollamaTrace(t, dir)
	for _, client := range []string{"raw", "net/http"} {
		t.Run(strings.ReplaceAll(client, "/", ""), func(t *testing.T) {
			res := filepath.Join(dir, "responses-"+strings.ReplaceAll(client, "/", "")+".parquet")
			mustRun(t, "replay", "--trace", tr, "--endpoint", srv.BaseURL, "--model", ollamatest.Model,
				"--api", "responses", "--http-client", client, "--quiet", "-o", res)
			checkExactRows(t, readRows(t, res))
		})
	}

	// Conversations with actual history: each turn's input is the conversation's messages,
	// which Ollama renders as it renders chat's, so the server counts every turn's prompt
	// as its target plus BOS (TestOllamaSessions' check for chat).
	conv := filepath.Join(dir, "conv.parquet")
	mustRun(t, "trace", "synth", "--arrival", "poisson", "--rate", "2", "--duration", "8s",
		"--prompt-tokens", "uniform:16,64", "--output-tokens", "uniform:8,24", "--turns", "uniform:3,4",
		"--sessions", "2", "--seed", "3", "-o", conv)
	res := filepath.Join(dir, "conv-responses.parquet")
	mustRun(t, "replay", "--trace", conv, "--endpoint", srv.BaseURL, "--model", ollamatest.Model, "--api", "responses",
		"--concurrency", "1", "--sessions", "sequential", "--history", "actual", "--quiet", "-o", res)
	later := 0
	for _, r := range readRows(t, res) {
		if r.Status != results.StatusOK || r.OutputTokens != r.OutputTokensTarget || r.PromptTokensServer != r.PromptTokens+1 {
			t.Errorf("conversation request %d (turn %d): %s %q, output %d of %d, prompt %d by usage for a target of %d (+1 BOS)",
				r.RequestID, r.Turn, r.Status, r.Error, r.OutputTokens, r.OutputTokensTarget, r.PromptTokensServer, r.PromptTokens)
		}
		if r.Turn > 1 {
			later++
		}
	}
	if later == 0 {
		t.Error("no later turns: the trace has no conversations")
	}

	// Calibration through the API: usage probes to /responses (Ollama has no /tokenize),
	// then every prompt counted by the server as exactly its target.
	res = filepath.Join(dir, "calibrated-responses.parquet")
	mustRun(t, "replay", "--trace", tr, "--endpoint", srv.BaseURL, "--model", ollamatest.Model, "--api", "responses",
		"--calibrate", "--limit", "8", "--quiet", "-o", res)
	for _, r := range readRows(t, res) {
		if r.Status != results.StatusOK || r.PromptTokensServer != r.PromptTokens {
			t.Errorf("calibrated: request %d: %s %q, the server counted %d prompt tokens for a target of %d", r.RequestID, r.Status, r.Error, r.PromptTokensServer, r.PromptTokens)
		}
	}

	// The fixture: one request's stream as the engine writes it.
	body := `{"model":"` + ollamatest.Model + `","stream":true,"temperature":0,"max_output_tokens":4,"store":false,"input":"Say hi."}`
	resp, err := http.Post(srv.BaseURL+"/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /responses: %d %v: %s", resp.StatusCode, err, got)
	}
	fixture := filepath.Join("..", "..", "wire", "testdata", "responses", "ollama-v0.17.4.sse")
	if os.Getenv("LLMREPLAY_WRITE_FIXTURES") == "1" {
		if err := os.WriteFile(fixture, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := sseEventNames(got), sseEventNames(want); !slices.Equal(g, w) {
		t.Errorf("the engine's stream has the events\n%v\nthe fixture\n%v", g, w)
	}
}

// sseEventNames lists the event: lines of an SSE stream.
func sseEventNames(b []byte) []string {
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			names = append(names, name)
		}
	}
	return names
}
