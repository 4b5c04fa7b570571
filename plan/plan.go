// Package plan answers capacity questions against a twin of an engine (a sim.Config, fitted
// by package twin or written by hand): for a trace and an SLO, the highest load the twin
// serves within the SLO (open loop: a rate or a speedup of the trace; closed loop: a number
// of concurrent workers), its saturation knee, and the figures it predicts at chosen loads. Each load is simulated with sim.Simulate in model time and judged exactly as a
// sweep judges a point it replayed: the predicted run is written as a results file, analysed
// by package analysis, turned into a sweep.Row and searched by stats.SearchKnee, so "tracks",
// "meets the SLO" and the knee mean here what docs/metrics.md, "Sweep", says they mean there.
// `llmreplay plan` is its command.
package plan

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/stats"
	"github.com/llmreplay/llmreplay/sweep"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/twin"
)

// Trace is a trace's requests as the engine simulates them, their arrivals counted from
// the first one's.
type Trace struct {
	Name string
	Reqs []sim.SimRequest
	// PrefixBlocks: the trace says which prompts share prefixes. The simulated requests
	// share none (sim.Simulate's requests share at most one prefix each, the trace's blocks
	// form a tree), so the plan's prefills are those of a cold cache: a pessimistic bound.
	PrefixBlocks bool
}

// Span is the time from the first arrival to the last.
func (t *Trace) Span() time.Duration {
	if len(t.Reqs) == 0 {
		return 0
	}
	return t.Reqs[len(t.Reqs)-1].Arrival
}

// ReadTrace reads the trace file at path ("" reads the bundled sample, as replay does).
func ReadTrace(path string) (Trace, error) {
	var r *trace.Reader
	var err error
	if path == "" {
		r, err = trace.OpenSample()
	} else {
		r, err = trace.Open(path)
	}
	if err != nil {
		return Trace{}, err
	}
	defer r.Close()
	t := Trace{Name: r.Name()}
	var first time.Duration
	for r.Next() {
		q := r.Request()
		if len(t.Reqs) == 0 {
			first = q.Arrival
		}
		t.PrefixBlocks = t.PrefixBlocks || len(q.PrefixBlocks) > 0
		t.Reqs = append(t.Reqs, sim.SimRequest{Arrival: q.Arrival - first, Prompt: int(q.PromptTokens), Output: int(q.OutputTokens)})
	}
	if err := r.Err(); err != nil {
		return Trace{}, err
	}
	if len(t.Reqs) < 2 || t.Span() <= 0 {
		return Trace{}, fmt.Errorf("plan: %s: %d requests over %v: a plan scales the trace's arrivals and needs at least 2 at different times", t.Name, len(t.Reqs), t.Span())
	}
	return t, nil
}

// Options say what to search and report. The knee options' zero fields take
// stats.KneeOptions' defaults; HasSLO is set from SLO.
type Options struct {
	Axis string // sweep.Speedup, sweep.Rate or sweep.Concurrency
	SLO  analysis.SLO
	Knee stats.KneeOptions
	At   []float64 // loads on Axis to report the figures at
}

// Point is what the twin predicts at one load: the figures `analyze` reports of the
// predicted run, as a sweep's open-loop row has them.
type Point struct {
	Load    float64
	Speedup float64 // the trace's arrivals divided by this; NaN in a closed loop
	// Offered and sustained output tok/s, and offered requests/s, over the steady-state
	// window (docs/metrics.md, "Sweep").
	OfferedTokensPerS, SustainedTokensPerS, OfferedRequestsPerS float64
	TTFTP50, TTFTP99                                            float64 // ms
	TPOTP50, TPOTP99                                            float64 // ms
	// Goodput (req/s) and Attainment (a fraction) are NaN without an SLO.
	Goodput, Attainment float64
	Overloaded          bool
	Tracks, MeetsSLO    bool
}

// Figure returns the point's value of one of twin.Figures.
func (p *Point) Figure(name string) float64 {
	switch name {
	case "output_tok_s":
		return p.SustainedTokensPerS
	case "ttft_p50_ms":
		return p.TTFTP50
	case "ttft_p99_ms":
		return p.TTFTP99
	case "tpot_p50_ms":
		return p.TPOTP50
	case "tpot_p99_ms":
		return p.TPOTP99
	}
	return math.NaN()
}

