package analysis

import (
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"

	"bufio"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
)

func f3(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.3f", v)
}

func f2(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", v)
}

func yesno(b bool) string {
	if b {
		return "YES"
	}
	return "no"
}

// WriteText writes the human-readable report: what `llmreplay analyze` prints and what
// `replay` prints at the end of a run.
func (r *Report) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := func(format string, a ...any) { fmt.Fprintf(bw, format, a...) }
	names := make([]string, len(r.Files))
	for i, f := range r.Files {
		names[i] = filepath.Base(f)
	}
	p("llmreplay analysis of %s\n", strings.Join(names, ", "))
	if len(r.Runs) > 0 {
		m := r.Runs[0]
		mode := m.Mode
		switch {
		case m.Concurrency > 0:
			mode += fmt.Sprintf(", concurrency %d", m.Concurrency)
		case m.Rate > 0:
			mode += fmt.Sprintf(", rate %g req/s", m.Rate)
		case m.Speedup > 0:
			mode += fmt.Sprintf(", speedup %gx", m.Speedup)
		}
		target := m.Endpoint
		if m.Simulated {
			target = "simulated engine"
			if m.SimProfile != "" {
				target += " (" + m.SimProfile + ")"
			}
		}
		shards := len(r.Runs)
		if r.Repeats != nil {
			shards /= len(r.Repeats.Index) // each repeat's shards
		}
		p("run %s: %s %s %s, model %s, trace %s, %s, %d shard(s) of %d\n",
			orDash(m.RunID), orDash(m.Backend), orDash(m.API), target, orDash(m.Model), orDash(m.TraceFile), orDash(mode), shards, m.ShardCount)
	}
	if r.Mixed {
		p("MIXED: files of different runs pooled on absolute time\n")
	}
	if a := r.promptOffAlert(); a != "" {
		p("%s\n", a)
	}
	if r.Repeats != nil {
		r.Repeats.writeText(bw)
	}
	r.writeTextFigures(p)
	r.writeTextClosed(p)
	r.writeTextConversations(p)
	r.writeTextAgents(p)
	if s := r.Server; s != nil {
		s.writeText(p)
	}
	r.writeTextTokensFlags(p)
	r.writeTextBuckets(p)
	return bw.Flush()
}

// writeTextFigures writes the requests, throughput, goodput, latency and per-user sections.
func (r *Report) writeTextFigures(p func(string, ...any)) {
	q := r.Requests
	p("\nRequests: %d total, %d ok, %d failed, %d dropped, %d canceled\n", q.Total, q.OK, q.Failed, q.Dropped, q.Canceled)
	if q.Failed > 0 {
		var parts []string
		for _, s := range decode.Statuses[1:5] {
			if n := q.ByStatus[string(s)]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", s, n))
			}
		}
		p("  failed: %s\n", strings.Join(parts, ", "))
	}
	t := r.Throughput
	if r.Repeats != nil {
		p("\nThroughput (pooled over %d repeats: ok requests over their first-sent-to-last-end durations, %s s in all)\n", len(r.Repeats.Index), f3(t.DurationS))
	} else {
		p("\nThroughput (overall: ok requests over %s s, first sent %s s to last end %s s)\n", f3(t.DurationS), f3(t.FirstSentS), f3(t.LastEndS))
	}
	r.writeSection(p, "throughput")
	if g := r.Goodput; g != nil {
		p("\nGoodput (SLO %s; attainment over %d non-canceled requests)\n", g.SLO, q.Total-q.Canceled)
		r.writeSection(p, "goodput")
	}
	if r.Images != nil {
		p("\nImages (ok requests)\n")
		r.writeSection(p, "images")
	}
	p("\nLatency, ms (%s)\n", PercentileMethod)
	p("  %-22s %9s %10s %10s %10s %10s %10s %10s %10s\n", "", "n", "mean", "p50", "p90", "p95", "p99", "p99.9", "max")
	for _, f := range sectionFigures(r, "latency") {
		if q := f.Dist(r); q.N > 0 || !f.OnlyIfSampled {
			latencyRow(p, f.Text, q)
		}
	}
	r.writeTextReasoning(p)
	if r.Unary != nil { // no output: no decode speed
		return
	}

	u := r.PerUser
	p("\nPer-user speed, tok/s (ok requests with output_tokens > 1; slow tail p10, p1, min)\n")
	p("  %-30s %9s %10s %10s %10s %10s %10s\n", "", "n", "mean", "p50", "p10", "p1", "min")
	for _, m := range []struct {
		name string
		s    Speeds
	}{{"output tokens / (E2E - TTFT)", u.TokensPerS}, {"1 / TPOT", u.InvTPOT}} {
		if m.s.N == 0 {
			p("  %-30s %9d %10s\n", m.name, 0, "-")
			continue
		}
		p("  %-30s %9d %10s %10s %10s %10s %10s\n", m.name, m.s.N, f2(m.s.Mean), f2(m.s.P50), f2(m.s.P10), f2(m.s.P1), f2(m.s.Min))
	}
}

