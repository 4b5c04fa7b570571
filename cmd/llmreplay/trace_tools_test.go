package main

import (
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestTraceSynthToolTokens: --tool-tokens puts N tool tokens in every request's prompt,
// trace info reports them (share of requests, p50/p99, share of prompt tokens, in text and
// JSON), a trace without them has no tools line, and tools that leave no room for a prompt
// are a usage error.
func TestTraceSynthToolTokens(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "tools.parquet")
	if msg, err := runArgs(t, "trace", "synth", "--rate", "5", "--count", "200", "--prompt-tokens", "fixed:600", "--tool-tokens", "400", "-o", out); err != nil {
		t.Fatalf("synth: %v %s", err, msg)
	}
	msg, err := runArgs(t, "trace", "info", "--json", out)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Prompt struct {
			Mean float64 `json:"mean"`
		} `json:"prompt_tokens"`
		Tools *struct {
			WithTools   int64   `json:"with_tools"`
			Share       float64 `json:"share"`
			PromptShare float64 `json:"prompt_share"`
			Tokens      struct {
				P50 float64 `json:"p50"`
				P99 float64 `json:"p99"`
			} `json:"tokens"`
		} `json:"tools"`
		Meta struct {
			Generator string `json:"Generator"`
		} `json:"meta"`
	}
	if err := json.Unmarshal([]byte(msg), &info); err != nil {
		t.Fatalf("%v\n%s", err, msg)
	}
	// Every prompt is 400 tool tokens and 600 drawn: 40 % of prompt tokens are tools.
	if ti := info.Tools; ti == nil || ti.WithTools != 200 || ti.Share != 1 || ti.Tokens.P50 != 400 || ti.Tokens.P99 != 400 || ti.PromptShare != 0.4 || info.Prompt.Mean != 1000 {
		t.Errorf("info --json: %s", msg)
	}
	if !strings.Contains(info.Meta.Generator, `"tool_tokens":400`) {
		t.Errorf("generator %s does not record the tools", info.Meta.Generator)
	}
	text, err := runArgs(t, "trace", "info", out)
	if err != nil || !strings.Contains(text, "tools      100.0 % of requests send tool definitions (200 of 200; 200 rows record tool_tokens); tool tokens p50 400.0, p99 400.0, max 400; 40.0 % of prompt tokens") {
		t.Errorf("info: %v\n%s", err, text)
	}

	plain := filepath.Join(dir, "plain.parquet")
	if msg, err := runArgs(t, "trace", "synth", "--rate", "5", "--count", "20", "-o", plain); err != nil {
		t.Fatalf("synth: %v %s", err, msg)
	}
	if text, err := runArgs(t, "trace", "info", plain); err != nil || strings.Contains(text, "tools") {
		t.Errorf("info of a trace without tools: %v\n%s", err, text)
	}
	if _, err := runArgs(t, "trace", "synth", "--rate", "5", "--count", "20", "--max", "100", "--tool-tokens", "100", "-o", plain); exitCode(err, io.Discard) != 2 || !strings.Contains(err.Error(), "tool tokens 100") {
		t.Errorf("tools filling the clamp: %v, want a usage error", err)
	}
}
