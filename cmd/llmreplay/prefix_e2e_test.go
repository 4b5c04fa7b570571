package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/trace"
)

// prefixTrace: 64 requests 50 ms apart, without sessions, with prefix blocks of 40 tokens
// (not a multiple of the simulated engine's 16): request i uses the first 1 + i%5 blocks of
// one of 4 chains (the block ids of chain g are g·100 + j, so equal leading ids are equal
// prefixes), then a tail of its own, 7 to 36 tokens.
func prefixTrace() []trace.Request {
	const n, bt = 64, 40
	reqs := make([]trace.Request, n)
	for i := range reqs {
		g, m := int64(i%4), 1+i%5
		blocks := make([]int64, m)
		for j := range blocks {
			blocks[j] = g*100 + int64(j)
		}
		reqs[i] = trace.Request{ID: int64(i), Arrival: time.Duration(i) * 50 * time.Millisecond,
			PromptTokens: int32(m*bt + 7 + (i*11)%30), OutputTokens: 4, PrefixBlocks: blocks}
	}
	return reqs
}

// simCachedRate is the hit rate the simulated engine's prefix cache gives reqs when it is
// ample (docs/sim.md, "Automatic prefix caching"): a request shares with the earlier ones its
// s leading blocks they had, s·blockTokens tokens (the builder shares exactly that much,
// docs/prompts.md), and the engine serves the 16-token blocks wholly inside that, never the
// one holding the prompt's last token: 16·floor(min(s·bt, prompt-1)/16).
func simCachedRate(reqs []trace.Request, bt int) float64 {
	seen := map[int64]bool{}
	var cached, prompt int64
	for _, r := range reqs {
		s := 0
		for s < len(r.PrefixBlocks) && seen[r.PrefixBlocks[s]] {
			s++
		}
		for _, b := range r.PrefixBlocks {
			seen[b] = true
		}
		cached += 16 * (min(int64(s*bt), int64(r.PromptTokens)-1) / 16)
		prompt += int64(r.PromptTokens)
	}
	return float64(cached) / float64(prompt)
}

// TestE2EPrefixHitRate replays a trace of known reuse against the in-process simulated
// engine (tiny, its cache ample: 65,536 tokens for at most 4 chains of 200 tokens and a
// request at a time) and compares the hit rate analyze measures from the engine's
// cached_tokens with the one the engine's rule implies (within 2 percentage points), and
// the best rate it reports with the trace's (exactly).
func TestE2EPrefixHitRate(t *testing.T) {
	if os.Getenv("LLMREPLAY_E2E") == "" {
		t.Skip("real-time end-to-end test: set LLMREPLAY_E2E=1 (scripts/test does)")
	}
	const bt = 40
	reqs := prefixTrace()
	dir := t.TempDir()
	tr, res := filepath.Join(dir, "trace.parquet"), filepath.Join(dir, "results.parquet")
	w, err := trace.Create(tr, trace.Meta{Source: "test", BlockTokens: bt})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	ctx := context.Background()
	if err := run(ctx, []string{"replay", "--trace", tr, "--quiet", "-o", res, "--sim-profile", "tiny"}, &out, &errb); err != nil {
		t.Fatalf("replay: %v\n%s", err, errb.String())
	}
	out.Reset()
	if err := run(ctx, []string{"analyze", res, "--json"}, &out, &errb); err != nil {
		t.Fatalf("analyze: %v\n%s", err, errb.String())
	}
	var rep struct {
		Requests struct {
			Total, OK int64
		} `json:"requests"`
		Conversations *struct {
			PrefixCache struct {
				Requests int64    `json:"requests"`
				HitRate  *float64 `json:"hit_rate"`
				BestRate *float64 `json:"best_rate"`
			} `json:"prefix_cache"`
			Sessions json.RawMessage `json:"sessions"`
		} `json:"conversations"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("analyze --json: %v\n%s", err, out.String())
	}
	if rep.Requests.OK != int64(len(reqs)) || rep.Conversations == nil {
		t.Fatalf("requests %+v, conversations %v:\n%s", rep.Requests, rep.Conversations, out.String())
	}
	pc := rep.Conversations.PrefixCache
	if pc.Requests != int64(len(reqs)) || pc.HitRate == nil || pc.BestRate == nil {
		t.Fatalf("prefix_cache %+v: every ok request should carry cached_tokens", pc)
	}
	want := simCachedRate(reqs, bt)
	best, _, err := replay.ReusableShare(trace.NewSliceSource(reqs), bt, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("hit rate measured %.4f, the engine's rule %.4f, best the trace allows %.4f", *pc.HitRate, want, *pc.BestRate)
	if math.Abs(*pc.HitRate-want) > 0.02 {
		t.Errorf("hit rate %.4f, the engine's rule gives %.4f: more than 2 points apart", *pc.HitRate, want)
	}
	if *pc.BestRate != best || *pc.HitRate > best {
		t.Errorf("best rate %.6f, want the trace's %.6f, and at least the measured %.4f", *pc.BestRate, best, *pc.HitRate)
	}
	if string(rep.Conversations.Sessions) != "null" {
		t.Errorf("a trace without sessions has session waits: %s", rep.Conversations.Sessions)
	}
}
