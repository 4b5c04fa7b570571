package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/arrow"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay/results"
)

// conversationRows: two sessions and a row without one. Hand-computed figures in
// TestConversationFigures.
func conversationRows() []row {
	const ms = int64(time.Millisecond)
	mk := func(id, sent int64, prompt int32, server *int32, session *int64, turn *int32, wait *int64, cached *int32) row {
		r := okRow(id, sent, 10*ms, 20*ms)
		r.prompt, r.promptServer, r.sessionID, r.turn, r.sessionWait, r.cached = prompt, server, session, turn, wait, cached
		return r
	}
	rows := []row{
		mk(1, 0, 100, p32(100), p64(1), p32(0), nil, p32(0)),
		mk(2, 100*ms, 200, p32(200), p64(1), p32(1), p64(0), p32(96)),
		mk(3, 200*ms, 300, nil, p64(1), p32(2), p64(50*ms), p32(288)),
		mk(4, 300*ms, 100, p32(100), p64(2), p32(0), nil, nil),
		mk(5, 400*ms, 400, p32(400), p64(2), p32(1), p64(5*ms), p32(112)),
		mk(7, 600*ms, 50, p32(50), nil, nil, nil, p32(10)),
	}
	// A failed turn: it waited (counted in the waits) but has no usage (not in the hit rate).
	fail := row{id: 6, scheduled: 500 * ms, sent: p64(500 * ms), prompt: 100, outTarget: 2, status: "http_error",
		httpStatus: p32(503), err: new(string), sessionID: p64(2), turn: p32(2), sessionWait: p64(30 * ms)}
	return append(rows, fail)
}