// latencyRow writes one row of a latency table, ms.
func latencyRow(p func(string, ...any), name string, x stats.Quantiles) { latencyRowW(p, 22, name, x) }

// latencyRowW is latencyRow with its name in w characters.
func latencyRowW(p func(string, ...any), w int, name string, x stats.Quantiles) {
	if x.N == 0 {
		p("  %-*s %9d %10s\n", w, name, 0, "-")
		return
	}
	p("  %-*s %9d %10s %10s %10s %10s %10s %10s %10s\n", w, name, x.N, f3(x.Mean), f3(x.P50), f3(x.P90), f3(x.P95), f3(x.P99), f3(x.P999), f3(x.Max))
}

// writeTextClosed writes a closed-loop run's section.
func (r *Report) writeTextClosed(p func(string, ...any)) {
	t, u := r.Throughput, r.PerUser
	if c := r.Closed; c != nil {
		p("\nClosed loop: concurrency %d, ramp-up %s s\n", c.Concurrency, f3(c.RampUpS))
		p("  %-30s %s req/s; output %s tok/s overall, %s sustained; per user %s tok/s mean, %s p50 (1/TPOT %s mean, %s p50)\n",
			fmt.Sprintf("at concurrency %d:", c.Concurrency), f3(t.RequestsPerS), f2(t.OutputTokensPerS), f2(t.SustainedOutputTokensPerS),
			f2(u.TokensPerS.Mean), f2(u.TokensPerS.P50), f2(u.InvTPOT.Mean), f2(u.InvTPOT.P50))
		p("  %-30s %d requests (scheduled by the last worker's start, %s s), last sent at %s ms\n", "first wave:",
			c.FirstWaveRequests, f3(float64(results.LastWorkerStart(c.Concurrency, time.Duration(math.Round(c.RampUpS*1e9))))/1e9), f1(c.FirstWaveSendS*1e3))
		p("  %-22s %9s %10s %10s %10s %10s %10s %10s %10s\n", "schedule lateness, ms", "n", "mean", "p50", "p90", "p95", "p99", "p99.9", "max")
		latencyRow(p, "first wave", c.FirstWaveLateness)
		latencyRow(p, "steady state", c.SteadyLateness)
	}
}

