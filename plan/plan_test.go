package plan

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/stats"
	"github.com/llmreplay/llmreplay/sweep"
)

// fixedStep is an engine whose every step takes step, whatever it holds, and whose batch
// holds at most batch sequences: it emits batch tokens per step once full, so a trace of
// requests of out output tokens saturates it at batch/(step·out) requests/s, exactly.
func fixedStep(t *testing.T, step time.Duration, batch int) sim.Config {
	t.Helper()
	p, err := sim.BuiltinProfile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	c := p.Config
	c.StepBase, c.PrefillPerToken, c.DecodePerSeq, c.ContextPerToken, c.AttentionPerPairNs = step, 0, 0, 0, 0
	c.PrefixCache, c.MaxBatch, c.KVCacheTokens, c.MaxBatchedTokens = false, batch, 1<<20, 1<<16
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// evenTrace is n requests 1 s apart: a mean rate of exactly 1 request/s, so speedup s
// offers s requests/s.
func evenTrace(n, prompt, out int) Trace {
	tr := Trace{Name: "even"}
	for i := range n {
		tr.Reqs = append(tr.Reqs, sim.SimRequest{Arrival: time.Duration(i) * time.Second, Prompt: prompt, Output: out})
	}
	return tr
}

func TestKneeOfFixedStepEngine(t *testing.T) {
	const step, batch, out = 10 * time.Millisecond, 8, 50
	capacity := float64(batch) / (step.Seconds() * out) // 16 requests/s
	cfg := fixedStep(t, step, batch)
	for _, axis := range []string{sweep.Speedup, sweep.Rate} {
		pl, err := Run(context.Background(), cfg, evenTrace(1500, 16, out), Options{Axis: axis,
			SLO: analysis.SLO{TTFT: 200 * time.Millisecond}, Knee: stats.KneeOptions{Start: 1, Max: 256, Resolution: 0.02}})
		if err != nil {
			t.Fatal(err)
		}
		s, ko := pl.Saturation, pl.Options
		t.Logf("%s: saturation %+v, SLO %+v, %d probes", axis, s, pl.SLOLimit, len(pl.Probes))
		// Below capacity the engine keeps up, so the first failing load is at or above it;
		// above capacity/min-ratio sustained < min-ratio x offered, so no passing load is.
		if !s.Found || !s.Bracketed || s.Fail < capacity || s.Pass > capacity/ko.MinRatio || (s.Fail-s.Pass)/s.Pass > ko.Resolution {
			t.Errorf("%s: saturation %+v: want a bracket within %.0f%% around the capacity %.2f (pass <= %.2f)", axis, s, 100*ko.Resolution, capacity, capacity/ko.MinRatio)
		}
		// TTFT is at most two steps while the batch has room and grows without bound past
		// the capacity: the SLO limit is the capacity too.
		b := pl.SLOLimit
		if !b.Found || !b.Bracketed || b.Fail < capacity || b.Pass > capacity*(1+ko.Resolution) || (b.Fail-b.Pass)/b.Pass > ko.Resolution {
			t.Errorf("%s: SLO limit %+v: want a bracket within %.0f%% at the capacity %.2f", axis, b, 100*ko.Resolution, capacity)
		}
	}
}

func TestSLOBoundaryIsRespected(t *testing.T) {
	// tiny's full step model: the boundary is what the search finds, checked point by point.
	p, err := sim.BuiltinProfile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config
	cfg.PrefixCache = false
	slo := analysis.SLO{TTFT: 100 * time.Millisecond, TPOT: 5 * time.Millisecond}
	tr := evenTrace(800, 200, 40)
	pl, err := Run(context.Background(), cfg, tr, Options{Axis: sweep.Rate, SLO: slo, Knee: stats.KneeOptions{Start: 1, Max: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	b := pl.SLOLimit
	if !b.Found || !b.Bracketed || b.NonMonotonic {
		t.Fatalf("SLO limit %+v: want a bracket", b)
	}
	var pass, fail *Point
	for i := range pl.Probes {
		switch pl.Probes[i].Load {
		case b.Pass:
			pass = &pl.Probes[i]
		case b.Fail:
			fail = &pl.Probes[i]
		}
	}
	if pass == nil || fail == nil || !pass.MeetsSLO || fail.MeetsSLO || pass.Attainment < 0.99 || fail.Attainment >= 0.99 {
		t.Fatalf("SLO limit %+v: pass %+v, fail %+v: want the passing load to meet the SLO at 99%% and the failing one not", b, pass, fail)
	}
	if (b.Fail-b.Pass)/b.Pass > pl.Options.Resolution {
		t.Errorf("SLO limit %+v: the next step up is more than the resolution %v above", b, pl.Options.Resolution)
	}
	// The attainment, counted again from the engine's own times, not through analysis.
	for _, pt := range []*Point{pass, fail} {
		s, _ := tr.Speedup(sweep.Rate, pt.Load)
		reqs := append([]sim.SimRequest(nil), tr.Reqs...)
		for i := range reqs {
			reqs[i].Arrival = time.Duration(float64(reqs[i].Arrival) / s)
		}
		res, err := sim.Simulate(cfg, reqs, 0)
		if err != nil {
			t.Fatal(err)
		}
		good := 0
		for i, r := range res {
			tpot := (r.End - r.First) / time.Duration(reqs[i].Output-1)
			if r.First-r.Arrival <= slo.TTFT && tpot <= slo.TPOT {
				good++
			}
		}
		if got := float64(good) / float64(len(res)); math.Abs(got-pt.Attainment) > 1e-9 {
			t.Errorf("rate %g: attainment %v through analysis, %v counted from the engine's times", pt.Load, pt.Attainment, got)
		}
	}
}

func TestAtLoads(t *testing.T) {
	cfg := fixedStep(t, 10*time.Millisecond, 8)
	pl, err := Run(context.Background(), cfg, evenTrace(600, 16, 50), Options{Axis: sweep.Speedup,
		Knee: stats.KneeOptions{Start: 1, Max: 64}, At: []float64{4, 8}})
	if err != nil {
		t.Fatal(err)
	}
	if len(pl.At) != 2 || pl.At[0].Load != 4 || pl.At[1].Load != 8 || pl.SLOLimit.Found {
		t.Fatalf("at %+v, SLO %+v: want loads 4 and 8 and no SLO limit", pl.At, pl.SLOLimit)
	}
	for _, pt := range pl.At {
		// Below capacity: every token one step apart, 50 tokens per request, load requests/s.
		if math.Abs(pt.TPOTP50-10) > 1e-6 || math.Abs(pt.SustainedTokensPerS-50*pt.Load)/(50*pt.Load) > 0.02 || !math.IsNaN(pt.Attainment) {
			t.Errorf("at %g: %+v: want TPOT 10 ms, %v tok/s sustained, no attainment", pt.Load, pt, 50*pt.Load)
		}
	}
}

func TestTwinError(t *testing.T) {
	if TwinError(nil) != nil {
		t.Fatal("no fit: want no error stated")
	}
	f := &sim.FitReport{Runs: []sim.FitRun{{File: "a"}, {File: "b", Holdout: true}, {File: "c", Holdout: true}},
		Errors: []sim.FitError{{Run: "a", Figure: "output_tok_s", RelErr: 0.5}, {Run: "b", Figure: "output_tok_s", RelErr: -0.08},
			{Run: "c", Figure: "output_tok_s", RelErr: 0.03}, {Run: "a", Figure: "ttft_p50_ms", RelErr: 0.2}}}
	got := TwinError(f)
	if len(got) != 1 || got[0] != (FigureError{Figure: "output_tok_s", MaxAbs: 0.08, Runs: 2, HeldOut: true}) {
		t.Errorf("held-out runs: %+v: want output_tok_s 0.08 over 2 held-out runs only", got)
	}
	f.Runs[1].Holdout, f.Runs[2].Holdout = false, false
	got = TwinError(f)
	if len(got) != 2 || got[0] != (FigureError{Figure: "output_tok_s", MaxAbs: 0.5, Runs: 3}) || got[1] != (FigureError{Figure: "ttft_p50_ms", MaxAbs: 0.2, Runs: 1}) {
		t.Errorf("no held-out run: %+v: want the largest over every run", got)
	}
}

func BenchmarkPlan(b *testing.B) {
	p, _ := sim.BuiltinProfile("tiny")
	tr := evenTrace(2000, 200, 40)
	for b.Loop() {
		if _, err := Run(context.Background(), p.Config, tr, Options{Axis: sweep.Rate, SLO: analysis.SLO{TTFT: 100 * time.Millisecond},
			Knee: stats.KneeOptions{Start: 1, Max: 1024}}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestReportRows: without loads of its own the table shows the passing load of each bound,
// once when they are the same load.
func TestReportRows(t *testing.T) {
	cfg := fixedStep(t, 10*time.Millisecond, 8)
	tr := evenTrace(300, 16, 50)
	pl, err := Run(context.Background(), cfg, tr, Options{Axis: sweep.Speedup, SLO: analysis.SLO{TTFT: 200 * time.Millisecond},
		Knee: stats.KneeOptions{Start: 1, Max: 64, Resolution: 0.05}})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := sim.BuiltinProfile("tiny")
	rows := NewReport(pl, &tr, &p, "tiny").Rows()
	if pl.Saturation.Pass != pl.SLOLimit.Pass || len(rows) != 1 || rows[0].Load != pl.Saturation.Pass {
		t.Errorf("bounds %+v and %+v, rows %+v: want one row at their passing load", pl.Saturation, pl.SLOLimit, rows)
	}
	pl.SLOLimit.Pass = pl.Probes[0].Load
	if rows = NewReport(pl, &tr, &p, "tiny").Rows(); len(rows) != 2 || rows[0].Load != pl.Saturation.Pass || rows[1].Load != pl.Probes[0].Load {
		t.Errorf("rows %+v: want the saturation's passing load, then the SLO limit's", rows)
	}
}

// TestClosedLoopKneeOfFixedStepEngine: on the concurrency axis, c workers keep c
// sequences in a batch of at most batch, each step a token for each of them: throughput
// doubles with every doubling up to batch and not past it, so the saturation is batch
// exactly (fails at 2·batch), as a closed-loop sweep would find it; at the At
// concurrencies every TPOT is one step, and TTFT is one step below the batch and grows
// with the workers that wait past it. An SLO on TTFT of three steps is met up to batch.
func TestClosedLoopKneeOfFixedStepEngine(t *testing.T) {
	const step, batch, out = 10 * time.Millisecond, 8, 50
	cfg := fixedStep(t, step, batch)
	pl, err := Run(context.Background(), cfg, evenTrace(400, 16, out), Options{Axis: sweep.Concurrency, At: []float64{2, 8, 32},
		SLO: analysis.SLO{TTFT: 3 * step}, Knee: stats.KneeOptions{Start: 1, Max: 256}})
	if err != nil {
		t.Fatal(err)
	}
	s, b := pl.Saturation, pl.SLOLimit
	t.Logf("saturation %+v, SLO %+v, %d probes", s, b, len(pl.Probes))
	if !s.Found || !s.Bracketed || s.Pass != batch || s.Fail != 2*batch {
		t.Errorf("saturation %+v: want concurrency %d, failing at %d", s, batch, 2*batch)
	}
	if !b.Found || !b.Bracketed || b.Pass != batch || b.Fail != batch+1 {
		t.Errorf("SLO limit %+v: want concurrency %d, failing at %d (one worker waits a whole request)", b, batch, batch+1)
	}
	perStep := 1e3 / float64(step.Milliseconds()) // tokens a second per running sequence
	for _, p := range pl.At {
		running := math.Min(p.Load, batch)
		t.Logf("concurrency %g: %.1f tok/s, TTFT p50 %.2f ms, TPOT p50 %.2f ms", p.Load, p.SustainedTokensPerS, p.TTFTP50, p.TPOTP50)
		if math.Abs(p.TPOTP50-float64(step.Milliseconds())) > 1e-9 || !math.IsNaN(p.Speedup) {
			t.Errorf("concurrency %g: TPOT p50 %g ms, speedup %g; want one step, %v, and no speedup", p.Load, p.TPOTP50, p.Speedup, step)
		}
		if want := running * perStep; math.Abs(p.SustainedTokensPerS-want) > 0.02*want {
			t.Errorf("concurrency %g: sustained %.1f tok/s, want %g sequences x %g tok/s = %g", p.Load, p.SustainedTokensPerS, running, perStep, want)
		}
		if p.Load <= batch && p.TTFTP50 != float64(step.Milliseconds()) {
			t.Errorf("concurrency %g: TTFT p50 %g ms; want one step below the batch cap", p.Load, p.TTFTP50)
		}
	}
	if _, err := Run(context.Background(), cfg, evenTrace(10, 16, out), Options{Axis: sweep.Concurrency, At: []float64{2.5}, Knee: stats.KneeOptions{Start: 1, Max: 4}}); err == nil {
		t.Error("a concurrency of 2.5 workers was planned")
	}
}
