package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis/agent"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/duckdbtest"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// agentCall is an ok agent call of session s: sent, first and end in ms from the run
// start, its prompt_tokens, its recorded arrival (trace ms) and duration (ms, -1 for
// none), the server's cached count and the trace's (-1 for none).
func agentCall(id, s, sent, first, end int64, prompt int32, recArr, recDur int64, cached, recCached int32) row {
	const ms = int64(time.Millisecond)
	r := okRow(id, sent*ms, (first-sent)*ms, (end-sent)*ms)
	r.prompt, r.sessionID, r.recArrival = prompt, p64(s), p64(recArr*ms)
	if recDur >= 0 {
		r.recDuration = p64(recDur * ms)
	}
	if cached >= 0 {
		r.cached = p32(cached)
	}
	if recCached >= 0 {
		r.recCached = p32(recCached)
	}
	return r
}

// agentRows are five agent sessions and a row of a sequential session (no recorded
// arrival: not an agent call). Session 10 forks two subagents (calls 2 and 3 overlap)
// that join in call 4; session 20 is a chain whose last call starts as its parent ends;
// session 30 has a failed call, session 50 a dropped one (both incomplete); session 40
// has no recorded duration. The prompts fall in every context bucket (call 7 on the 8k
// edge, which is inclusive). TestAgentFigures has every figure computed by hand.
func agentRows() []row {
	const ms = int64(time.Millisecond)
	rows := []row{
		agentCall(1, 10, 0, 100, 1000, 4000, 0, 800, 0, 0),
		agentCall(2, 10, 1200, 1500, 3000, 20000, 1000, 1500, 16000, 18000),
		agentCall(3, 10, 1200, 1400, 2500, 40000, 1000, 1000, 30000, 36000),
		agentCall(4, 10, 3500, 4500, 5000, 100000, 3000, 1000, 90000, 95000),
		agentCall(5, 20, 2000, 2050, 2600, 200000, 10000, 400, -1, -1),
		agentCall(6, 20, 3600, 3650, 4000, 6000, 11400, 300, 4000, 5000),
		agentCall(7, 20, 4000, 4100, 6000, 8192, 11700, 1300, 6000, 7000),
		agentCall(8, 30, 500, 700, 900, 1000, 0, 300, 0, -1),
		agentCall(10, 40, 6000, 6100, 7000, 130000, 20000, -1, 0, -1),
	}
	rows[1].promptServer = p32(20010) // the server's count is the hit rate's denominator
	for i, gap := range map[int]int64{1: 200, 2: 200, 3: 500, 5: 1000, 6: 0} {
		rows[i].gap = p64(gap * ms)
	}
	failed := row{id: 9, scheduled: 1500 * ms, sent: p64(1500 * ms), prompt: 50000, outTarget: 2, status: "http_error", httpStatus: p32(503), err: new(string),
		sessionID: p64(30), gap: p64(600 * ms), recArrival: p64(800 * ms), recDuration: p64(500 * ms), recCached: p32(45000)}
	dropped := row{id: 11, scheduled: 7000 * ms, prompt: 500, outTarget: 2, status: "dropped", sessionID: p64(50), recArrival: p64(30000 * ms), recDuration: p64(200 * ms)}
	sequential := okRow(12, 100*ms, 50*ms, 7900*ms)
	sequential.sessionID, sequential.turn = p64(99), p32(0)
	return append(rows, failed, dropped, sequential)
}

func agentMeta() results.RunMeta {
	m := testRun()
	best := 0.9
	m.PrefixReusableShare = &best
	return m
}

func agentReport(t *testing.T, rows []row) (*Report, string) {
	t.Helper()
	return agentReportWith(t, rows, DefaultOptions())
}

func agentReportWith(t *testing.T, rows []row, opts Options) (*Report, string) {
	t.Helper()
	path := tempResults(t, agentMeta(), rows)
	return analyzeFile(t, path, opts), path
}

func nearly(a, b float64) bool { return math.Abs(a-b) < 1e-9 || (math.IsNaN(a) && math.IsNaN(b)) }