// Plan is what Run found.
type Plan struct {
	Axis    string
	SLO     analysis.SLO
	Options stats.KneeOptions // with defaults
	// Saturation is the highest load whose sustained throughput tracks the offered load;
	// SLOLimit the highest meeting the SLO (Found false and LimitedBy "" without an SLO).
	Saturation, SLOLimit stats.Bound
	Probes               []Point // every load the search simulated, in load order
	At                   []Point // the Options.At loads, in their order
}

// Run plans tr on the engine cfg: the knee search over the axis, then the At loads.
func Run(ctx context.Context, cfg sim.Config, tr Trace, o Options) (*Plan, error) {
	if o.Axis != sweep.Speedup && o.Axis != sweep.Rate && o.Axis != sweep.Concurrency {
		return nil, fmt.Errorf("plan: axis %q: want %s, %s or %s", o.Axis, sweep.Speedup, sweep.Rate, sweep.Concurrency)
	}
	if cfg.Fixed {
		return nil, fmt.Errorf("plan: profile %s has fixed latencies (fixed: true): it models no batching, so no load saturates it; plan with a step-model profile", cfg.Model)
	}
	ko := o.Knee
	ko.HasSLO = !o.SLO.IsZero()
	if err := ko.Validate(); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	dir, err := os.MkdirTemp("", "llmreplay-plan-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	p := &prober{cfg: cfg, tr: tr, o: o, ko: ko, dir: dir, seen: map[float64]Point{}, pts: map[float64]stats.SweepPoint{}}
	search := stats.SearchKnee
	if o.Axis == sweep.Concurrency {
		search = stats.SearchConcurrency // doublings, as a closed-loop sweep searches
	}
	res, err := search(ctx, func(ctx context.Context, load float64) (stats.SweepPoint, error) {
		_, sp, err := p.point(ctx, load)
		return sp, err
	}, ko)
	if err != nil {
		return nil, err
	}
	pl := &Plan{Axis: o.Axis, SLO: o.SLO, Options: ko, Saturation: res.Saturation, SLOLimit: res.SLO}
	for _, sp := range res.Points {
		pl.Probes = append(pl.Probes, p.seen[sp.Load])
	}
	for _, l := range o.At {
		pt, _, err := p.point(ctx, l)
		if err != nil {
			return nil, err
		}
		pl.At = append(pl.At, pt)
	}
	return pl, nil
}

// prober simulates loads, each once.
type prober struct {
	cfg  sim.Config
	tr   Trace
	o    Options
	ko   stats.KneeOptions
	dir  string
	n    int                          // loads simulated, naming their files
	seen map[float64]Point            // by load
	pts  map[float64]stats.SweepPoint // the same loads as the knee search sees them
}

// Speedup is the speedup that puts the trace at load on axis: the load itself, or the
// speedup of `replay --rate` (trace.SpeedupForRate).
func (t *Trace) Speedup(axis string, load float64) (float64, error) {
	if axis == sweep.Rate {
		return trace.SpeedupForRate(int64(len(t.Reqs)), t.Span(), load)
	}
	if !(load > 0) || math.IsInf(load, 0) {
		return 0, fmt.Errorf("speedup %v: must be positive", load)
	}
	return load, nil
}

// loop is the trace at load: its requests as they arrive, and the speedup of their
// arrivals; on the concurrency axis, a closed loop of load workers that send the trace's
// requests in order, each as soon as the last it sent has ended (replay --concurrency),
// and a NaN speedup.
func (t *Trace) loop(axis string, load float64) (reqs []sim.SimRequest, concurrency int, speedup float64, err error) {
	reqs = slices.Clone(t.Reqs)
	if axis == sweep.Concurrency {
		if load < 1 || load != math.Trunc(load) || load > math.MaxInt32 {
			return nil, 0, 0, fmt.Errorf("concurrency %v: must be a whole number of workers, at least 1", load)
		}
		for i := range reqs {
			reqs[i].Arrival = 0
		}
		return reqs, int(load), math.NaN(), nil
	}
	s, err := t.Speedup(axis, load)
	if err != nil {
		return nil, 0, 0, err
	}
	for i := range reqs {
		reqs[i].Arrival = time.Duration(float64(reqs[i].Arrival) / s)
	}
	return reqs, 0, s, nil
}

// point simulates the trace at load and analyses the predicted run as a sweep analyses a
// point: analysis's defaults with the SLO, sweep.NewRow, Row.Point.
func (p *prober) point(ctx context.Context, load float64) (Point, stats.SweepPoint, error) {
	if pt, ok := p.seen[load]; ok {
		return pt, p.pts[load], nil
	}
	reqs, c, s, err := p.tr.loop(p.o.Axis, load)
	if err != nil {
		return Point{}, stats.SweepPoint{}, fmt.Errorf("plan: %s %g: %w", p.o.Axis, load, err)
	}
	res, err := sim.Simulate(p.cfg, reqs, c)
	if err != nil {
		return Point{}, stats.SweepPoint{}, fmt.Errorf("plan: %w", err)
	}
	for i, r := range res {
		if !r.Served {
			// A request with no row would vanish from the attainment's denominator.
			return Point{}, stats.SweepPoint{}, fmt.Errorf("plan: %s request %d (prompt %d, output %d tokens) can never be admitted by the engine (kv_cache_tokens %d, max_batched_tokens %d): the profile cannot serve this trace",
				p.tr.Name, i, reqs[i].Prompt, reqs[i].Output, p.cfg.KVCacheTokens, p.cfg.MaxBatchedTokens)
		}
	}
	p.n++
	path := filepath.Join(p.dir, fmt.Sprintf("load-%d.parquet", p.n))
	meta := results.RunMeta{ToolVersion: "plan", RunID: fmt.Sprintf("plan-%d", p.n), Mode: results.ModeOpen,
		Endpoint: "sim", API: "completions", Model: p.cfg.Model, ShardCount: 1, RunStartUnixNS: 1,
		Simulated: true, SimProfile: "plan", TraceFile: p.tr.Name, Speedup: s, SLO: p.o.SLO.String(), Flags: map[string]string{}}
	switch p.o.Axis {
	case sweep.Rate:
		meta.Rate = load
	case sweep.Concurrency:
		meta.Mode, meta.Concurrency, meta.Speedup = results.ModeClosed, c, 0
	}
	if err := twin.WriteResults(path, meta, reqs, res, nil); err != nil {
		return Point{}, stats.SweepPoint{}, fmt.Errorf("plan: %w", err)
	}
	defer os.Remove(path)
	d, err := analysis.Load(ctx, decode.LoadOptions{}, path)
	if err != nil {
		return Point{}, stats.SweepPoint{}, fmt.Errorf("plan: %w", err)
	}
	opts := analysis.DefaultOptions()
	opts.SLO = p.o.SLO
	row, err := sweep.NewRow(p.o.Axis, load, filepath.Base(path), d, opts)
	if err != nil {
		return Point{}, stats.SweepPoint{}, fmt.Errorf("plan: analyse %s %g: %w", p.o.Axis, load, err)
	}
	sp := row.Point()
	sp.Load = load
	r := row.Report
	pt := Point{Load: load, Speedup: s, OfferedTokensPerS: sp.OfferedTokensPerSecond, SustainedTokensPerS: sp.SustainedTokensPerSecond,
		OfferedRequestsPerS: row.Offered.WindowRequestsPerS, TTFTP50: r.TTFT.P50, TTFTP99: r.TTFT.P99, TPOTP50: r.TPOT.P50, TPOTP99: r.TPOT.P99,
		Goodput: math.NaN(), Attainment: sp.Attainment, Overloaded: sp.Overloaded,
		Tracks: sp.Tracks(p.ko.MinRatio), MeetsSLO: sp.MeetsSLO(p.ko.Attainment)}
	if r.Goodput != nil {
		pt.Goodput = r.Goodput.RequestsPerS
	}
	p.seen[load], p.pts[load] = pt, sp
	return pt, sp, nil
}
