package analysis_test

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/compare"
	"github.com/llmreplay/llmreplay/stats"
)

// Compare's view of this package's figures: the figures package analysis declares and
// computes (agents, reasoning, a figure declared in a test) as package analysis/compare
// shows them, from files this package's fixture writes (export_test.go).

// writeRun writes rows as dir/name, a run of the fixture's metadata, and returns the path.
func writeRun(t *testing.T, dir, name string, rows []analysis.Row) string {
	t.Helper()
	p := filepath.Join(dir, name)
	analysis.WriteResults(t, p, analysis.TestRunMeta(), rows)
	return p
}

func compareFiles(t *testing.T, opts compare.Options, paths ...string) (*compare.Comparison, error) {
	t.Helper()
	var args []compare.Arg
	for _, p := range paths {
		a, err := compare.ResolveArg(p)
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	return compare.Runs(context.Background(), args, opts)
}

func figRow(c *compare.Comparison, key string) compare.Row {
	for _, r := range c.Sections[0].Rows {
		if r.Key == key {
			return r
		}
	}
	return compare.Row{}
}

// TestCompareAgents: compare shows the agent makespan and slowdown percentiles and the
// hit rate, each resampled over sessions: a run whose every session is 1.5 times as long
// is +50% at each percentile, significantly; one whose cache hits 20 points less is -20pp.
func TestCompareAgents(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, rows []analysis.Row) compare.Arg {
		p := filepath.Join(dir, name)
		analysis.WriteResults(t, p, analysis.AgentMeta(), rows)
		a, err := compare.ResolveArg(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a, b := write("a.parquet", analysis.AgentRun(60, 1, 60)), write("b.parquet", analysis.AgentRun(60, 1.5, 40))
	c, err := compare.Runs(context.Background(), []compare.Arg{a, b}, compare.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]compare.Row{}
	for _, r := range c.Sections[0].Rows {
		rows[r.Key] = r
	}
	for _, key := range []string{"agent_makespan_p50_s", "agent_makespan_p90_s", "agent_makespan_p99_s", "agent_slowdown_p50", "agent_slowdown_p90", "agent_slowdown_p99"} {
		r, ok := rows[key]
		if !ok {
			t.Errorf("no compare row %s", key)
			continue
		}
		if ch := r.Changes[1]; !analysis.Nearly(ch.Delta, 50) || !ch.Significant() || ch.CI.Lo > 50+1e-9 || ch.CI.Hi < 50-1e-9 {
			t.Errorf("%s: change %+v, want +50%%, significant, its interval holding it", key, ch)
		}
	}
	r := rows["agent_cache_hit_rate_pct"]
	if len(r.Values) != 2 || !analysis.Nearly(r.Values[0], 60) || !analysis.Nearly(r.Values[1], 40) || !analysis.Nearly(r.Changes[1].Delta, -20) || r.Changes[1].Relative {
		t.Errorf("cache row %+v, want 60%% and 40%%, -20pp", r)
	}
	if !strings.Contains(c.Method, "sessions resampled as independent units") {
		t.Errorf("method %q does not say how agent figures are resampled", c.Method)
	}
	var txt bytes.Buffer
	c.WriteText(&txt)
	if !strings.Contains(txt.String(), "agent makespan p50 s") || !strings.Contains(txt.String(), "agent slowdown p99 ") {
		t.Errorf("compare text lacks the agent rows:\n%s", txt.String())
	}
}

// TestFigureDeclaredOnceInCompare: a figure added to the declaration only is in compare's
// table, each run's own value, and in its text (TestFigureDeclaredOnce finds it in the
// other outputs).
func TestFigureDeclaredOnceInCompare(t *testing.T) {
	twice := func(r *analysis.Report) float64 { return 2 * r.TTFT.P50 }
	analysis.AddFigure(t, analysis.Figure{
		Key: "test_twice_ttft_p50_ms", Unit: "ms", Compare: &analysis.CompareSpec{Name: "test: twice TTFT p50 ms", Relative: true},
		Value: func(r *analysis.Report) any { return twice(r) },
	})
	dir := t.TempDir()
	rowsA, _ := analysis.ReasoningRows(600, 1)
	rowsB, _ := analysis.ReasoningRows(600, 1.2)
	a, b := writeRun(t, dir, "a.parquet", rowsA), writeRun(t, dir, "b.parquet", rowsB)
	c, err := compareFiles(t, compare.Options{Bootstrap: stats.Bootstrap{Resamples: 100}}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	row := figRow(c, "test_twice_ttft_p50_ms")
	if len(row.Values) != 2 {
		t.Fatalf("compare has no row test_twice_ttft_p50_ms: %+v", row)
	}
	for i, rep := range c.Reports() {
		if row.Values[i] != twice(rep) {
			t.Errorf("compare run %d: %v, want %v", i, row.Values[i], twice(rep))
		}
	}
	var ct bytes.Buffer
	if err := c.WriteText(&ct); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^test: twice TTFT p50 ms +[0-9.]+ +[0-9.]+ `).MatchString(ct.String()) {
		t.Errorf("compare text lacks the figure:\n%s", ct.String())
	}
}

// TestReasoningCompare: B decodes its answers 20% slower than A after the same thinking:
// compare shows answer TPOT up about 20% and significant, TTFA, TTFT and reasoning tokens
// unchanged, each with its interval.
func TestReasoningCompare(t *testing.T) {
	dir := t.TempDir()
	rowsA, servedA := analysis.ReasoningRows(600, 1)
	rowsB, _ := analysis.ReasoningRows(600, 1.2)
	a := writeRun(t, dir, "a.parquet", rowsA)
	b := writeRun(t, dir, "b.parquet", rowsB)
	c, err := compareFiles(t, compare.Options{}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	ttfa, tpot, _ := analysis.WantReasoning(servedA)
	for key, w := range map[string]float64{"ttfa_p50_ms": ttfa.P50, "answer_tpot_p50_ms": tpot.P50, "reasoning_tokens_p50": 300} {
		row := figRow(c, key)
		if row.Key == "" {
			t.Fatalf("compare has no %s row", key)
		}
		if !analysis.SameFloat(row.Values[0], w) || !row.Changes[1].CI.Valid() {
			t.Errorf("%s: A %v, want %v; interval %+v", key, row.Values[0], w, row.Changes[1].CI)
		}
	}
	for _, key := range []string{"ttft_p50_ms", "ttfa_p50_ms", "ttfa_p99_ms", "reasoning_tokens_p50"} {
		if ch := figRow(c, key).Changes[1]; ch.Delta != 0 || ch.Significant() {
			t.Errorf("%s: %+v, want no change", key, ch)
		}
	}
	for _, key := range []string{"answer_tpot_p50_ms", "answer_tpot_p90_ms"} {
		ch := figRow(c, key).Changes[1]
		if !ch.Significant() || ch.Delta < 15 || ch.Delta > 25 {
			t.Errorf("%s: %+v, want about +20%%, significant", key, ch)
		}
	}
	var txt bytes.Buffer
	if err := c.WriteHTML(&txt); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), `id="plot-ttfa-cdf-0"`) {
		t.Errorf("compare's HTML lacks the runs' TTFA CDF")
	}
	txt.Reset()
	if err := c.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"TTFA p50 ms", "answer TPOT p50 ms", "reasoning tokens p50"} {
		if !strings.Contains(txt.String(), name) {
			t.Errorf("compare's text lacks %q:\n%s", name, txt.String())
		}
	}
}

// TestNoReasoningCompare: compare of runs that did not reason has no reasoning rows and
// no TTFA plot.
func TestNoReasoningCompare(t *testing.T) {
	plain, stamped := analysis.NoReasoningRuns()
	dir := t.TempDir()
	c, err := compareFiles(t, compare.Options{}, writeRun(t, dir, "stamped.parquet", stamped), writeRun(t, dir, "plain.parquet", plain))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := c.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"TTFA", "ttfa", "answer_tpot", "reasoning"} {
		if strings.Contains(b.String(), s) {
			t.Errorf("a comparison of runs without reasoning mentions %q", s)
		}
	}
}