func conversationReport(t *testing.T, meta results.RunMeta, rows []row) *Report {
	t.Helper()
	d, err := Load(context.Background(), decode.LoadOptions{}, tempResults(t, meta, rows))
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.PromptBuckets = []int64{150, 350}
	r, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConversationFigures: the hit rate overall, by turn and by prompt bucket, the best
// rate from the run metadata, the session waits and the reshaped flag, against figures
// computed by hand from conversationRows.
func TestConversationFigures(t *testing.T) {
	meta := testRun()
	best := 0.78
	meta.PrefixReusableShare = &best
	r := conversationReport(t, meta, conversationRows())
	c := r.Conversations
	if c == nil {
		t.Fatal("no conversations section")
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	type fig struct {
		requests, cached, prompt int64
		rate                     float64
	}
	same := func(name string, b CacheBucket, w fig) {
		t.Helper()
		if b.Requests != w.requests || b.CachedTokens != w.cached || b.PromptTokens != w.prompt || !near(b.HitRate, w.rate) {
			t.Errorf("%s: %+v, want %+v", name, b, w)
		}
	}
	pc := c.PrefixCache
	// ok rows with a cached count: 1 (0/100), 2 (96/200), 3 (288/300: no server count,
	// the target), 5 (112/400), 7 (10/50); row 4 did not say, row 6 failed.
	same("overall", pc.CacheBucket, fig{5, 506, 1050, 506.0 / 1050})
	if pc.BestRate != 0.78 {
		t.Errorf("best rate %v, want 0.78", pc.BestRate)
	}
	wantTurns := []fig{{1, 0, 100, 0}, {2, 208, 600, 208.0 / 600}, {1, 288, 300, 0.96}}
	if len(pc.ByTurn) != len(wantTurns) {
		t.Fatalf("by turn: %+v", pc.ByTurn)
	}
	for k, w := range wantTurns {
		if pc.ByTurn[k].Lo != int64(k) || pc.ByTurn[k].Hi != int64(k+1) {
			t.Errorf("turn bucket %d is [%d, %d)", k, pc.ByTurn[k].Lo, pc.ByTurn[k].Hi)
		}
		same("turn "+string(rune('0'+k)), pc.ByTurn[k], w)
	}
	wantPrompt := []fig{{2, 10, 150, 10.0 / 150}, {2, 384, 500, 384.0 / 500}, {1, 112, 400, 0.28}}
	if len(pc.ByPrompt) != 3 || pc.ByPrompt[1].Lo != 150 || pc.ByPrompt[1].Hi != 350 || pc.ByPrompt[2].Hi != 0 {
		t.Fatalf("by prompt: %+v", pc.ByPrompt)
	}
	for k, w := range wantPrompt {
		same(cacheLabel(pc.ByPrompt[k]), pc.ByPrompt[k], w)
	}

	// Waits: rows 2 (0), 3 (50 ms), 5 (5 ms), 6 (30 ms); three waited, two over 10 ms:
	// 2/4 > 10%, reshaped.
	w := c.Sessions
	if w == nil {
		t.Fatal("no session waits")
	}
	if w.Turns != 4 || w.Waited != 3 || w.WaitedShare != 0.75 || w.OverBound != 2 || w.Bound != 10*time.Millisecond || !w.Reshaped {
		t.Errorf("session waits %+v", w)
	}
	if w.Wait.N != 3 || w.Wait.P50 != 30 || !near(w.Wait.P99, 30+0.98*20) || w.Wait.Max != 50 {
		t.Errorf("wait quantiles %+v, want p50 30, p99 49.6 (type 7), max 50", w.Wait)
	}

	// The same figures in JSON, text and the summary.
	var js bytes.Buffer
	r.WriteJSON(&js)
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	conv := m["conversations"].(map[string]any)
	if got := sortedKeys(conv); strings.Join(got, ",") != "prefix_cache,sessions,turn_overlap" {
		t.Errorf("conversations keys %v", got)
	}
	jpc := conv["prefix_cache"].(map[string]any)
	if got := sortedKeys(jpc); strings.Join(got, ",") != "best_rate,best_rate_rule,by_prompt_tokens,by_turn,cached_tokens,hit_rate,prompt_tokens,requests" {
		t.Errorf("prefix_cache keys %v", got)
	}
	if jpc["hit_rate"].(float64) != 506.0/1050 || jpc["best_rate"].(float64) != 0.78 || jpc["best_rate_rule"] != results.ReusableBlocks {
		t.Errorf("prefix_cache %v", jpc)
	}
	bt := jpc["by_turn"].([]any)[0].(map[string]any)
	if got := sortedKeys(bt); strings.Join(got, ",") != "cached_tokens,hi,hit_rate,lo,prompt_tokens,requests" {
		t.Errorf("by_turn keys %v", got)
	}
	js2 := conv["sessions"].(map[string]any)
	if got := sortedKeys(js2); strings.Join(got, ",") != "bound_ms,reshaped_by_server,reshaped_share,session_wait_ms,turns,waited,waited_over_bound,waited_share" {
		t.Errorf("sessions keys %v", got)
	}
	if f := m["flags"].(map[string]any); f["reshaped_by_server"] != true {
		t.Errorf("flags %v", f)
	}
	var text strings.Builder
	r.WriteText(&text)
	for _, want := range []string{"prefix cache: the server reused 48.2% of the prompt tokens (506 of 1050 over 5 ok requests); the replay allows 78.0% (the trace's prefix blocks)",
		"turn 1                    2          208          600      34.7%",
		"session waits: 3 of 4 later turns (75.0%) waited for their predecessor; wait p50 30.000 ms, p99 49.600 ms; 2 waited over 10ms",
		"reshaped by the server: YES (2 of 4 later turns waited for their predecessor over 10ms; bound 10.0%)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	dir := t.TempDir()
	if err := WriteParquetDir(dir, r); err != nil {
		t.Fatal(err)
	}
	sum := readSummary(t, filepath.Join(dir, "summary.parquet"), 0)
	for k, want := range map[string]any{"prefix_cache_requests": int64(5), "prefix_cache_hit_rate": 506.0 / 1050, "prefix_cache_best_rate": 0.78,
		"session_turns": int64(4), "session_waited_share": 0.75, "session_wait_ms_p50": 30.0, "reshaped_by_server": true} {
		if sum[k] != want {
			t.Errorf("summary %s = %v, want %v", k, sum[k], want)
		}
	}

	if strings.Contains(text.String(), "ABOVE the best") || strings.Contains(strings.Join(r.Warnings, "\n"), "above the best") {
		t.Error("a hit rate under the best rate is said to pass it")
	}
	low := 0.40 // under the measured 48.2%: should never happen, and is said
	meta.PrefixReusableShare, meta.PrefixReusableRule = &low, results.ReusableHistory
	var above strings.Builder
	ra := conversationReport(t, meta, conversationRows())
	ra.WriteText(&above)
	for _, want := range []string{"the replay allows 40.0% (actual history: later turns reuse what their predecessor sent and its planned answer, first turns the trace's prefix blocks)",
		"(ABOVE the best the replay allows: the server had these prompts cached before the run, or this is a bug)",
		"prefix-cache hit rate 48.2% above the best the replay allows (40.0%)"} {
		if !strings.Contains(above.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, above.String())
		}
	}
	if ra.Conversations.PrefixCache.BestRule != results.ReusableHistory {
		t.Errorf("best rule %q, want %q", ra.Conversations.PrefixCache.BestRule, results.ReusableHistory)
	}
	// An agent replay's rule is named as such, not as the trace's prefix blocks.
	meta.PrefixReusableShare, meta.PrefixReusableRule = &best, results.ReusableAgents
	var agents strings.Builder
	conversationReport(t, meta, conversationRows()).WriteText(&agents)
	if want := "the replay allows 78.0% (agent contexts: each call reuses what it shares of its first parent's prompt and planned answer)"; !strings.Contains(agents.String(), want) {
		t.Errorf("text lacks %q:\n%s", want, agents.String())
	}
	meta.PrefixReusableShare, meta.PrefixReusableRule = &best, ""

	// Under the flag's bound: only row 3 waits past 10 ms when the bound is 40 ms → 1/4 >
	// 10% still; with a bound of 60 ms none does.
	d, _ := Load(context.Background(), decode.LoadOptions{}, tempResults(t, meta, conversationRows()))
	opts := DefaultOptions()
	opts.MaxLateness = 60 * time.Millisecond
	r2, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	if w := r2.Conversations.Sessions; w.OverBound != 0 || w.Reshaped {
		t.Errorf("bound 60 ms: %+v, want none over and not reshaped", w)
	}
}

// cacheLabel is a prefix-cache bucket's range as the breakdown prints it.
func cacheLabel(b CacheBucket) string { return Bucket{Lo: b.Lo, Hi: b.Hi}.Label() }

// TestNoConversations: an open-loop run without sessions, cached counts or prefix blocks
// has no conversations section, no reshaped flag, and no new text (nor any conversation
// column in memory); a file of revision 1.0
// (without the four columns) reads as such a run.
func TestNoConversations(t *testing.T) {
	rows := conversationRows()
	for i := range rows {
		rows[i].sessionID, rows[i].turn, rows[i].sessionWait, rows[i].cached = nil, nil, nil, nil
	}
	allNull := tempResults(t, testRun(), rows)
	dn, err := Load(context.Background(), decode.LoadOptions{}, allNull)
	if err != nil {
		t.Fatal(err)
	}
	if dn.SessionID != nil || dn.Turn != nil || dn.SessionWait != nil || dn.Cached != nil {
		t.Error("a file whose conversation columns are all null allocated them")
	}
	r := conversationReport(t, testRun(), rows)
	check := func(name string, r *Report) {
		t.Helper()
		if r.Conversations != nil {
			t.Errorf("%s: conversations %+v", name, r.Conversations)
		}
		var js, text bytes.Buffer
		r.WriteJSON(&js)
		r.WriteText(&text)
		if bytes.Contains(js.Bytes(), []byte("conversations")) || bytes.Contains(js.Bytes(), []byte("reshaped")) {
			t.Errorf("%s: JSON mentions conversations:\n%s", name, js.String())
		}
		if strings.Contains(text.String(), "Conversations") || strings.Contains(text.String(), "reshaped") {
			t.Errorf("%s: text mentions conversations", name)
		}
	}
	check("all null", r)

	// Revision 1.0: the schema without the four columns.
	sc := resultsSchema(t, testRun())
	var fs []arrow.Field
	for _, f := range sc.Fields() {
		if c, _ := results.Lookup(f.Name); c.Since == 0 {
			fs = append(fs, f)
		}
	}
	md := sc.Metadata()
	p := filepath.Join(t.TempDir(), "v10.parquet")
	writeResultsSchema(t, p, arrow.NewSchema(fs, &md), conversationRows())
	d, err := Load(context.Background(), decode.LoadOptions{}, p)
	if err != nil {
		t.Fatalf("revision 1.0 file: %v", err)
	}
	if d.SessionID != nil || d.Turn != nil || d.SessionWait != nil || d.Cached != nil {
		t.Error("a revision 1.0 file allocated conversation columns")
	}
	r10, err := Analyze(d, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	check("revision 1.0", r10)
	if r10.Requests.Total != int64(len(conversationRows())) {
		t.Errorf("revision 1.0: %d requests", r10.Requests.Total)
	}
}

// Every conversations key and summary column is in docs/metrics.md.
func TestConversationKeysDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	meta := testRun()
	best := 0.5
	meta.PrefixReusableShare = &best
	r := conversationReport(t, meta, conversationRows())
	var b bytes.Buffer
	r.WriteJSON(&b)
	var m map[string]any
	json.Unmarshal(b.Bytes(), &m)
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, y := range x {
				if !bytes.Contains(doc, []byte("`"+k+"`")) {
					t.Errorf("JSON key %s is not in docs/metrics.md", k)
				}
				if !strings.HasSuffix(k, "_ms") {
					walk(y)
				}
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(m["conversations"])
	for _, c := range r.summaryCols() {
		if !strings.HasPrefix(c.name, "prefix_cache") && !strings.HasPrefix(c.name, "session") && c.name != "reshaped_by_server" {
			continue
		}
		name := c.name
		if i := strings.LastIndex(name, "_ms_"); i > 0 {
			name = name[:i+3] + "_{"
		}
		if !bytes.Contains(doc, []byte("`"+name)) {
			t.Errorf("summary column %s is not in docs/metrics.md", c.name)
		}
	}
}

// TestTurnOverlap: later turns sent before their predecessor's end_ns, by hand, over two
// shards of one run: a predecessor is looked up in the turn's own file only, a predecessor
// without end_ns or a turn never sent is not judged, a turn sent exactly at the end is not
// an overlap. Sequential-mode rows (conversationRows) show none.
func TestTurnOverlap(t *testing.T) {
	const ms = int64(time.Millisecond)
	turn := func(r row, session int64, k int32) row { r.sessionID, r.turn = p64(session), p32(k); return r }
	failed := row{id: 4, scheduled: 0, sent: p64(0), prompt: 100, outTarget: 2, status: "http_error", httpStatus: p32(503), err: new(string)}
	dropped := row{id: 8, scheduled: 130 * ms, prompt: 100, outTarget: 2, status: "dropped", err: new(string)}
	a := []row{
		turn(okRow(1, 0, 10*ms, 20*ms), 1, 0),       // ends at 20 ms
		turn(okRow(2, 10*ms, 10*ms, 20*ms), 1, 1),   // sent at 10 ms < 20: overlapped; ends at 30 ms
		turn(okRow(3, 50*ms, 10*ms, 20*ms), 1, 2),   // sent at 50 ms ≥ 30: not; ends at 70 ms
		turn(failed, 2, 0),                          // no end_ns
		turn(okRow(5, 5*ms, 10*ms, 20*ms), 2, 1),    // its predecessor has no end: not judged
		turn(okRow(6, 5*ms, 10*ms, 20*ms), 3, 1),    // no predecessor in the file: not judged
		turn(okRow(7, 100*ms, 10*ms, 20*ms), 4, 0),  // ends at 120 ms
		turn(dropped, 4, 1),                         // never sent: not judged
		turn(okRow(9, 200*ms, 10*ms, 20*ms), 5, 0),  // ends at 220 ms
		turn(okRow(10, 220*ms, 10*ms, 20*ms), 5, 1), // sent exactly at its predecessor's end: not overlapped
		okRow(11, 0, 10*ms, 20*ms),                  // no session
	}
	b := []row{
		turn(okRow(12, 0, 10*ms, 20*ms), 1, 3), // session 1's turn 2 is in the other shard's file: not judged
	}
	b[0].shard = 1
	m0, m1 := testRun(), testRun()
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
	o := r.Conversations.Overlap
	if o == nil || o.Turns != 3 || o.Overlapped != 1 || o.Share != 1.0/3 {
		t.Fatalf("overlap %+v, want 1 of 3", o)
	}
	var text strings.Builder
	r.WriteText(&text)
	if want := "turn overlap: 1 of 3 later turns (33.3%) were sent before their predecessor's answer ended"; !strings.Contains(text.String(), want) {
		t.Errorf("text lacks %q:\n%s", want, text.String())
	}
	var html strings.Builder
	if err := r.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	if want := "<tr><th>turns sent before their predecessor's answer ended</th><td>1 of 3 later turns (33.3%)</td></tr>"; !strings.Contains(html.String(), want) {
		t.Errorf("HTML lacks %q", want)
	}
	var js bytes.Buffer
	r.WriteJSON(&js)
	var m struct {
		Conversations struct {
			Overlap map[string]any `json:"turn_overlap"`
		} `json:"conversations"`
	}
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if jo := m.Conversations.Overlap; jo["turns"] != 3.0 || jo["overlapped"] != 1.0 || jo["overlapped_share"] != 1.0/3 || len(jo) != 3 {
		t.Errorf("JSON turn_overlap %v", jo)
	}
	sdir := t.TempDir()
	if err := WriteParquetDir(sdir, r); err != nil {
		t.Fatal(err)
	}
	sum := readSummary(t, filepath.Join(sdir, "summary.parquet"), 0)
	for k, want := range map[string]any{"turn_overlap_turns": int64(3), "turn_overlap_overlapped": int64(1), "turn_overlap_share": 1.0 / 3} {
		if sum[k] != want {
			t.Errorf("summary %s = %v, want %v", k, sum[k], want)
		}
	}

	// Sequential-mode rows: every later turn sent after its predecessor ended.
	seq := conversationReport(t, testRun(), conversationRows()).Conversations.Overlap
	if seq == nil || seq.Turns != 4 || seq.Overlapped != 0 || seq.Share != 0 {
		t.Errorf("sequential rows: overlap %+v, want 0 of 4", seq)
	}
}
