package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// mustRun runs the CLI in-process and fails the test on an error, returning stdout.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if err := run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("llmreplay %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

func runArgs(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	return out.String(), err
}

// tracesDir is the repository's copy of the real sample traces (testdata/traces).
func tracesDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "..", "testdata", "traces")
	if _, err := os.Stat(filepath.Join(dir, "SOURCES.md")); err != nil {
		t.Fatalf("sample traces missing from the repository: %v", err)
	}
	return dir
}

func TestTraceHelp(t *testing.T) {
	for _, sub := range []string{"import", "synth", "info", "slice"} {
		out, err := runArgs(t, "trace", sub, "--help")
		if !errors.Is(err, pflag.ErrHelp) || exitCode(err, io.Discard) != 0 {
			t.Errorf("trace %s --help: %v", sub, err)
		}
		if !strings.Contains(out, "Examples:") || !strings.Contains(out, "llmreplay trace "+sub) {
			t.Errorf("trace %s --help lacks examples:\n%s", sub, out)
		}
	}
	if out, err := runArgs(t, "trace", "--help"); err != nil || !strings.Contains(out, "synth") {
		t.Errorf("trace --help: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"trace"}, {"trace", "nope"}, {"trace", "import", "x.csv", "-o", "y.parquet"}, {"trace", "synth", "-o", "x.parquet"}, {"trace", "synth", "--rate", "1", "--count", "5", "--prompt-tokens", "gauss:1", "-o", "x.parquet"}, {"trace", "info"}} {
		if _, err := runArgs(t, args...); exitCode(err, io.Discard) != 2 {
			t.Errorf("%v: %v, want a usage error (exit 2)", args, err)
		}
	}
}

func TestTraceImportInfoSlice(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "azure.parquet")
	msg, err := runArgs(t, "trace", "import", "--from", "azure", filepath.Join(tracesDir(t), "AzureLLMInferenceTrace_code.csv"), "-o", out)
	if err != nil || !strings.Contains(msg, "8819 written") {
		t.Fatalf("import: %v\n%s", err, msg)
	}
	msg, err = runArgs(t, "trace", "info", "--json", out)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Count int64   `json:"count"`
		Rate  float64 `json:"mean_rate_per_s"`
		Meta  struct {
			Source string
		} `json:"meta"`
		Prompt struct {
			P50 float64 `json:"p50"`
		} `json:"prompt_tokens"`
	}
	if err := json.Unmarshal([]byte(msg), &info); err != nil {
		t.Fatalf("info --json: %v\n%s", err, msg)
	}
	if info.Count != 8819 || info.Prompt.P50 != 1469 || info.Meta.Source != "azure-2023" {
		t.Errorf("info --json: %+v", info)
	}
	text, err := runArgs(t, "trace", "info", out)
	if err != nil || !strings.Contains(text, "requests   8819") || !strings.Contains(text, "index of dispersion") {
		t.Errorf("info text: %v\n%s", err, text)
	}
	sliced := filepath.Join(dir, "slice.parquet")
	if msg, err := runArgs(t, "trace", "slice", out, "--start", "1530s", "--duration", "10m", "--max-idle", "2s", "--speedup", "8", "-o", sliced); err != nil || !strings.Contains(msg, "wrote 1760 requests") {
		t.Errorf("slice: %v %s", err, msg)
	}
}

func TestTraceImportBadInputLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "bad.csv")
	os.WriteFile(in, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:17:03.9799600,374,44\r\n2023-11-16 18:17:04.0000000,-5,109\r\n"), 0o644)
	out := filepath.Join(dir, "out.parquet")
	_, err := runArgs(t, "trace", "import", "--from", "azure", in, "-o", out)
	if err == nil || exitCode(err, io.Discard) != 1 {
		t.Fatalf("bad import: %v", err)
	}
	for _, want := range []string{in, "line 3", "ContextTokens"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("failed import left %d files", len(ents)-1)
	}
	if _, err := runArgs(t, "trace", "import", "--from", "azurex", in, "-o", out); err == nil || !strings.Contains(err.Error(), `unknown format "azurex"`) {
		t.Errorf("unknown format: %v", err)
	}
	if _, err := runArgs(t, "trace", "info", in); err == nil || !strings.Contains(err.Error(), in) {
		t.Errorf("info of a CSV: %v", err)
	}
}

