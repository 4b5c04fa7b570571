package replay

import (
	"github.com/llmreplay/llmreplay/internal/vllmtest"

	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/trace"
)

// TestSessionIDRecorded: every row of a trace with sessions carries its session_id in the
// results file, whether sent or dropped, and a row without a session reads null.
func TestSessionIDRecorded(t *testing.T) {
	base := vllmtest.Start(t, &vllmtest.Server{TTFT: 200 * time.Millisecond}) // the first request holds the one slot: the others are dropped
	c := newTestClient(t, base, nil)
	reqs := uniformTrace(3, 5*time.Millisecond, 4, 2)
	reqs[0].SessionID, reqs[0].HasSession = 1<<40+3, true
	reqs[1].SessionID, reqs[1].HasSession = 0, true // session 0 is a session
	want := map[int64]int64{reqs[0].ID: 1<<40 + 3, reqs[1].ID: 0, reqs[2].ID: results.Null}
	_, res, _ := runTrace(t, context.Background(), c, reqs, func(o *Options) { o.MaxInflight = 1 })
	if len(res) != len(reqs) {
		t.Fatalf("%d results, want %d", len(res), len(reqs))
	}
	dropped := 0
	for _, r := range res {
		if r.SessionID != want[r.RequestID] {
			t.Errorf("request %d (%s): session_id %d, want %d", r.RequestID, r.Status, r.SessionID, want[r.RequestID])
		}
		if r.Status == results.StatusDropped {
			dropped++
		}
	}
	if dropped == 0 {
		t.Errorf("no request dropped: the dropped path was not exercised (%v)", byStatus(res))
	}
}

// TestReusableShare: hand-computed shares of a trace with 4-token prefix blocks.
func TestReusableShare(t *testing.T) {
	rows := []trace.Request{
		{ID: 0, PromptTokens: 10, PrefixBlocks: []int64{1, 2}},    // nothing cached yet
		{ID: 1, PromptTokens: 12, PrefixBlocks: []int64{1, 2, 3}}, // 2 leading blocks seen: 8
		{ID: 2, PromptTokens: 6, PrefixBlocks: []int64{1, 5}},     // 1: 4
		{ID: 3, PromptTokens: 8, PrefixBlocks: []int64{9, 2}},     // 0: block 2 seen, but not after block 9
		{ID: 4, PromptTokens: 5},                                  // no blocks
		{ID: 5, PromptTokens: 3, PrefixBlocks: []int64{1, 2}},     // 2 seen, capped by the prompt: 3
	}
	cases := []struct {
		warmup, limit int64
		want          float64
	}{
		{0, 0, 15.0 / 44},
		{1, 0, 15.0 / 34}, // row 0 sent, not counted: its blocks are cached
		{0, 2, 8.0 / 22},
		{1, 1, 8.0 / 12},
	}
	for _, tc := range cases {
		got, ok, err := ReusableShare(trace.NewSliceSource(rows), 4, tc.warmup, tc.limit)
		if err != nil || !ok || math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("warmup %d limit %d: %v (ok %v, %v), want %v", tc.warmup, tc.limit, got, ok, err, tc.want)
		}
	}
	if _, ok, _ := ReusableShare(trace.NewSliceSource(nil), 4, 0, 0); ok {
		t.Error("an empty trace has a share")
	}
}

// TestPrepareRecordsReusableShare: Prepare puts the share of the rows the run records
// (--warmup and --limit applied) in the run metadata when the trace has prefix blocks,
// and nothing when it has none.
func TestPrepareRecordsReusableShare(t *testing.T) {
	u := vllmtest.Start(t, &vllmtest.Server{})
	rows := []trace.Request{
		{ID: 0, PromptTokens: 10, OutputTokens: 1, PrefixBlocks: []int64{1, 2}},
		{ID: 1, Arrival: time.Millisecond, PromptTokens: 12, OutputTokens: 1, PrefixBlocks: []int64{1, 2, 3}},
		{ID: 2, Arrival: 2 * time.Millisecond, PromptTokens: 6, OutputTokens: 1, PrefixBlocks: []int64{1, 5}},
		{ID: 3, Arrival: 3 * time.Millisecond, PromptTokens: 8, OutputTokens: 1, PrefixBlocks: []int64{9, 2}},
	}
	for _, tc := range []struct {
		name string
		bt   int
		want float64 // < 0: no share
	}{{"blocks", 4, 12.0 / 18}, {"no blocks", 0, -1}} {
		path := filepath.Join(t.TempDir(), "t.parquet")
		w, err := trace.Create(path, trace.Meta{BlockTokens: tc.bt})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if tc.bt == 0 {
				r.PrefixBlocks = nil
			}
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Endpoint, cfg.Trace, cfg.Quiet = u.String(), path, true
		cfg.Warmup, cfg.Limit = 1, 2 // rows 1 and 2 recorded: (8 + 4) / (12 + 6); row 3 not
		cfg.Output = filepath.Join(t.TempDir(), "r.parquet")
		sess, err := Prepare(context.Background(), cfg, Env{ToolVersion: "test"})
		if err != nil {
			t.Fatal(err)
		}
		got := sess.Options.Meta.PrefixReusableShare
		sess.Close()
		switch {
		case tc.want < 0 && got != nil:
			t.Errorf("%s: share %v, want none", tc.name, *got)
		case tc.want >= 0 && (got == nil || math.Abs(*got-tc.want) > 1e-12):
			t.Errorf("%s: share %v, want %v", tc.name, got, tc.want)
		}
	}
}

