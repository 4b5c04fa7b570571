package main

import (
	"github.com/llmreplay/llmreplay/internal/duckdbtest"

	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
)

// bailianSample writes a Qwen/Bailian JSONL sample (the fields of Alibaba's
// qwen_traceA_blksz_16: chat_id, parent_chat_id, timestamp in s, input_length,
// output_length, type, turn, hash_ids over 16-token blocks): 8 conversations of 3 turns,
// 100 ms apart in arrival, each turn's input the previous input and output plus 24 new
// tokens, its hash_ids the previous turn's extended, the first turns sharing a 2-block
// system prompt. It returns the number of rows.
func bailianSample(t *testing.T, path string) int {
	t.Helper()
	var b strings.Builder
	n := 0
	type conv struct {
		chat, input, output int
		hash                []int
	}
	convs := make([]conv, 8)
	next := 100 // next hash id
	for turn := 1; turn <= 3; turn++ {
		for c := range convs {
			cv := &convs[c]
			parent := -1
			if turn == 1 {
				cv.input, cv.hash = 32+24, []int{1, 2}
			} else {
				parent = cv.chat
				cv.input += cv.output + 24
			}
			for len(cv.hash) < cv.input/16 {
				cv.hash = append(cv.hash, next)
				next++
			}
			cv.chat, cv.output = 1000+n, 20+(c*7+turn*5)%30
			hash, _ := json.Marshal(cv.hash)
			fmt.Fprintf(&b, `{"chat_id": %d, "parent_chat_id": %d, "timestamp": %.3f, "input_length": %d, "output_length": %d, "type": "text", "turn": %d, "hash_ids": %s}`+"\n",
				cv.chat, parent, float64(n)*0.1, cv.input, cv.output, turn, hash)
			n++
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestE2EBailianSequential imports a Bailian sample, replays it in sequential mode (the
// default for a trace with sessions, with actual history) against the in-process simulated
// engine (tiny, prefix cache on), and reads the results: every row ok with its session and
// turn, a session wait on every later turn and none on first turns, cached tokens on every
// row and on later turns more than their first turn's system prompt; analyze's hit rate
// under the best the replay allows (actual-history rule) and no turn sent before its
// predecessor's end; DuckDB (when testdata/duckdb is installed) reads the same columns.
func TestE2EBailianSequential(t *testing.T) {
	if os.Getenv("LLMREPLAY_E2E") == "" {
		t.Skip("real-time end-to-end test: set LLMREPLAY_E2E=1 (scripts/test does)")
	}
	dir := t.TempDir()
	in, tr, res := filepath.Join(dir, "bailian.jsonl"), filepath.Join(dir, "t.parquet"), filepath.Join(dir, "r.parquet")
	n := bailianSample(t, in)
	ctx := context.Background()
	var out, errb bytes.Buffer
	if err := run(ctx, []string{"trace", "import", "--from", "bailian", in, "-o", tr}, &out, &errb); err != nil {
		t.Fatalf("trace import: %v\n%s", err, errb.String())
	}
	if err := run(ctx, []string{"replay", "--trace", tr, "--sim-profile", "tiny", "--quiet", "-o", res}, &out, &errb); err != nil {
		t.Fatalf("replay: %v\n%s", err, errb.String())
	}
	rows, meta, err := results.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != n || meta.Flags["sessions"] != replay.SessionsSequential || meta.Flags["history"] != replay.HistoryActual ||
		meta.PrefixReusableRule != results.ReusableHistory {
		t.Fatalf("%d rows (want %d), flags %v, rule %q", len(rows), n, meta.Flags, meta.PrefixReusableRule)
	}
	var sessions = map[int64]int{}
	var waits, cachedLater int64
	for _, r := range rows {
		if r.Status != results.StatusOK || r.SessionID == results.Null || r.Turn == results.Null || r.PromptTokensCached == results.Null {
			t.Fatalf("request %d: status %s, session %d, turn %d, cached %d", r.RequestID, r.Status, r.SessionID, r.Turn, r.PromptTokensCached)
		}
		sessions[r.SessionID]++
		if (r.Turn == 0) != (r.SessionWaitNS == results.Null) {
			t.Errorf("request %d turn %d: session_wait_ns %d: want null exactly on first turns", r.RequestID, r.Turn, r.SessionWaitNS)
		}
		if r.Turn > 0 {
			waits++
			if r.PromptTokensCached <= 32 {
				t.Errorf("request %d turn %d: %d cached tokens: its history was not reused", r.RequestID, r.Turn, r.PromptTokensCached)
			}
			cachedLater += int64(r.PromptTokensCached)
		}
	}
	if len(sessions) != 8 {
		t.Errorf("sessions %v, want 8 of 3 turns", sessions)
	}
	for id, k := range sessions {
		if k != 3 {
			t.Errorf("session %d: %d turns, want 3", id, k)
		}
	}

	out.Reset()
	if err := run(ctx, []string{"analyze", res, "--json"}, &out, &errb); err != nil {
		t.Fatalf("analyze: %v\n%s", err, errb.String())
	}
	var rep struct {
		Conversations *struct {
			PrefixCache struct {
				HitRate  *float64 `json:"hit_rate"`
				BestRate *float64 `json:"best_rate"`
				BestRule *string  `json:"best_rate_rule"`
			} `json:"prefix_cache"`
			Overlap *struct {
				Turns      int64 `json:"turns"`
				Overlapped int64 `json:"overlapped"`
			} `json:"turn_overlap"`
		} `json:"conversations"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	c := rep.Conversations
	if c == nil || c.PrefixCache.HitRate == nil || c.PrefixCache.BestRate == nil || c.PrefixCache.BestRule == nil || c.Overlap == nil {
		t.Fatalf("analyze: conversations %+v", c)
	}
	t.Logf("hit rate %.4f, best %.4f (%s); %d later turns, %d overlapped", *c.PrefixCache.HitRate, *c.PrefixCache.BestRate, *c.PrefixCache.BestRule, c.Overlap.Turns, c.Overlap.Overlapped)
	if *c.PrefixCache.HitRate > *c.PrefixCache.BestRate || *c.PrefixCache.BestRule != results.ReusableHistory {
		t.Errorf("hit rate %.4f above the best %.4f, or rule %q", *c.PrefixCache.HitRate, *c.PrefixCache.BestRate, *c.PrefixCache.BestRule)
	}
	if c.Overlap.Turns != waits || c.Overlap.Overlapped != 0 {
		t.Errorf("turn_overlap %+v, want 0 of %d", *c.Overlap, waits)
	}

	if db := duckdbtest.Rows(t, fmt.Sprintf(`SELECT count(DISTINCT session_id)::INT AS sessions, max(turn)::INT AS max_turn,
		count(session_wait_ns)::INT AS waits, count(prompt_tokens_cached)::INT AS cached,
		sum(prompt_tokens_cached) FILTER (turn > 0)::INT AS cached_later,
		typeof(any_value(session_id)) AS session_type, typeof(any_value(turn)) AS turn_type,
		typeof(any_value(session_wait_ns)) AS wait_type, typeof(any_value(prompt_tokens_cached)) AS cached_type
		FROM read_parquet('%s')`, res)); db != nil {
		want := map[string]any{"sessions": 8.0, "max_turn": 2.0, "waits": float64(waits), "cached": float64(n), "cached_later": float64(cachedLater),
			"session_type": "BIGINT", "turn_type": "INTEGER", "wait_type": "BIGINT", "cached_type": "INTEGER"}
		for k, v := range want {
			if db[0][k] != v {
				t.Errorf("DuckDB %s = %v, want %v", k, db[0][k], v)
			}
		}
	}
}