func TestTraceSynthByteIdentical(t *testing.T) {
	dir := t.TempDir()
	args := func(out string) []string {
		return []string{"trace", "synth", "--arrival", "gamma", "--cv", "2.5", "--rate", "5:50", "--duration", "60s",
			"--prompt-tokens", "lognormal:800,500", "--output-tokens", "zipf:1.5,2000", "--max", "4096",
			"--turns", "uniform:1,6", "--sessions", "8", "--seed", "7", "-o", out}
	}
	a, b := filepath.Join(dir, "a.parquet"), filepath.Join(dir, "b.parquet")
	for _, p := range []string{a, b} {
		if msg, err := runArgs(t, args(p)...); err != nil {
			t.Fatalf("synth: %v %s", err, msg)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ab) == 0 || !bytes.Equal(ab, bb) {
		t.Fatalf("the same command and seed gave different files (%d and %d bytes)", len(ab), len(bb))
	}
	msg, err := runArgs(t, "trace", "info", a)
	if err != nil || !strings.Contains(msg, `"seed":7`) || !strings.Contains(msg, "sessions") {
		t.Errorf("info of synth: %v\n%s", err, msg)
	}
}

// TestTraceSynthAgents: agent sessions from flags regenerate byte for byte, trace info
// describes them, and agent flags outside agent mode (or beside --count, --prompt-tokens,
// --turns) are usage errors.
func TestTraceSynthAgents(t *testing.T) {
	dir := t.TempDir()
	args := func(out string) []string {
		return []string{"trace", "synth", "--agent-sessions", "12", "--rate", "0.5", "--agent-calls", "uniform:5,20",
			"--agent-user-every", "4", "--agent-fork", "0.3", "--agent-branches", "uniform:2,3", "--seed", "4", "-o", out}
	}
	a, b := filepath.Join(dir, "a.parquet"), filepath.Join(dir, "b.parquet")
	for _, p := range []string{a, b} {
		if msg, err := runArgs(t, args(p)...); err != nil {
			t.Fatalf("synth: %v %s", err, msg)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ab) == 0 || !bytes.Equal(ab, bb) {
		t.Fatalf("the same agent command and seed gave different files (%d and %d bytes)", len(ab), len(bb))
	}
	msg, err := runArgs(t, "trace", "info", "--json", a)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Count int64 `json:"count"`
		Agent *struct {
			Calls    int64 `json:"calls"`
			Sessions int64 `json:"sessions"`
			Forks    int64 `json:"forks"`
			Context  struct {
				Max float64 `json:"max"`
			} `json:"context_tokens"`
		} `json:"agent"`
	}
	if err := json.Unmarshal([]byte(msg), &info); err != nil {
		t.Fatalf("info --json: %v\n%s", err, msg)
	}
	// Without --prompt-max or --max, an agent's context window is 131072 tokens.
	if ag := info.Agent; ag == nil || ag.Calls != info.Count || ag.Sessions != 12 || ag.Forks == 0 || ag.Context.Max > 131072 || ag.Context.Max <= 32768 {
		t.Errorf("info of agent synth: %s", msg)
	}
	for _, bad := range [][]string{
		{"trace", "synth", "--rate", "1", "--count", "5", "--agent-fork", "0.5", "-o", a},
		{"trace", "synth", "--rate", "1", "--count", "5", "--agent-sessions", "5", "-o", a},
		{"trace", "synth", "--rate", "1", "--agent-sessions", "5", "--prompt-tokens", "fixed:5", "-o", a},
		{"trace", "synth", "--rate", "1", "--agent-sessions", "5", "--turns", "fixed:5", "-o", a},
		{"trace", "synth", "--rate", "1", "--agent-sessions", "5", "--agent-tool-gap", "empirical:x.parquet", "-o", a},
		{"trace", "synth", "--rate", "1", "--agent-sessions", "5", "--agent-fork", "1.5", "-o", a},
	} {
		if _, err := runArgs(t, bad...); exitCode(err, io.Discard) != 2 {
			t.Errorf("%v: %v, want a usage error (exit 2)", bad, err)
		}
	}
}

// TestTraceImportCopilotAgent imports the hand-written Copilot agent sample gzipped, as the
// release ships its shards, and reads it back with trace info.
func TestTraceImportCopilotAgent(t *testing.T) {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join(tracesDir(t), "copilot-agent.sample.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "shard-0000.jsonl.gz")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(src)
	zw.Close()
	os.WriteFile(in, gz.Bytes(), 0o644)
	out := filepath.Join(dir, "copilot.parquet")
	msg, err := runArgs(t, "trace", "import", "--from", "copilot-agent", in, "-o", out)
	if err != nil || !strings.Contains(msg, "(copilot-agent)") || !strings.Contains(msg, "12 rows read, 12 written") ||
		!strings.Contains(msg, "adjusted 2: zero completion tokens raised to 1") {
		t.Fatalf("import: %v\n%s", err, msg)
	}
	msg, err = runArgs(t, "trace", "info", "--json", out)
	var info struct {
		Count int64                   `json:"count"`
		Meta  struct{ Source string } `json:"meta"`
	}
	if err != nil || json.Unmarshal([]byte(msg), &info) != nil || info.Count != 12 || info.Meta.Source != "copilot-agent" {
		t.Errorf("info --json: %v %+v\n%s", err, info, msg)
	}
	if help, _ := runArgs(t, "trace", "import", "--help"); !strings.Contains(help, "copilot-agent") {
		t.Errorf("trace import --help does not list copilot-agent:\n%s", help)
	}
}