// writeTextConversations writes the prefix cache, turn overlap and session waits.
func (r *Report) writeTextConversations(p func(string, ...any)) {
	if c := r.Conversations; c != nil {
		pc := c.PrefixCache
		p("\nConversations\n")
		best := "unknown (the trace has no prefix blocks)"
		if !math.IsNaN(pc.BestRate) {
			best = pct(100*pc.BestRate) + " (" + bestRuleText(pc.BestRule) + ")"
		}
		if pc.Requests == 0 {
			p("  prefix cache: the server did not say (no usage.prompt_tokens_details.cached_tokens); the replay allows %s\n", best)
		} else {
			p("  prefix cache: the server reused %s of the prompt tokens (%d of %d over %d ok requests); the replay allows %s\n",
				pct(100*pc.HitRate), pc.CachedTokens, pc.PromptTokens, pc.Requests, best)
			if pc.AboveBest() {
				p("  (ABOVE the best the replay allows: the server had these prompts cached before the run, or this is a bug)\n")
			}
			for _, bd := range []struct {
				title string
				bs    []CacheBucket
			}{{"by turn", pc.ByTurn}, {"by prompt tokens", pc.ByPrompt}} {
				if len(bd.bs) == 0 {
					continue
				}
				p("  %-18s %8s %12s %12s %10s\n", bd.title, "n", "cached", "prompt", "hit rate")
				for _, b := range bd.bs {
					label := Bucket{Lo: b.Lo, Hi: b.Hi}.Label()
					if bd.title == "by turn" {
						label = fmt.Sprintf("turn %d", b.Lo)
						if b.Hi == 0 {
							label = fmt.Sprintf("turn >= %d", b.Lo)
						}
					}
					p("  %-18s %8d %12d %12d %10s\n", label, b.Requests, b.CachedTokens, b.PromptTokens, pct(100*b.HitRate))
				}
			}
		}
		if o := c.Overlap; o != nil {
			p("  turn overlap: %d of %d later turns (%s) were sent before their predecessor's answer ended\n", o.Overlapped, o.Turns, pct(100*o.Share))
		}
		if w := c.Sessions; w != nil {
			p50, p99 := "-", "-"
			if w.Wait.N > 0 {
				p50, p99 = f3(w.Wait.P50), f3(w.Wait.P99)
			}
			p("  session waits: %d of %d later turns (%s) waited for their predecessor; wait p50 %s ms, p99 %s ms; %d waited over %v\n",
				w.Waited, w.Turns, pct(100*w.WaitedShare), p50, p99, w.OverBound, w.Bound)
		}
	}
}

// writeTextTokensFlags writes the token reconciliation and the run-level verdicts.
func (r *Report) writeTextTokensFlags(p func(string, ...any)) {
	k := r.Tokens
	if r.Unary != nil {
		r.writeTextUnaryTokens(p)
	} else {
		p("\nTokens (ok requests)\n")
		p("  output: target %d, reported %d (usage: %d requests, client tokenizer: %d, none: %d); %d shorter, %d longer than target\n",
			k.OutputTarget, k.Output, k.OutputUsage, k.OutputTokenizer, k.OutputUnknown, k.Shorter, k.Longer)
		p("  chunks: %d", k.Chunks)
		if k.WithChunkTokens > 0 {
			p("; chunk_tokens on %d requests sum to %d (%d disagree with output_tokens)", k.WithChunkTokens, k.ChunkTokens, k.ChunkTokensMismatch)
		}
		p("\n")
	}
	if k.PromptWithServerCount > 0 {
		p("  prompt: target %d, server %d over %d requests (%d differ)\n", k.PromptTarget, k.PromptServer, k.PromptWithServerCount, k.PromptMismatch)
	}

	f := r.Flags
	p("\nFlags\n")
	if c := r.Closed; c != nil {
		p99 := math.NaN()
		if c.SteadyLateness.N > 0 {
			p99 = c.SteadyLateness.P99
		}
		p("  client-limited: %s (%s; its schedule lateness p99 %s ms, bound %v)\n", yesno(f.ClientLimited), r.basis(), f3(p99), f.MaxLateness)
	} else {
		p("  client-limited: %s (schedule lateness p99 %s ms, bound %v)\n", yesno(f.ClientLimited), f3(r.Lateness.P99), f.MaxLateness)
	}
	if f.InflightTrend.Points == 0 {
		p("  overloaded: not tested (window too short)\n")
	} else {
		p("  overloaded: %s (in-flight slope %+.3f/s t=%.2f; %s p50 slope %+.3f ms/s t=%.2f; HAC t > %g and rise > %g%% of mean for both)\n",
			yesno(f.Overloaded), f.InflightTrend.Slope, f.InflightTrend.T, r.firstName(), f.TTFTTrend.Slope, f.TTFTTrend.T, trendT, trendRise*100)
	}

	if b := r.Buffered; b.Streams == 0 {
		p("  stream buffered: not tested (no ok stream of %d or more chunks)\n", BufferedMinChunks)
	} else {
		p("  stream buffered: %s (%d of %d streams arrived %g or more chunks per read, %s ms or more apart (the larger of %v and the lateness p99), bound %s; %s chunks per read, %s of gaps 0, the others %s ms on average)\n",
			yesno(b.Flagged), b.Bursty, b.Streams, BufferedChunksPerRead, f3(b.GapBoundMS), BufferedGap, pct(100*BufferedShare), f3(b.ChunksPerRead), pct(100*b.ZeroGapShare), f3(b.OtherGapMeanMS))
	}
	p("  prompt tokens off target: %s\n", r.promptOffLine())
	if c := r.Conversations; c != nil && c.Sessions != nil {
		w := c.Sessions
		p("  reshaped by the server: %s (%d of %d later turns waited for their predecessor over %v; bound %s)\n",
			yesno(w.Reshaped), w.OverBound, w.Turns, w.Bound, pct(100*ReshapedShare))
	}
}

