package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
)

// TestReplaySimProfileFile: replay with --sim-profile FILE serves the in-process engine
// from the file (an edited fixed profile: its model name is what the run saw, and no
// first token came before its 250 ms TTFT, where the built-in's is 100 ms), and the run
// metadata records the file's profile name and the SHA-256 of its bytes. A file that
// cannot be served is refused before anything starts.
func TestReplaySimProfileFile(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.parquet")
	if msg, err := runArgs(t, "trace", "synth", "--arrival", "constant", "--rate", "50", "--count", "5",
		"--prompt-tokens", "fixed:32", "--output-tokens", "fixed:4", "-o", tr); err != nil {
		t.Fatalf("synth: %v %s", err, msg)
	}
	p, err := sim.BuiltinProfile("fixed")
	if err != nil {
		t.Fatal(err)
	}
	const ttft = 250 * time.Millisecond
	if p.Config.FixedTTFT >= ttft {
		t.Fatalf("the built-in's TTFT %v would pass the test without the file", p.Config.FixedTTFT)
	}
	p.Name, p.Config.Model, p.Config.FixedTTFT, p.Config.FixedITL = "edited", "sim-edited", ttft, time.Millisecond
	prof := filepath.Join(dir, "edited.json")
	if err := sim.WriteProfileFile(prof, p); err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(dir, "r.parquet")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"replay", "--trace", tr, "--sim-profile", prof, "-q", "-o", res}, &out, &errb); err != nil {
		t.Fatalf("replay: %v\n%s", err, errb.String())
	}
	recs, meta, err := results.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 {
		t.Fatalf("%d records, want 5", len(recs))
	}
	for _, r := range recs {
		if r.Status != results.StatusOK || r.FirstTokenNS-r.SentNS < int64(ttft) {
			t.Errorf("request %d: %s, TTFT %v; want ok and at least the file's %v", r.RequestID, r.Status, time.Duration(r.FirstTokenNS-r.SentNS), ttft)
		}
	}
	sum := sha256.Sum256(mustRead(t, prof))
	if !meta.Simulated || meta.Model != "sim-edited" || meta.SimProfile != prof || meta.SimProfileName != "edited" || meta.SimProfileSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("metadata: simulated %v, model %q, sim_profile %q, name %q, sha256 %q; want the file's", meta.Simulated, meta.Model, meta.SimProfile, meta.SimProfileName, meta.SimProfileSHA256)
	}

	// A built-in leaves the file keys out.
	res2 := filepath.Join(dir, "r2.parquet")
	if err := run(context.Background(), []string{"replay", "--trace", tr, "--sim-profile", "tiny", "-q", "-o", res2}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if _, meta, err := results.ReadFile(res2); err != nil || meta.SimProfile != "tiny" || meta.SimProfileName != "" || meta.SimProfileSHA256 != "" {
		t.Errorf("built-in: %+v %v", meta, err)
	}

	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(strings.Replace(string(mustRead(t, prof)), `"max_batch"`, `"max_batches"`, 1)), 0o644)
	for _, c := range []struct{ profile, want string }{
		{bad, bad + `: config: unknown field "max_batches"`},
		{"huge", `profile "huge" is no built-in`},
	} {
		out := filepath.Join(dir, "no.parquet")
		err := run(context.Background(), []string{"replay", "--trace", tr, "--sim-profile", c.profile, "-q", "-o", out}, &bytes.Buffer{}, &bytes.Buffer{})
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--sim-profile") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--sim-profile %s: %v, want a usage error saying %q", c.profile, err, c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("--sim-profile %s: a results file was written", c.profile)
		}
	}
}
