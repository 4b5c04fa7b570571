// Package agent computes the agent-level figures of a replay of an agent trace (replay
// --sessions dag): per session, the makespan against the recorded makespan (the slowdown
// an agent feels), the LLM time against the gap time (tools and users); the prefix-cache
// hit rate against production's and the replay's best; TTFT by context length; live
// sessions and calls in flight over time. Package analysis declares the figures and
// renders them (analysis/figures.go); this package computes them from decode.Data, with
// the per-session values that compare resamples (the session being the independent unit).
// docs/metrics.md, "Agents", defines every figure.
package agent

import (
	"math"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
)

// ContextEdges are the upper bounds (inclusive) of the context-length buckets of TTFT, in
// prompt tokens: 8k, 32k, 64k and 128k of 1,024 tokens (context windows are counted so:
// a "128k" model takes 131,072); the last bucket, above 128k, has no bound.
var ContextEdges = []int64{8 << 10, 32 << 10, 64 << 10, 128 << 10}

// Report is the agent section of a run's report; Analyze returns nil for a run without
// agent calls. An agent call is a row with a session_id and a recorded_arrival_ns (the
// replayer writes both on every call of an agent session, and recorded_arrival_ns on no
// other row); a session is the agent calls of one results file (one shard of one run:
// sharding keeps a session on one shard) with one session_id.
type Report struct {
	Calls    int64 // agent calls
	Sessions int64
	// Complete sessions have every call ok; the others (a call failed, dropped or
	// canceled) are counted apart and left out of the makespan, slowdown and LLM-time
	// figures: their makespan would be cut short or stretched by the failure.
	Complete, Incomplete int64
	// WithFailed, WithDropped, WithCanceled count the incomplete sessions with at least
	// one call failed (http_error, timeout, transport_error, stream_error), dropped or
	// canceled (a session can be in several).
	WithFailed, WithDropped, WithCanceled int64

	// Over the complete sessions: the makespan (last end_ns − first sent_ns), s; the
	// recorded makespan (max(recorded_arrival_ns + recorded_duration_ns) −
	// min(recorded_arrival_ns)), s, over the sessions every call of which has a
	// recorded_duration_ns; the slowdown (makespan / recorded makespan) over those whose
	// recorded makespan is above 0.
	Makespan, RecordedMakespan, Slowdown stats.Quantiles
	// MakespansS and Slowdowns are the sessions' values, sorted: compare's bootstrap
	// resamples them as independent units.
	MakespansS, Slowdowns []float64

	// LLM time is the length of the union of a session's calls' [sent_ns, end_ns]; gap
	// time is makespan − LLM time (tools, users and the replayer's own waits). LLMShare =
	// Σ LLM time / Σ makespan over the complete sessions; RecordedLLMShare the same from
	// the recorded intervals [recorded_arrival_ns, + recorded_duration_ns] over the
	// complete sessions with a recorded makespan above 0. NaN when undefined.
	LLMTimeS, GapTimeS, RecordedLLMTimeS, RecordedGapTimeS float64
	LLMShare, RecordedLLMShare                             float64

	Cache Cache
	// TTFTByContext is TTFT (ms) of the ok agent calls in each context-length bucket of
	// their prompt_tokens (ContextEdges), every bucket listed.
	TTFTByContext []ContextBucket

	// Series: time-averaged live sessions and calls in flight per interval; the peaks are
	// instantaneous.
	Series       []Point
	IntervalS    float64
	PeakSessions int64
	PeakCalls    int64
	// PeakSessionsAtS and PeakCallsAtS: when each peak was first reached, s from the run
	// start; NaN without any.
	PeakSessionsAtS, PeakCallsAtS float64
}

