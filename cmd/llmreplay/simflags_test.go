package main

import (
	"bytes"
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
)

// TestReplaySimReasoningFlags: --sim-reasoning-share and --sim-reasoning-usage reach the
// in-process engine (chat answers of 20 tokens: round(0.3 x 20) = 6 of them reasoning,
// said by the usage with --sim-reasoning-usage; none without the share), and are refused,
// before anything starts, out of range or beside --endpoint, which replaces the engine
// they shape.
func TestReplaySimReasoningFlags(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.parquet")
	if msg, err := runArgs(t, "trace", "synth", "--arrival", "constant", "--rate", "50", "--count", "5",
		"--prompt-tokens", "fixed:32", "--output-tokens", "fixed:20", "-o", tr); err != nil {
		t.Fatalf("synth: %v %s", err, msg)
	}
	for _, c := range []struct {
		flags []string
		want  int32
		src   string
	}{
		{[]string{"--sim-reasoning-share", "0.3", "--sim-reasoning-usage"}, int32(math.Round(0.3 * 20)), results.SourceUsage},
		{nil, results.Null, ""}, // no reasoning seen: null
	} {
		res := filepath.Join(dir, strings.Join(append([]string{"r"}, c.flags...), "")+".parquet")
		var out, errb bytes.Buffer
		args := append([]string{"replay", "--trace", tr, "--api", "chat", "--sim-profile", "tiny", "-q", "-o", res}, c.flags...)
		if err := run(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("%v: %v\n%s", c.flags, err, errb.String())
		}
		recs, meta, err := results.ReadFile(res)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Status != results.StatusOK || r.OutputTokens != 20 || r.ReasoningTokens != c.want || r.ReasoningTokensSource != c.src {
				t.Errorf("%v: request %d: %s, %d output tokens, %d reasoning (%s); want ok, 20, %d (%s)",
					c.flags, r.RequestID, r.Status, r.OutputTokens, r.ReasoningTokens, r.ReasoningTokensSource, c.want, c.src)
			}
		}
		if len(c.flags) > 0 && meta.Flags["sim-reasoning-share"] != "0.3" {
			t.Errorf("run metadata flags %v: want sim-reasoning-share 0.3", meta.Flags)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--sim-reasoning-share", "1.5"}, "--sim-reasoning-share 1.5: want a share in [0, 1]"},
		{[]string{"--sim-reasoning-share", "0.3", "--endpoint", "http://127.0.0.1:1/v1"}, "--sim-reasoning-share shapes the in-process simulated engine, and --endpoint http://127.0.0.1:1/v1 replaces it"},
		{[]string{"--sim-reasoning-usage", "--endpoint", "http://127.0.0.1:1/v1"}, "--sim-reasoning-usage shapes the in-process simulated engine"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), append([]string{"replay", "--trace", tr, "-q", "-o", filepath.Join(dir, "bad.parquet")}, c.args...), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want it to say %q", c.args, err, c.want)
		}
	}
}
