package twin

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/twintest"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
)

// truth draws the engine the fit is not told (twintest.Engine: the HTTP proof in
// cmd/llmreplay draws from the same ranges).
func truth(rng *rand.Rand) sim.Config { return twintest.Engine(rng) }

// workload is n requests with prompts and outputs drawn uniformly; gap > 0 spaces their
// arrivals exponentially with that mean (open loop), 0 leaves them for a closed loop.
// Every third request shares a prefix of a varied length with the others of its group.
func workload(rng *rand.Rand, n int, gap time.Duration, pLo, pHi, oLo, oHi int) []sim.SimRequest {
	out := make([]sim.SimRequest, n)
	var at time.Duration
	for i := range out {
		p := pLo + rng.IntN(pHi-pLo+1)
		out[i] = sim.SimRequest{Arrival: at, Prompt: p, Output: oLo + rng.IntN(oHi-oLo+1)}
		if i%3 == 0 {
			out[i].PrefixID, out[i].SharedPrefix = 1+uint64(rng.IntN(2)), min(p, 40+rng.IntN(200))
		}
		if gap > 0 {
			at += time.Duration(rng.ExpFloat64() * float64(gap))
		}
	}
	return out
}

// jitter is what the measuring client adds to every chunk's arrival: a few tens of
// microseconds of network and scheduling noise, so the fit's standard errors mean
// something.
const jitter = 40 * time.Microsecond

// makeRun simulates reqs on cfg and writes them as the results file of a run (open loop,
// or closed at concurrency) in dir, each token time moved by seeded jitter.
func makeRun(t *testing.T, rng *rand.Rand, dir, name string, cfg sim.Config, reqs []sim.SimRequest, concurrency int) string {
	t.Helper()
	return makeRunSent(t, rng, dir, name, cfg, reqs, concurrency, 0)
}

// makeRunSent is makeRun with each request sent up to sendNoise (uniform) before it
// reached the engine: an overhead that varies from request to request.
func makeRunSent(t *testing.T, rng *rand.Rand, dir, name string, cfg sim.Config, reqs []sim.SimRequest, concurrency int, sendNoise time.Duration) string {
	t.Helper()
	res, err := sim.Simulate(cfg, reqs, concurrency)
	if err != nil {
		t.Fatal(err)
	}
	for i := range res {
		res[i].Arrival -= time.Duration(rng.Float64() * float64(sendNoise))
		for k := range res[i].Tokens {
			res[i].Tokens[k] += time.Duration(rng.Float64() * float64(jitter))
		}
		res[i].First, res[i].End = res[i].Tokens[0], res[i].Tokens[len(res[i].Tokens)-1]
	}
	meta := results.RunMeta{ToolVersion: "test", RunID: name, Mode: results.ModeOpen, Endpoint: "http://127.0.0.1:1/v1",
		API: "completions", Model: "m", ShardCount: 1, RunStartUnixNS: 1, Speedup: 1, Flags: map[string]string{}}
	if concurrency > 0 {
		meta.Mode, meta.Concurrency = results.ModeClosed, concurrency
	}
	path := filepath.Join(dir, name+".parquet")
	if err := WriteResults(path, meta, reqs, res, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFitRecoversAndPredicts is the twin's proof: three light runs of an engine drawn at
// random (one request at a time with varied prompts; closed loops at concurrency 3 and
// just past the batch cap) determine its parameters within their stated bounds, and the
// fitted twin predicts two loads it never saw, one past the knee, within 5% on sustained
// output tok/s and 10% on TTFT p50.
func TestFitRecoversAndPredicts(t *testing.T) {
	for seed := range uint64(3) {
		t.Run("seed"+string(rune('0'+seed)), func(t *testing.T) { proof(t, seed) })
	}
}

func proof(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 34))
	cfg := truth(rng)
	dir := t.TempDir()
	paths := []string{
		makeRun(t, rng, dir, "solo", cfg, workload(rng, 60, 2*time.Second, 100, 3000, 10, 60), 0),
		makeRun(t, rng, dir, "c3", cfg, workload(rng, 90, 0, 50, 1500, 20, 120), 3),
		makeRun(t, rng, dir, "cap", cfg, workload(rng, 4*cfg.MaxBatch, 0, 50, 800, 20, 80), cfg.MaxBatch+4),
		makeRun(t, rng, dir, "open", cfg, workload(rng, 300, 40*time.Millisecond, 50, 1500, 20, 120), 0),
		makeRun(t, rng, dir, "knee", cfg, workload(rng, 10*cfg.MaxBatch, 0, 50, 1500, 20, 120), 2*cfg.MaxBatch),
	}
	base, _ := sim.Profile("tiny")
	p, err := FitFiles(context.Background(), paths, []bool{false, false, false, true, true}, base, "twin", "llmreplay test")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"step_base_ns": float64(cfg.StepBase), "decode_per_seq_ns": float64(cfg.DecodePerSeq),
		"context_per_token_ns": float64(cfg.ContextPerToken), "prefill_per_token_ns": float64(cfg.PrefillPerToken),
		"attention_per_pair_ns": cfg.AttentionPerPairNs, "max_batch": float64(cfg.MaxBatch), "prefix_cache": 1,
		"prefix_block_tokens": float64(cfg.PrefixBlockTokens), "request_overhead_ns": float64(cfg.RequestOverhead) + float64(jitter)/2}
	for _, q := range p.Fit.Params {
		w, ok := want[q.Name]
		if !ok || !q.Determined {
			t.Logf("%s = %g (undetermined: %s)", q.Name, q.Value, q.Advice)
			continue
		}
		t.Logf("%s = %g ± %g (truth %g)", q.Name, q.Value, q.StdErr, w)
		if d := math.Abs(q.Value - w); d > 3*q.StdErr+1e-9 && d > 1e-9*w || d > 0.1*w {
			t.Errorf("%s = %g ± %g, truth %g: outside 3 standard errors or 10%%", q.Name, q.Value, q.StdErr, w)
		}
		delete(want, q.Name)
	}
	for _, name := range []string{"step_base_ns", "decode_per_seq_ns", "prefill_per_token_ns", "max_batch", "request_overhead_ns"} {
		if _, left := want[name]; left {
			t.Errorf("%s not determined by the three runs", name)
		}
	}
	for _, e := range p.Fit.Errors {
		t.Logf("%s %s: measured %.3f predicted %.3f (%+.2f%%)", e.Run, e.Figure, e.Measured, e.Predicted, 100*e.RelErr)
		if e.Run != "open.parquet" && e.Run != "knee.parquet" {
			continue
		}
		if bound := map[string]float64{"output_tok_s": 0.05, "ttft_p50_ms": 0.10}[e.Figure]; bound > 0 && !(math.Abs(e.RelErr) <= bound) {
			t.Errorf("held-out %s %s: measured %g predicted %g, error %+.1f%% beyond %g%%", e.Run, e.Figure, e.Measured, e.Predicted, 100*e.RelErr, 100*bound)
		}
	}
}

