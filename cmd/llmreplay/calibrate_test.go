package main

import (
	"github.com/llmreplay/llmreplay/replay/results"

	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayCalibrate: the in-process engine adds a chat template to every prompt; with
// --calibrate the replayer learns it and the server counts exactly the trace's lengths,
// without it every request is off by the template.
func TestReplayCalibrate(t *testing.T) {
	for _, calibrate := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "r.parquet")
		args := []string{"--api", "chat", "--prompt-format", "text", "--limit", "20", "--prewarm", "2", "-q", "-o", out}
		if calibrate {
			args = append(args, "--calibrate")
		}
		var stdout, stderr bytes.Buffer
		if err := runReplay(context.Background(), args, &stdout, &stderr); err != nil {
			t.Fatalf("replay %v: %v\n%s", args, err, stderr.String())
		}
		res, meta, err := results.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		off := 0
		for _, r := range res {
			if r.PromptTokensServer != r.PromptTokens {
				off++
			}
		}
		if calibrate && (off != 0 || !strings.Contains(meta.Flags["calibration"], "chat via")) {
			t.Errorf("--calibrate: %d of %d requests counted differently by the server; calibration %q", off, len(res), meta.Flags["calibration"])
		}
		if !calibrate && off != len(res) {
			t.Errorf("without --calibrate only %d of %d requests were off: the test no longer shows a template", off, len(res))
		}
	}
}