// TestAgentFigures: every agent figure of agentRows against its value computed by hand.
func TestAgentFigures(t *testing.T) {
	r, _ := agentReport(t, agentRows())
	a := r.Agents
	if a == nil {
		t.Fatal("no agent section")
	}
	if a.Calls != 11 || a.Sessions != 5 || a.Complete != 3 || a.Incomplete != 2 || a.WithFailed != 1 || a.WithDropped != 1 || a.WithCanceled != 0 {
		t.Errorf("counts: %d calls, %d sessions, %d complete, %d incomplete (%d failed, %d dropped, %d canceled); want 11, 5, 3, 2 (1, 1, 0)",
			a.Calls, a.Sessions, a.Complete, a.Incomplete, a.WithFailed, a.WithDropped, a.WithCanceled)
	}
	// Makespans of the complete sessions: 10: 5.0 − 0 s; 20: 6.0 − 2.0 s; 40: 7.0 − 6.0 s.
	// Type 7 on [1, 4, 5]: p90 = 4 + 0.8·1, p99 = 4 + 0.98·1.
	quant := func(name string, q stats.Quantiles, n int64, mean, p50, p90, p99, mx float64) {
		t.Helper()
		if q.N != n || !nearly(q.Mean, mean) || !nearly(q.P50, p50) || !nearly(q.P90, p90) || !nearly(q.P99, p99) || !nearly(q.Max, mx) {
			t.Errorf("%s %+v, want n %d, mean %v, p50 %v, p90 %v, p99 %v, max %v", name, q, n, mean, p50, p90, p99, mx)
		}
	}
	quant("makespan", a.Makespan, 3, 10.0/3, 4, 4.8, 4.98, 5)
	if !slices.Equal(a.MakespansS, []float64{1, 4, 5}) {
		t.Errorf("makespans %v, want sorted [1 4 5]", a.MakespansS)
	}
	// Recorded: 10: [0, 800], [1000, 2500], [1000, 2000], [3000, 4000] ms: 4.0 s;
	// 20: [10000, 10400] .. [11700, 13000]: 3.0 s; 40 has no duration.
	quant("recorded makespan", a.RecordedMakespan, 2, 3.5, 3.5, 3.9, 3.99, 4)
	// Slowdowns 5/4 and 4/3.
	lo, hi := 1.25, 4.0/3
	quant("slowdown", a.Slowdown, 2, (lo+hi)/2, (lo+hi)/2, lo+0.9*(hi-lo), lo+0.99*(hi-lo), hi)
	// LLM time: 10: [0, 1000] + [1200, 3000] (the branches' union) + [3500, 5000] = 4.3 s;
	// 20: [2000, 2600] + [3600, 6000] (two calls touching) = 3.0 s; 40: 1.0 s; of 10 s.
	// Recorded: 10: 0.8 + 1.5 + 1.0 = 3.3 s of 4; 20: 0.4 + 1.6 = 2.0 s of 3.
	if !nearly(a.LLMTimeS, 8.3) || !nearly(a.GapTimeS, 1.7) || !nearly(a.LLMShare, 0.83) ||
		!nearly(a.RecordedLLMTimeS, 5.3) || !nearly(a.RecordedGapTimeS, 1.7) || !nearly(a.RecordedLLMShare, 5.3/7) {
		t.Errorf("LLM time %v s, gap %v s, share %v; recorded %v s, %v s, %v; want 8.3, 1.7, 0.83; 5.3, 1.7, %v",
			a.LLMTimeS, a.GapTimeS, a.LLMShare, a.RecordedLLMTimeS, a.RecordedGapTimeS, a.RecordedLLMShare, 5.3/7)
	}
	// Cache: ok agent calls whose server said: 1, 2 (server count 20010), 3, 4, 6, 7, 8, 10.
	// Recorded: 1, 2, 3, 4, 6, 7 and the failed 9, over their target prompt_tokens.
	c := a.Cache
	if c.Calls != 8 || c.CachedTokens != 146000 || c.PromptTokens != 309202 || !nearly(c.HitRate, 146000.0/309202) {
		t.Errorf("cache: %d calls, %d of %d tokens, rate %v; want 8, 146000 of 309202", c.Calls, c.CachedTokens, c.PromptTokens, c.HitRate)
	}
	if c.RecordedCalls != 7 || c.RecordedCachedTokens != 206000 || c.RecordedPromptTokens != 228192 || !nearly(c.RecordedShare, 206000.0/228192) {
		t.Errorf("recorded cache: %d calls, %d of %d tokens, share %v; want 7, 206000 of 228192", c.RecordedCalls, c.RecordedCachedTokens, c.RecordedPromptTokens, c.RecordedShare)
	}
	if c.BestRate != 0.9 {
		t.Errorf("best rate %v, want the run's 0.9", c.BestRate)
	}
	if want := [][2]float64{{136000, 164010}, {10000, 14192}, {0, 1000}, {0, 130000}}; !slices.Equal(c.BySession, want) {
		t.Errorf("cache by session %v, want %v", c.BySession, want)
	}
	// TTFT by context: <= 8k: 100, 50, 100, 200 ms; <= 32k: 300; <= 64k: 200; <= 128k:
	// 1000, 100; above: 50.
	wantCtx := []struct {
		lo, hi        int64
		n             int64
		p50, p90, p99 float64
	}{{0, 8192, 4, 100, 170, 197}, {8192, 32768, 1, 300, 300, 300}, {32768, 65536, 1, 200, 200, 200}, {65536, 131072, 2, 550, 910, 991}, {131072, 0, 1, 50, 50, 50}}
	if len(a.TTFTByContext) != len(wantCtx) {
		t.Fatalf("TTFT by context %+v", a.TTFTByContext)
	}
	for k, w := range wantCtx {
		b := a.TTFTByContext[k]
		if b.Lo != w.lo || b.Hi != w.hi || b.TTFT.N != w.n || !nearly(b.TTFT.P50, w.p50) || !nearly(b.TTFT.P90, w.p90) || !nearly(b.TTFT.P99, w.p99) {
			t.Errorf("context bucket %d: %+v, want %+v", k, b, w)
		}
	}
	// Live sessions: 10 [0, 5), 20 [2, 6), 30 [0.5, 1.5) (its failed call leaves when sent),
	// 40 [6, 7) s; 50 never sent. Calls: see agentRows.
	if a.PeakSessions != 2 || a.PeakSessionsAtS != 0.5 || a.PeakCalls != 3 || a.PeakCallsAtS != 2 {
		t.Errorf("peaks: %d sessions at %v s, %d calls at %v s; want 2 at 0.5, 3 at 2", a.PeakSessions, a.PeakSessionsAtS, a.PeakCalls, a.PeakCallsAtS)
	}
	live := []float64{1.5, 1.5, 2, 2, 2, 1, 1, 0}
	calls := []float64{1.4, 1.6, 2.1, 0.9, 2, 1, 1, 0}
	if len(a.Series) != len(live) {
		t.Fatalf("series %+v, want %d intervals", a.Series, len(live))
	}
	for k, p := range a.Series {
		if p.StartS != float64(k) || !nearly(p.LiveSessions, live[k]) || !nearly(p.CallsInFlight, calls[k]) {
			t.Errorf("interval %d: %+v, want live %v, calls %v", k, p, live[k], calls[k])
		}
	}
	for _, w := range []string{"2 of 5 agent sessions incomplete (1 with a failed call, 1 with a dropped call, 0 with a canceled call)", "agent makespan p99 from 3 sessions"} {
		if !slices.ContainsFunc(r.Warnings, func(s string) bool { return strings.Contains(s, w) }) {
			t.Errorf("no warning %q in %q", w, r.Warnings)
		}
	}
}

