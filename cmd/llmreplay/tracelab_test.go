package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestTraceImportTraceLab runs --from tracelab on the hand-written sample (written from
// TraceLab's published schema, not real data: trace/testdata/tracelab/SOURCES.md) and
// reads the result back with trace info, which checks the calls' dependencies.
func TestTraceImportTraceLab(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tl.parquet")
	in := filepath.Join("..", "..", "trace", "testdata", "tracelab", "sample.jsonl")
	msg, err := runArgs(t, "trace", "import", "--from", "tracelab", in, "-o", out)
	if err != nil || !strings.Contains(msg, "5 written") {
		t.Fatalf("import: %v\n%s", err, msg)
	}
	msg, err = runArgs(t, "trace", "info", "--json", out)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Count int64                   `json:"count"`
		Meta  struct{ Source string } `json:"meta"`
	}
	if err := json.Unmarshal([]byte(msg), &info); err != nil || info.Count != 5 || info.Meta.Source != "tracelab" {
		t.Errorf("info --json: %v %+v\n%s", err, info, msg)
	}
	if help, _ := runArgs(t, "trace", "import", "--help"); !strings.Contains(help, "--from tracelab") || !strings.Contains(help, "tracelab") {
		t.Errorf("trace import --help does not show tracelab:\n%s", help)
	}
}

// TestTraceImportWeka runs --from weka on the hand-written sample (written from the
// format's published schema, not real data: trace/testdata/weka/SOURCES.md) and reads
// the result back with trace info.
func TestTraceImportWeka(t *testing.T) {
	out := filepath.Join(t.TempDir(), "weka.parquet")
	in := filepath.Join("..", "..", "trace", "testdata", "weka", "sample.jsonl")
	msg, err := runArgs(t, "trace", "import", "--from", "weka", in, "-o", out)
	if err != nil || !strings.Contains(msg, "11 written") {
		t.Fatalf("import: %v\n%s", err, msg)
	}
	msg, err = runArgs(t, "trace", "info", "--json", out)
	var info struct {
		Count int64                   `json:"count"`
		Meta  struct{ Source string } `json:"meta"`
	}
	if err != nil || json.Unmarshal([]byte(msg), &info) != nil || info.Count != 11 || info.Meta.Source != "weka" {
		t.Errorf("info --json: %v %+v\n%s", err, info, msg)
	}
	if help, _ := runArgs(t, "trace", "import", "--help"); !strings.Contains(help, "--from weka") {
		t.Errorf("trace import --help does not show weka:\n%s", help)
	}
}