// writeTextBuckets writes the breakdowns by length and the warnings.
func (r *Report) writeTextBuckets(p func(string, ...any)) {
	for _, bd := range []struct {
		title string
		bs    []Bucket
	}{{"prompt tokens", r.ByPrompt}, {"output tokens (target)", r.ByOutput}} {
		if len(bd.bs) == 0 {
			continue
		}
		p("\nBy %s, ms\n", bd.title)
		cell := func(x stats.Quantiles, v float64) string {
			if x.N == 0 {
				return "-"
			}
			return f3(v)
		}
		if r.Unary != nil { // latency alone: no first token, no output
			p("  %-18s %8s %8s %10s %10s %10s %10s\n", "bucket", "n", "ok", "lat. p50", "lat. p90", "lat. p99", "SLO att.")
			for _, b := range bd.bs {
				p("  %-18s %8d %8d %10s %10s %10s %10s\n", b.Label(), b.Requests, b.OK, cell(b.E2E, b.E2E.P50), cell(b.E2E, b.E2E.P90), cell(b.E2E, b.E2E.P99), pct(b.Attainment))
			}
			continue
		}
		p("  %-18s %8s %8s %10s %10s %10s %10s %10s %10s\n", "bucket", "n", "ok", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "E2E p99", "SLO att.")
		for _, b := range bd.bs {
			p("  %-18s %8d %8d %10s %10s %10s %10s %10s %10s\n", b.Label(), b.Requests, b.OK,
				cell(b.TTFT, b.TTFT.P50), cell(b.TTFT, b.TTFT.P99), cell(b.TPOT, b.TPOT.P50), cell(b.TPOT, b.TPOT.P99), cell(b.E2E, b.E2E.P99), pct(b.Attainment))
		}
	}
	if len(r.Warnings) > 0 {
		p("\nWarnings\n")
		for _, w := range r.Warnings {
			p("  - %s\n", w)
		}
	}
}

// writeSection writes the lines of a text section's scalar figures (figures.go).
func (r *Report) writeSection(p func(string, ...any), section string) {
	for _, f := range sectionFigures(r, section) {
		if f.Dist != nil {
			continue // a distribution's row is in its section's table
		}
		p("  %-30s %12s", f.Text, f.Format(f.float(r)))
		if f.Note != nil {
			p("   %s", f.Note(r))
		}
		p("\n")
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// bestRuleText says how the best prefix-cache hit rate was computed (PrefixCache.BestRule).
func bestRuleText(rule string) string {
	switch rule {
	case results.ReusableHistory:
		return "actual history: later turns reuse what their predecessor sent and its planned answer, first turns the trace's prefix blocks"
	case results.ReusableAgents:
		return "agent contexts: each call reuses what it shares of its first parent's prompt and planned answer"
	}
	return "the trace's prefix blocks"
}