// sessionReuseRows: two sessions with 4-token blocks and a row without a session.
// Hand-computed shares in TestHistoryReusableShare.
func sessionReuseRows() []trace.Request {
	s := func(r trace.Request, id int64) trace.Request { r.SessionID, r.HasSession = id, true; return r }
	return []trace.Request{
		s(trace.Request{ID: 0, PromptTokens: 10, OutputTokens: 5, PrefixBlocks: []int64{1, 2}}, 1),    // first turn, nothing cached: 0; history 15
		s(trace.Request{ID: 1, PromptTokens: 12, OutputTokens: 3, PrefixBlocks: []int64{1, 2, 3}}, 2), // first turn, 2 blocks seen: 8
		s(trace.Request{ID: 2, PromptTokens: 30, OutputTokens: 4, PrefixBlocks: []int64{1, 2, 7}}, 1), // later: its history 15 of 30; history 34; block 7 not sent
		{ID: 3, PromptTokens: 8, OutputTokens: 1, PrefixBlocks: []int64{1, 2, 7}},                     // no session: 2 blocks (7 unseen): 8
		s(trace.Request{ID: 4, PromptTokens: 20, OutputTokens: 1}, 1),                                 // later, trace prompt under its history: sends 35, reuses 34
		s(trace.Request{ID: 5, PromptTokens: 6, OutputTokens: 1, PrefixBlocks: []int64{1, 2, 7}}, 3),  // first turn, 3 blocks seen, capped by the prompt: 6
	}
}

// TestHistoryReusableShare: the actual-history rule by hand: a later turn reuses its
// planned history, a first turn or a row without a session its blocks; warm-up rows fill
// the histories but are not counted. ReusableShare on the same rows counts blocks only.
func TestHistoryReusableShare(t *testing.T) {
	rows := sessionReuseRows()
	cases := []struct {
		warmup, limit int64
		want          float64
	}{
		{0, 0, 71.0 / 101},
		{1, 0, 71.0 / 91},
		{0, 2, 8.0 / 22},
		{2, 2, 23.0 / 38},
	}
	for _, tc := range cases {
		got, ok, err := HistoryReusableShare(trace.NewSliceSource(rows), 4, tc.warmup, tc.limit)
		if err != nil || !ok || math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("warmup %d limit %d: %v (ok %v, %v), want %v", tc.warmup, tc.limit, got, ok, err, tc.want)
		}
	}
	// Blocks only: rows 2 (1, 2 seen: 8), 3 (1, 2, 7: 8), 4 (0), 5 (min(12, 6)) and 1 (8).
	if got, _, _ := ReusableShare(trace.NewSliceSource(rows), 4, 0, 0); math.Abs(got-30.0/86) > 1e-12 {
		t.Errorf("blocks rule: %v, want %v", got, 30.0/86)
	}
	// Without blocks the history alone: (15 + 34) / 101.
	if got, _, _ := HistoryReusableShare(trace.NewSliceSource(rows), 0, 0, 0); math.Abs(got-49.0/101) > 1e-12 {
		t.Errorf("no blocks: %v, want %v", got, 49.0/101)
	}
}

// TestPrepareReusableRule: Prepare records the actual-history rule exactly for sequential
// sessions with --history actual (with or without prefix blocks), the blocks rule otherwise.
func TestPrepareReusableRule(t *testing.T) {
	u := vllmtest.Start(t, &vllmtest.Server{})
	for _, tc := range []struct {
		name, sessions, history string
		bt                      int
		rule                    string
		want                    float64 // < 0: no share
	}{
		{"default (sequential, actual)", "", "", 4, results.ReusableHistory, 71.0 / 101},
		{"sequential synthetic", SessionsSequential, HistorySynthetic, 4, results.ReusableBlocks, 30.0 / 86},
		{"independent", SessionsIndependent, "", 4, results.ReusableBlocks, 30.0 / 86},
		{"actual, no blocks", "", "", 0, results.ReusableHistory, 49.0 / 101},
		{"independent, no blocks", SessionsIndependent, "", 0, "", -1},
	} {
		path := filepath.Join(t.TempDir(), "t.parquet")
		w, err := trace.Create(path, trace.Meta{BlockTokens: tc.bt})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range sessionReuseRows() {
			r.Arrival = time.Duration(i) * time.Millisecond
			if tc.bt == 0 {
				r.PrefixBlocks = nil
			}
			if err := w.Write(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Endpoint, cfg.Trace, cfg.Quiet = u.String(), path, true
		cfg.Sessions, cfg.History = tc.sessions, tc.history
		cfg.Output = filepath.Join(t.TempDir(), "r.parquet")
		sess, err := Prepare(context.Background(), cfg, Env{ToolVersion: "test"})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		m := sess.Options.Meta
		sess.Close()
		switch {
		case tc.want < 0 && (m.PrefixReusableShare != nil || m.PrefixReusableRule != ""):
			t.Errorf("%s: share %v rule %q, want none", tc.name, *m.PrefixReusableShare, m.PrefixReusableRule)
		case tc.want >= 0 && (m.PrefixReusableShare == nil || math.Abs(*m.PrefixReusableShare-tc.want) > 1e-12 || m.PrefixReusableRule != tc.rule):
			t.Errorf("%s: share %v rule %q, want %v %q", tc.name, m.PrefixReusableShare, m.PrefixReusableRule, tc.want, tc.rule)
		}
	}
}