// Cache is the prefix-cache hit rate of the agent calls against production's and the
// best the replay allows.
type Cache struct {
	// Calls: ok agent calls whose server reported prompt_tokens_cached; CachedTokens and
	// PromptTokens their sums (a call's prompt tokens are the server's count when it gave
	// one, else the target, as conversations.prefix_cache counts them); HitRate
	// CachedTokens / PromptTokens, NaN without any.
	Calls                      int64
	CachedTokens, PromptTokens int64
	HitRate                    float64
	// Recorded: agent calls (any status) with a recorded_cached_tokens, the sum of it and
	// of their prompt_tokens (the trace's length, what production was sent), and
	// RecordedShare, their ratio (NaN without any).
	RecordedCalls                              int64
	RecordedCachedTokens, RecordedPromptTokens int64
	RecordedShare                              float64
	// BestRate is the run metadata's prefix_reusable_share (NaN when absent or the files
	// disagree), as the caller gives it.
	BestRate float64
	// BySession are the sessions' (cached, prompt) sums over their calls counted in
	// HitRate, sessions without any left out: compare resamples sessions.
	BySession [][2]float64
}

// ContextBucket is the TTFT of the ok agent calls whose prompt_tokens are in (Lo, Hi]
// (Hi = 0: no upper bound).
type ContextBucket struct {
	Lo, Hi int64
	TTFT   stats.Quantiles // ms
}

// Point is one interval of the series: [StartS, StartS + interval).
type Point struct {
	StartS float64
	// LiveSessions: sessions between their first call's sent_ns and their last end_ns;
	// CallsInFlight: agent calls between sent_ns and end_ns; each time-averaged over the
	// interval.
	LiveSessions, CallsInFlight float64
}

// Analyze computes the agent section of d; nil when d has no agent call. interval is the
// series' step (the report's --interval); best is the run's prefix_reusable_share (NaN
// when none).
func Analyze(d *decode.Data, interval time.Duration, best float64) *Report {
	if d.RecArrival == nil || d.SessionID == nil {
		return nil
	}
	calls := agentCalls(d)
	if len(calls) == 0 {
		return nil
	}
	r := &Report{Calls: int64(len(calls)), Cache: Cache{BestRate: best}}
	r.sessions(d, calls)
	r.cache(d, calls)
	r.contexts(d, calls)
	r.series(d, calls, interval)
	return r
}

// call is one agent call: its row and its session's number.
type call struct {
	row     int
	session int
}

