// Package conversation computes the conversations section of a run's report: the
// prefix-cache hit rate (overall, by turn, by prompt length) against the best the replay
// allows, how a sequential-session replay's turns waited for their predecessors (the
// reshaped-by-the-server decision), and the later turns sent before their predecessor's
// answer ended. Package analysis renders it (Report.Conversations is this package's
// Report); this package computes it from decode.Data. docs/metrics.md, "Conversations",
// defines every figure.
package conversation

import (
	"math"
	"sort"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// ReshapedShare is the bound of the "reshaped by the server" flag: the run is marked when
// more than this share of the turns that followed a predecessor (session_wait_ns not null)
// waited for it longer than the run's schedule-lateness bound (analysis's
// Flags.MaxLateness, default 10 ms). Equivalently, session_wait_ns p90 above the bound: the same tolerance as
// client-limited, at the tenth of the turns instead of the hundredth, because a wait is the
// server's answer time and a run at the knee makes some turns wait by design; when a tenth
// of the conversation is sent off its trace time by more than the replayer would accept
// of itself, the load the server received is no longer the trace's (docs/metrics.md).
const ReshapedShare = 0.10

// maxTurnBucket is the last turn index reported on its own; later turns pool in ">= 8".
const maxTurnBucket = 8

// Report is what a run with sessions, cached-token counts or a trace with prefix blocks
// adds to its report (Analyze returns nil otherwise).
type Report struct {
	PrefixCache PrefixCache
	// Sessions is nil when no row has a session_wait_ns (no sequential sessions).
	Sessions *SessionWaits
	// Overlap is nil when no row has both a session_id and a turn.
	Overlap *TurnOverlap
}

// TurnOverlap counts the later turns sent before their predecessor's answer ended: traffic
// no user makes, which independent mode sends whenever the server answers more slowly than
// the trace's gaps (sequential mode never does). A later turn's predecessor is the row of
// the same results file (one run's shard: sharding keeps a session on one shard), session_id
// and turn − 1.
type TurnOverlap struct {
	// Turns counts the rows with turn ≥ 1 and a sent_ns whose predecessor has an end_ns
	// (a predecessor without output has no end to compare with).
	Turns int64
	// Overlapped counts those sent before their predecessor's end_ns; Share is
	// Overlapped / Turns (NaN when Turns is 0).
	Overlapped int64
	Share      float64
}

// PrefixCache is the prefix-cache hit rate over ok requests whose server reported
// prompt_tokens_cached: cached tokens over their prompt tokens (the server's count when it
// gave one, else the target).
type PrefixCache struct {
	CacheBucket
	// BestRate is the run metadata's prefix_reusable_share: the best rate the replayed rows
	// allow with an infinite cache; NaN when the trace has no prefix blocks or the shards
	// pooled disagree.
	BestRate float64
	// BestRule is how BestRate was computed: the run metadata's prefix_reusable_rule
	// (results.ReusableBlocks or results.ReusableHistory; a file with the share and no rule
	// is ReusableBlocks); "" when BestRate is NaN.
	BestRule string
	ByTurn   []CacheBucket // Lo = Hi-1 = the turn index; the last, Hi = 0, pools the later turns
	ByPrompt []CacheBucket // the prompt-length buckets of the report's breakdown (Analyze's promptBuckets)
}

// AboveBest reports whether the measured rate passes the best rate by more than half a
// point. The best rate bounds what the replay sent, so this should never happen: either a
// bug, or a server whose cache held these prompts before the run (a rerun against the
// same server, a cache shared between replicas).
func (pc PrefixCache) AboveBest() bool {
	return pc.Requests > 0 && !math.IsNaN(pc.BestRate) && pc.HitRate > pc.BestRate+0.005
}

// CacheBucket is the hit rate of the requests in [Lo, Hi) (Hi = 0: no upper bound).
type CacheBucket struct {
	Lo, Hi       int64
	Requests     int64 // ok requests whose server reported cached tokens
	CachedTokens int64
	PromptTokens int64
	HitRate      float64 // CachedTokens / PromptTokens; NaN when PromptTokens is 0
}

// SessionWaits is how the server reshaped a sequential-session replay: the turns that
// waited for their predecessor's end beyond their trace time.
type SessionWaits struct {
	Turns       int64           // rows with session_wait_ns (turns after the first, sequential mode)
	Waited      int64           // of them, session_wait_ns > 0
	WaitedShare float64         // Waited / Turns
	Wait        stats.Quantiles // ms, over the turns that waited
	// OverBound counts turns that waited longer than Bound (Analyze's bound); Reshaped is
	// OverBound / Turns > ReshapedShare.
	OverBound int64
	Bound     time.Duration
	Reshaped  bool
}

func (b *CacheBucket) add(cached, prompt int64) {
	b.Requests++
	b.CachedTokens += cached
	b.PromptTokens += prompt
}

func (b *CacheBucket) finish() {
	b.HitRate = math.NaN()
	if b.PromptTokens > 0 {
		b.HitRate = float64(b.CachedTokens) / float64(b.PromptTokens)
	}
}

// BestRate is the runs' prefix_reusable_share and its rule when every run carries the
// same ones (NaN and "" otherwise).
func BestRate(d *decode.Data) (float64, string) {
	best, rule := math.NaN(), ""
	for i, m := range d.Runs {
		if m.PrefixReusableShare == nil {
			return math.NaN(), ""
		}
		r := m.PrefixReusableRule
		if r == "" {
			r = results.ReusableBlocks
		}
		if i > 0 && (*m.PrefixReusableShare != best || r != rule) {
			return math.NaN(), ""
		}
		best, rule = *m.PrefixReusableShare, r
	}
	return best, rule
}

// Analyze computes the conversations section of d, nil for a run without sessions,
// cached-token counts or prefix blocks. promptBuckets are the [Lo, Hi) bounds (Hi = 0: no
// upper bound) of the report's prompt-length breakdown, which the prefix cache is broken
// down by too; bound is the run's schedule-lateness bound (analysis's Flags.MaxLateness),
// which a turn's wait is held to.
func Analyze(d *decode.Data, promptBuckets [][2]int64, bound time.Duration) *Report {
	best, rule := BestRate(d)
	if d.Cached == nil && d.SessionWait == nil && d.Turn == nil && d.SessionID == nil && math.IsNaN(best) {
		return nil
	}
	c := &Report{}
	pc := &c.PrefixCache
	pc.BestRate, pc.BestRule = best, rule
	edges := make([]int64, 0, len(promptBuckets))
	for _, b := range promptBuckets {
		pc.ByPrompt = append(pc.ByPrompt, CacheBucket{Lo: b[0], Hi: b[1]})
		if b[1] != 0 {
			edges = append(edges, b[1])
		}
	}
	var byTurn [maxTurnBucket + 1]CacheBucket
	if d.Cached != nil {
		for i, s := range d.Status {
			if s != decode.StOK || d.Cached[i] == decode.Null32 {
				continue
			}
			prompt := int64(d.Prompt[i])
			if d.PromptServer[i] != decode.Null32 {
				prompt = int64(d.PromptServer[i])
			}
			cached := int64(d.Cached[i])
			pc.add(cached, prompt)
			if len(pc.ByPrompt) > 0 {
				k := sort.Search(len(edges), func(k int) bool { return edges[k] > int64(d.Prompt[i]) })
				pc.ByPrompt[k].add(cached, prompt)
			}
			if d.Turn != nil && d.Turn[i] != decode.Null32 {
				byTurn[min(int(d.Turn[i]), maxTurnBucket)].add(cached, prompt)
			}
		}
	}
	pc.finish()
	for k := range pc.ByPrompt {
		pc.ByPrompt[k].finish()
	}
	for k := range byTurn {
		b := byTurn[k]
		if b.Requests == 0 {
			continue
		}
		b.Lo, b.Hi = int64(k), int64(k+1)
		if k == maxTurnBucket {
			b.Hi = 0
		}
		b.finish()
		pc.ByTurn = append(pc.ByTurn, b)
	}

	if d.SessionWait != nil {
		w := &SessionWaits{Bound: bound}
		var waits []float64
		for _, v := range d.SessionWait {
			if v == decode.Null64 {
				continue
			}
			w.Turns++
			if v > 0 {
				w.Waited++
				waits = append(waits, float64(v)/1e6)
			}
			if v > int64(w.Bound) {
				w.OverBound++
			}
		}
		if w.Turns > 0 {
			w.WaitedShare = float64(w.Waited) / float64(w.Turns)
			w.Reshaped = float64(w.OverBound)/float64(w.Turns) > ReshapedShare
			w.Wait = stats.Summarize(waits)
			c.Sessions = w
		}
	}
	c.Overlap = turnOverlap(d)
	return c
}

// turnOverlap computes Report.Overlap. Memory: one map entry (about 40 bytes) per
// row with a session, a turn and an end_ns.
func turnOverlap(d *decode.Data) *TurnOverlap {
	if d.SessionID == nil || d.Turn == nil {
		return nil
	}
	type key struct {
		file    int // a session's rows are in one file: sharding keeps a session on one shard
		session int64
		turn    int32
	}
	runOf := func(i int, f *int) int {
		for *f < len(d.FileEnd)-1 && i >= d.FileEnd[*f] {
			*f++
		}
		return *f
	}
	ends := map[key]int64{}
	f := 0
	for i := range d.SessionID {
		if d.SessionID[i] != decode.Null64 && d.Turn[i] != decode.Null32 && d.End[i] != decode.Null64 {
			ends[key{runOf(i, &f), d.SessionID[i], d.Turn[i]}] = d.End[i]
		}
	}
	o := &TurnOverlap{Share: math.NaN()}
	f = 0
	for i := range d.SessionID {
		if d.SessionID[i] == decode.Null64 || d.Turn[i] == decode.Null32 || d.Turn[i] < 1 || d.Sent[i] == decode.Null64 {
			continue
		}
		end, ok := ends[key{runOf(i, &f), d.SessionID[i], d.Turn[i] - 1}]
		if !ok {
			continue
		}
		o.Turns++
		if d.Sent[i] < end {
			o.Overlapped++
		}
	}
	if o.Turns > 0 {
		o.Share = float64(o.Overlapped) / float64(o.Turns)
	}
	return o
}