// TestAgentOutputs: the declared agent figures reach the JSON report, the summary and the
// text report with the values of the section; a run without agent calls has none of them
// in its reports and nulls and zeros in its summary columns.
func TestAgentOutputs(t *testing.T) {
	r, _ := agentReport(t, agentRows())
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	ag, ok := m["agents"].(map[string]any)
	if !ok {
		t.Fatalf("no agents object: %s", js.Bytes())
	}
	want := "cache,calls,gap_time_s,incomplete,llm_share,llm_time_s,makespan_s,peak_calls_in_flight,peak_calls_in_flight_at_s,peak_live_sessions,peak_live_sessions_at_s," +
		"recorded_gap_time_s,recorded_llm_share,recorded_llm_time_s,recorded_makespan_s,series,series_interval_s,sessions,sessions_complete,sessions_incomplete,slowdown,ttft_by_context"
	if got := strings.Join(sortedKeys(ag), ","); got != want {
		t.Errorf("agents keys %s\nwant %s", got, want)
	}
	cache := ag["cache"].(map[string]any)
	if cache["hit_rate"].(float64) != 146000.0/309202 || cache["recorded_share"].(float64) != 206000.0/228192 || cache["best_rate"].(float64) != 0.9 {
		t.Errorf("agents.cache %v", cache)
	}
	if ag["makespan_s"].(map[string]any)["p50"].(float64) != 4 || ag["sessions_complete"].(float64) != 3 || ag["peak_calls_in_flight"].(float64) != 3 {
		t.Errorf("agents %v", ag)
	}
	samples := m["breakdown"].(map[string]any)["samples"].(map[string]any)
	if samples["makespan_s"].(float64) != 3 || samples["slowdown"].(float64) != 2 {
		t.Errorf("breakdown.samples %v", samples)
	}
	cols := map[string]any{}
	for _, c := range r.summaryCols() {
		cols[c.name] = c.v
	}
	for name, v := range map[string]any{"agent_sessions": int64(5), "agent_sessions_complete": int64(3), "agent_sessions_incomplete": int64(2), "agent_calls": int64(11),
		"agent_makespan_s_p50": 4.0, "agent_recorded_makespan_s_p50": 3.5, "agent_slowdown_n": int64(2), "agent_llm_share": 0.83,
		"agent_cache_hit_rate": 146000.0 / 309202, "agent_cache_best_rate": 0.9, "agent_peak_live_sessions": 2.0, "agent_peak_calls_in_flight": 3.0} {
		if got, ok := cols[name]; !ok || (got != v && !nearly(toFloat(got), toFloat(v))) {
			t.Errorf("summary %s = %v (%T), want %v", name, got, got, v)
		}
	}
	var txt bytes.Buffer
	r.WriteText(&txt)
	for _, line := range []string{"Agents: 5 sessions (3 complete; 2 incomplete: 1 with a failed call, 1 with a dropped call, 0 with a canceled call), 11 calls",
		"peak calls in flight", "at 2.000 s", "<= 8k", "> 128k"} {
		if !strings.Contains(txt.String(), line) {
			t.Errorf("text report lacks %q", line)
		}
	}

	// Without agent calls: no section, and the summary's agent columns are zero or null.
	plain := conversationReport(t, testRun(), conversationRows())
	if plain.Agents != nil {
		t.Fatalf("agent section from sequential sessions: %+v", plain.Agents)
	}
	js.Reset()
	plain.WriteJSON(&js)
	if bytes.Contains(js.Bytes(), []byte("agent")) || bytes.Contains(js.Bytes(), []byte("makespan")) {
		t.Errorf("a run without agents has agent keys in its JSON report")
	}
	for _, c := range plain.summaryCols() {
		if strings.HasPrefix(c.name, "agent_") && c.v != int64(0) && !math.IsNaN(toFloat(c.v)) {
			t.Errorf("summary %s = %v without agents, want 0 or null", c.name, c.v)
		}
	}
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int64:
		return float64(x)
	}
	return math.NaN()
}