// TestFitTellsPrefillFromOverhead: an engine shaped as Ollama on a CPU (two slots, prefill
// ~45 µs a token and attention ~620 ns a pair, a request overhead of 9 ms and up to 12 ms
// more, varying from request to request) and its test's runs (prompts 16-600). The idle TTFTs
// alone cannot tell the prefill term from the overhead; the prefills that shared a step
// with a decode, at concurrency 2, can, and the fit then finds both within their errors,
// the prefill terms within 1% (the gaps' precision, when the rows are weighted by their
// noise).
func TestFitTellsPrefillFromOverhead(t *testing.T) {
	cfg, _ := sim.Profile("tiny")
	cfg.StepBase, cfg.DecodePerSeq, cfg.ContextPerToken = 20*time.Microsecond, 380*time.Microsecond, 600
	cfg.PrefillPerToken, cfg.AttentionPerPairNs, cfg.RequestOverhead, cfg.MaxBatch = 45*time.Microsecond, 620, 9*time.Millisecond, 2
	rng := rand.New(rand.NewPCG(34, 2))
	dir := t.TempDir()
	const sendNoise = 12 * time.Millisecond
	w := workload(rng, 25, time.Second, 16, 600, 64, 256)
	for i := range w {
		w[i].Arrival += sendNoise // room for the earliest send
	}
	solo := makeRunSent(t, rng, dir, "c1", cfg, w, 0, sendNoise)
	c2 := makeRun(t, rng, dir, "c2", cfg, workload(rng, 60, 0, 16, 600, 64, 256), 2)
	base, _ := sim.Profile("tiny")
	fit := func(paths ...string) map[string]sim.FitParam {
		p, err := FitFiles(context.Background(), paths, make([]bool, len(paths)), base, "twin", "llmreplay test")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]sim.FitParam{}
		for _, q := range p.Fit.Params {
			out[q.Name] = q
		}
		return out
	}
	if q := fit(solo)["prefill_per_token_ns"]; q.Determined {
		t.Fatalf("the one-at-a-time run alone determined prefill_per_token_ns (%g ± %g): the case does not need the steps beside decodes", q.Value, q.StdErr)
	}
	got := fit(solo, c2)
	for name, w := range map[string]float64{"prefill_per_token_ns": float64(cfg.PrefillPerToken), "attention_per_pair_ns": cfg.AttentionPerPairNs,
		"request_overhead_ns": float64(cfg.RequestOverhead + jitter/2 + sendNoise/2)} {
		q := got[name]
		t.Logf("%s = %g ± %g (truth %g)", name, q.Value, q.StdErr, w)
		if !q.Determined || math.Abs(q.Value-w) > 3*q.StdErr && math.Abs(q.Value-w) > 0.1*w {
			t.Errorf("%s = %g ± %g (determined %v), truth %g: want it determined, within 3 standard errors or 10%%", name, q.Value, q.StdErr, q.Determined, w)
		}
		// The gaps carry 40 µs of jitter and the TTFTs up to 12 ms: weighted by their
		// noise, the gaps decide the prefill terms (an unweighted fit had prefill 2.1% off).
		if name != "request_overhead_ns" && math.Abs(q.Value-w) > 0.01*w {
			t.Errorf("%s = %g ± %g, truth %g: beyond 1%%, the precision of the gaps", name, q.Value, q.StdErr, w)
		}
	}
}