// agentCalls lists the agent calls, sorted by session (numbered in order of first
// appearance) and then by sent_ns (unsent calls first).
func agentCalls(d *decode.Data) []call {
	type key struct {
		file    int
		session int64
	}
	ids := map[key]int{}
	calls := make([]call, 0, len(d.Status))
	f := 0
	for i := range d.Status {
		for f < len(d.FileEnd)-1 && i >= d.FileEnd[f] {
			f++
		}
		if d.RecArrival[i] == decode.Null64 || d.SessionID[i] == decode.Null64 {
			continue
		}
		k := key{f, d.SessionID[i]}
		s, ok := ids[k]
		if !ok {
			s = len(ids)
			ids[k] = s
		}
		calls = append(calls, call{i, s})
	}
	slices.SortStableFunc(calls, func(a, b call) int {
		if a.session != b.session {
			return a.session - b.session
		}
		return cmpInt64(d.Sent[a.row], d.Sent[b.row])
	})
	return calls
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// groups calls fn with each session's calls.
func groups(calls []call, fn func(cs []call)) {
	for lo := 0; lo < len(calls); {
		hi := lo + 1
		for hi < len(calls) && calls[hi].session == calls[lo].session {
			hi++
		}
		fn(calls[lo:hi])
		lo = hi
	}
}

// union is the length of the union of the intervals [a, b], sorted by a.
func union(spans [][2]int64) int64 {
	var total int64
	cur := spans[0]
	for _, s := range spans[1:] {
		if s[0] > cur[1] {
			total += cur[1] - cur[0]
			cur = s
			continue
		}
		cur[1] = max(cur[1], s[1])
	}
	return total + cur[1] - cur[0]
}

// sessions computes the session counts, the makespans, slowdowns and LLM times.
func (r *Report) sessions(d *decode.Data, calls []call) {
	var recMakespans []float64
	var llm, span, recLLM, recSpan int64
	var spans, rec [][2]int64
	groups(calls, func(cs []call) {
		r.Sessions++
		var failed, dropped, canceled bool
		for _, c := range cs {
			switch d.Status[c.row] {
			case decode.StOK:
			case decode.StDropped:
				dropped = true
			case decode.StCanceled:
				canceled = true
			default:
				failed = true
			}
		}
		if failed || dropped || canceled {
			r.Incomplete++
			r.WithFailed += b2i(failed)
			r.WithDropped += b2i(dropped)
			r.WithCanceled += b2i(canceled)
			return
		}
		r.Complete++
		// Every call is ok, so each has a sent_ns and an end_ns; cs is sorted by sent_ns.
		spans, rec = spans[:0], rec[:0]
		recorded := true
		for _, c := range cs {
			spans = append(spans, [2]int64{d.Sent[c.row], d.End[c.row]})
			if d.RecDuration == nil || d.RecDuration[c.row] == decode.Null64 {
				recorded = false
			} else {
				a := d.RecArrival[c.row]
				rec = append(rec, [2]int64{a, a + d.RecDuration[c.row]})
			}
		}
		first, last := spans[0][0], spans[0][1]
		for _, s := range spans {
			last = max(last, s[1])
		}
		m := last - first
		r.MakespansS = append(r.MakespansS, float64(m)/1e9)
		llm += union(spans)
		span += m
		if !recorded {
			return
		}
		slices.SortFunc(rec, func(a, b [2]int64) int { return cmpInt64(a[0], b[0]) })
		rfirst, rlast := rec[0][0], rec[0][1]
		for _, s := range rec {
			rlast = max(rlast, s[1])
		}
		rm := rlast - rfirst
		recMakespans = append(recMakespans, float64(rm)/1e9)
		if rm > 0 {
			r.Slowdowns = append(r.Slowdowns, float64(m)/float64(rm))
			recLLM += union(rec)
			recSpan += rm
		}
	})
	r.Makespan = stats.Summarize(r.MakespansS) // sorts them, as compare wants
	r.RecordedMakespan = stats.Summarize(recMakespans)
	r.Slowdown = stats.Summarize(r.Slowdowns)
	r.LLMTimeS, r.GapTimeS = float64(llm)/1e9, float64(span-llm)/1e9
	r.RecordedLLMTimeS, r.RecordedGapTimeS = float64(recLLM)/1e9, float64(recSpan-recLLM)/1e9
	r.LLMShare, r.RecordedLLMShare = ratio(llm, span), ratio(recLLM, recSpan)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// ratio is a/b, NaN when b is 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// cache computes the hit rate, production's share and the per-session sums.
func (r *Report) cache(d *decode.Data, calls []call) {
	c := &r.Cache
	groups(calls, func(cs []call) {
		var sc, sp int64
		for _, x := range cs {
			i := x.row
			if d.RecCached != nil && d.RecCached[i] != decode.Null32 {
				c.RecordedCalls++
				c.RecordedCachedTokens += int64(d.RecCached[i])
				c.RecordedPromptTokens += int64(d.Prompt[i])
			}
			if d.Cached == nil || d.Status[i] != decode.StOK || d.Cached[i] == decode.Null32 {
				continue
			}
			p := int64(d.Prompt[i])
			if d.PromptServer[i] != decode.Null32 {
				p = int64(d.PromptServer[i])
			}
			c.Calls++
			sc += int64(d.Cached[i])
			sp += p
		}
		c.CachedTokens += sc
		c.PromptTokens += sp
		if sp > 0 {
			c.BySession = append(c.BySession, [2]float64{float64(sc), float64(sp)})
		}
	})
	c.HitRate = ratio(c.CachedTokens, c.PromptTokens)
	c.RecordedShare = ratio(c.RecordedCachedTokens, c.RecordedPromptTokens)
}

// contexts computes TTFT by context-length bucket.
func (r *Report) contexts(d *decode.Data, calls []call) {
	ttft := make([][]float64, len(ContextEdges)+1)
	for _, c := range calls {
		i := c.row
		if d.Status[i] != decode.StOK {
			continue
		}
		k, _ := slices.BinarySearch(ContextEdges, int64(d.Prompt[i])) // the first edge >= the length
		ttft[k] = append(ttft[k], d.TTFTMS(i))
	}
	for k, xs := range ttft {
		b := ContextBucket{TTFT: stats.Summarize(xs)}
		if k > 0 {
			b.Lo = ContextEdges[k-1]
		}
		if k < len(ContextEdges) {
			b.Hi = ContextEdges[k]
		}
		r.TTFTByContext = append(r.TTFTByContext, b)
	}
}