// TestAgentGolden: the text, JSON and HTML reports of agentRows.
func TestAgentGolden(t *testing.T) {
	r, _ := agentReport(t, agentRows())
	for _, w := range []struct {
		name  string
		write func(*bytes.Buffer) error
	}{{"agents.txt", func(b *bytes.Buffer) error { return r.WriteText(b) }}, {"agents.json", func(b *bytes.Buffer) error { return r.WriteJSON(b) }},
		{"agents.html", func(b *bytes.Buffer) error { return r.WriteHTML(b) }}} {
		var b bytes.Buffer
		if err := w.write(&b); err != nil {
			t.Fatal(err)
		}
		golden(t, w.name, b.Bytes())
	}
}

// TestAgentDuckDB: DuckDB recomputes, from the same results file, the complete sessions'
// makespans and recorded makespans, and the cache rates.
func TestAgentDuckDB(t *testing.T) {
	r, path := agentReport(t, agentRows())
	f := "'" + filepath.ToSlash(path) + "'"
	agents := f + " WHERE session_id IS NOT NULL AND recorded_arrival_ns IS NOT NULL"
	rows := duckdbtest.Query(t, `SELECT (max(end_ns) - min(sent_ns)) / 1e9 AS makespan,
		CASE WHEN count(recorded_duration_ns) = count(*) THEN (max(recorded_arrival_ns + recorded_duration_ns) - min(recorded_arrival_ns)) / 1e9 END AS recorded
		FROM `+agents+` GROUP BY session_id HAVING bool_and(status = 'ok') ORDER BY makespan`)
	var makespans, recorded []float64
	for _, x := range rows {
		makespans = append(makespans, x["makespan"].(float64))
		if v, ok := x["recorded"].(float64); ok {
			recorded = append(recorded, v)
		}
	}
	slices.Sort(recorded)
	if !slices.Equal(makespans, r.Agents.MakespansS) {
		t.Errorf("DuckDB makespans %v, analysis %v", makespans, r.Agents.MakespansS)
	}
	if q := stats.Summarize(recorded); q.N != r.Agents.RecordedMakespan.N || q.P50 != r.Agents.RecordedMakespan.P50 {
		t.Errorf("DuckDB recorded makespans %v, analysis %+v", recorded, r.Agents.RecordedMakespan)
	}
	c := duckdbtest.Query(t, `SELECT
		(SELECT sum(prompt_tokens_cached) / sum(coalesce(prompt_tokens_server, prompt_tokens)) FROM `+agents+` AND status = 'ok' AND prompt_tokens_cached IS NOT NULL) AS hit,
		(SELECT sum(recorded_cached_tokens) / sum(prompt_tokens) FROM `+agents+` AND recorded_cached_tokens IS NOT NULL) AS recorded`)[0]
	if !nearly(c["hit"].(float64), r.Agents.Cache.HitRate) || !nearly(c["recorded"].(float64), r.Agents.Cache.RecordedShare) {
		t.Errorf("DuckDB cache rates %v, analysis %v and %v", c, r.Agents.Cache.HitRate, r.Agents.Cache.RecordedShare)
	}
}