// TestFitAdvice: runs that cannot determine a parameter leave it at the base value and
// say which run would: one request at a time cannot tell step_base from decode_per_seq,
// a closed loop where no request ever has the engine to itself cannot fit prefill, and
// neither reaches the batch cap.
func TestFitAdvice(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	cfg := truth(rng)
	base, _ := sim.Profile("tiny")
	dir := t.TempDir()
	read := func(path string) Run {
		r, err := ReadRun(context.Background(), path, false)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	apart := workload(rng, 40, 0, 100, 3000, 10, 60)
	for i := range apart {
		apart[i].Arrival = time.Duration(i) * 5 * time.Second // never two at once
	}
	solo := read(makeRun(t, rng, dir, "solo", cfg, apart, 0))
	busy := read(makeRun(t, rng, dir, "busy", cfg, workload(rng, 80, 0, 100, 1500, 20, 80), 4))
	byName := func(ps []sim.FitParam) map[string]sim.FitParam {
		m := map[string]sim.FitParam{}
		for _, p := range ps {
			m[p.Name] = p
		}
		return m
	}
	got, params := Fit([]Run{solo}, base)
	ps := byName(params)
	if p := ps["decode_per_seq_ns"]; p.Determined || !strings.Contains(p.Advice, "closed-loop run at a concurrency") || got.DecodePerSeq != base.DecodePerSeq {
		t.Errorf("one at a time: decode_per_seq %+v (config %v)", p, got.DecodePerSeq)
	}
	if p := ps["prefill_per_token_ns"]; !p.Determined {
		t.Errorf("one at a time: prefill not determined: %+v", p)
	}
	if p := ps["max_batch"]; p.Determined || !strings.Contains(p.Advice, "add a closed-loop run at a concurrency above") {
		t.Errorf("one at a time: max_batch %+v", p)
	}
	got, params = Fit([]Run{busy}, base)
	ps = byName(params)
	if p := ps["prefill_per_token_ns"]; p.Determined || !strings.Contains(p.Advice, "add a run at concurrency 1") || got.PrefillPerToken != base.PrefillPerToken {
		t.Errorf("closed loop: prefill %+v (config %v)", p, got.PrefillPerToken)
	}
	if p := ps["decode_per_seq_ns"]; !p.Determined {
		t.Errorf("closed loop: decode_per_seq not determined: %+v", p)
	}
}

// TestFitFromAnMoEBase: starting from the MoE profile, the fitted engine has no expert
// term (it would count the step's growth twice) and its decode terms are the runs'.
func TestFitFromAnMoEBase(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	cfg := truth(rng)
	base, _ := sim.Profile("moe-230b-8gpu")
	dir := t.TempDir()
	var runs []Run
	for _, p := range []string{
		makeRun(t, rng, dir, "solo", cfg, workload(rng, 60, 2*time.Second, 100, 3000, 10, 60), 0),
		makeRun(t, rng, dir, "c3", cfg, workload(rng, 90, 0, 50, 1500, 20, 120), 3),
	} {
		r, err := ReadRun(context.Background(), p, false)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	got, _ := Fit(runs, base)
	if got.PerExpert != 0 || got.Experts != 0 || got.ExpertsPerToken != 0 || got.Validate() != nil {
		t.Fatalf("expert term kept: %v x %d/%d (%v)", got.PerExpert, got.ExpertsPerToken, got.Experts, got.Validate())
	}
	if d := math.Abs(float64(got.DecodePerSeq-cfg.DecodePerSeq)) / float64(cfg.DecodePerSeq); d > 0.1 {
		t.Fatalf("decode_per_seq %v, truth %v", got.DecodePerSeq, cfg.DecodePerSeq)
	}
}