// agentRun is n sessions of two chained calls each, session k's makespan (4 + k mod 5)·scale
// s and its cached share cachedPct of 10,000-token prompts.
func agentRun(n int, scale float64, cachedPct int32) []row {
	var rows []row
	for k := range int64(n) {
		base := k * 100
		m := int64(float64(4000+1000*(k%5)) * scale)
		rows = append(rows,
			agentCall(2*k, k, base, base+50, base+m/2, 10000, 0, 3000, cachedPct*100, -1),
			agentCall(2*k+1, k, base+m/2+100, base+m/2+150, base+m, 10000, 3100, 1900, cachedPct*100, -1))
	}
	return rows
}

// TestContextEdges: the buckets' bounds are k of 1,024 tokens, as context windows are told.
func TestContextEdges(t *testing.T) {
	if got := fmt.Sprint(agent.ContextEdges); got != "[8192 32768 65536 131072]" {
		t.Errorf("context edges %s", got)
	}
}

// TestAgentsDocumented: every key of the agents object and every agent_ summary column is
// in docs/metrics.md.
func TestAgentsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := agentReport(t, agentRows())
	var js bytes.Buffer
	r.WriteJSON(&js)
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, y := range x {
				if !bytes.Contains(doc, []byte(k)) {
					t.Errorf("agents key %s is not in docs/metrics.md", k)
				}
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(m["agents"])
	n := 0
	for _, c := range r.summaryCols() {
		if !strings.HasPrefix(c.name, "agent_") {
			continue
		}
		n++
		name := c.name
		for _, q := range []string{"_n", "_mean", "_p50", "_p90", "_p95", "_p99", "_p99_9", "_max"} {
			if base, ok := strings.CutSuffix(name, q); ok && (strings.HasSuffix(base, "_s") || strings.HasSuffix(base, "slowdown")) {
				name = base + "_"
				break
			}
		}
		if !bytes.Contains(doc, []byte("`"+name)) {
			t.Errorf("summary column %s is not in docs/metrics.md", c.name)
		}
	}
	if n == 0 {
		t.Error("no agent_ summary column")
	}
}

// TestAgentSessionsPerFile: a session is one file's calls with one session_id (sharding
// keeps a session on one shard), so the same id in two shards' files is two sessions, and
// a session's makespan never spans files.
func TestAgentSessionsPerFile(t *testing.T) {
	a := []row{agentCall(1, 7, 0, 100, 1000, 100, 0, 1000, -1, -1), agentCall(2, 7, 1500, 1600, 2000, 100, 1500, 500, -1, -1)}
	b := []row{agentCall(3, 7, 5000, 5100, 8000, 100, 0, 2000, -1, -1)}
	b[0].shard = 1
	m0, m1 := agentMeta(), agentMeta()
	m0.ShardCount, m1.ShardCount, m1.ShardIndex = 2, 2, 1
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "a.parquet"), filepath.Join(dir, "b.parquet")
	writeResults(t, pa, m0, a)
	writeResults(t, pb, m1, b)
	d, err := Load(context.Background(), decode.LoadOptions{}, pa, pb)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze(d, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	// Shard 0's session: 2.0 s against 2.0 s recorded; shard 1's: 3.0 s against 2.0 s.
	if ag := r.Agents; ag.Sessions != 2 || !slices.Equal(ag.MakespansS, []float64{2, 3}) || !slices.Equal(ag.Slowdowns, []float64{1, 1.5}) {
		t.Errorf("%d sessions, makespans %v, slowdowns %v; want 2, [2 3], [1 1.5]", ag.Sessions, ag.MakespansS, ag.Slowdowns)
	}
}
