package analysis

import (
	"github.com/llmreplay/llmreplay/analysis/plot"
	"github.com/llmreplay/llmreplay/analysis/scraped"

	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/llmreplay/llmreplay/analysis/decode"
)

// The server section: what the engine's own Prometheus metrics said during the run, read
// from the metrics files beside the results files (docs/metrics.md, "Server metrics").
// Analysis knows a fixed table of metric names (scraped.Metrics); every other sample in a
// metrics file is skipped while reading, so memory grows with the known series only.

// GaugeStats summarises a gauge's aligned samples in the window (scraped.GaugeStats).
type GaugeStats = scraped.GaugeStats

// Server is the report's server section: what the scraped Prometheus endpoints said over
// the window (the steady-state window, or the whole run when there is none).
type Server struct {
	Sources []ServerSource
	Engines []string // metric families seen: vllm, sglang, tgi, llamacpp, dcgm
	// The window the figures cover, s; Steady says it is the steady-state window.
	WindowStartS, WindowEndS float64
	Steady                   bool
	Running, Waiting         GaugeStats // requests
	KVUsage                  GaugeStats // fraction 0..1
	// Preemptions is the counter's increase over the window (resets handled as
	// Prometheus's increase does); NaN when no source exposes it.
	Preemptions float64
	// PrefixHitRate is hits / queries over the window from the engine's counters
	// (PrefixFrom "counters"), else the mean of its own rate gauge ("gauge"); NaN and ""
	// when neither is exposed.
	PrefixHitRate           float64
	PrefixHits, PrefixQuery float64
	PrefixFrom              string
	GPUUtil                 GaugeStats // percent, averaged over GPUs
	GPUPowerW               GaugeStats // W, summed over GPUs
	GPUMemMiB               GaugeStats // MiB, summed over GPUs
}

// ServerSource is one scraped endpoint: its scrape attempts over the whole run and how
// many failed (llmreplay_scrape_up == 0), with the last failure's reason.
type ServerSource struct {
	Source            string
	Shard             int
	Scrapes, Failures int64
	LastError         string
}

// server builds r.Server and the server columns of r.Series from d's metrics files; it
// leaves r.Server nil when no file given names a metrics file.
func (r *Report) server(d *decode.Data) {
	sd := d.Server
	if sd == nil {
		return
	}
	r.Warnings = append(r.Warnings, sd.Warnings...)
	if sd.Files == 0 {
		return
	}
	s := &Server{}
	for i, src := range sd.Sources {
		s.Sources = append(s.Sources, ServerSource{Source: src, Shard: sd.ShardOf[i], Scrapes: sd.Attempts[i], Failures: sd.Failures[i], LastError: sd.LastError[i]})
	}
	seen := map[string]bool{}
	for _, x := range sd.Series {
		seen[scraped.Metrics[x.Metric].Engine] = true
	}
	for _, e := range []string{"vllm", "sglang", "tgi", "llamacpp", "dcgm"} {
		if seen[e] {
			s.Engines = append(s.Engines, e)
		}
	}
	roles := scraped.Align(sd)
	t := r.Throughput
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	s.WindowStartS, s.WindowEndS = math.NaN(), math.NaN()
	if !math.IsNaN(t.WindowStartS) {
		lo, hi = int64(math.Round(t.WindowStartS*1e9)), int64(math.Round(t.WindowEndS*1e9))
		s.WindowStartS, s.WindowEndS, s.Steady = t.WindowStartS, t.WindowEndS, true
	} else {
		r.warnf("server metrics cover the whole run: there is no steady-state window")
	}
	s.Running = scraped.Gauge(roles[scraped.Running], lo, hi)
	s.Waiting = scraped.Gauge(roles[scraped.Waiting], lo, hi)
	s.KVUsage = scraped.Gauge(roles[scraped.KVUsage], lo, hi)
	s.GPUUtil = scraped.Gauge(roles[scraped.GPUUtil], lo, hi)
	s.GPUPowerW = scraped.Gauge(roles[scraped.GPUPower], lo, hi)
	s.GPUMemMiB = scraped.Gauge(roles[scraped.GPUMem], lo, hi)
	s.Preemptions = scraped.Increase(roles[scraped.Preemptions], lo, hi)
	s.PrefixHits = scraped.Increase(roles[scraped.PrefixHits], lo, hi)
	s.PrefixQuery = scraped.Increase(roles[scraped.PrefixQueries], lo, hi)
	s.PrefixHitRate = math.NaN()
	switch {
	case !math.IsNaN(s.PrefixQuery) && !math.IsNaN(s.PrefixHits):
		s.PrefixFrom = "counters"
		if s.PrefixQuery > 0 {
			s.PrefixHitRate = s.PrefixHits / s.PrefixQuery
		}
	case len(roles[scraped.PrefixRate]) > 0:
		s.PrefixFrom = "gauge"
		s.PrefixHitRate = scraped.Mean(roles[scraped.PrefixRate], lo, hi)
	}
	var failing []string
	for _, src := range s.Sources {
		if src.Failures > 0 {
			failing = append(failing, src.Source)
			r.warnf("scrape of %s failed %d of %d times (last: %s)", src.Source, src.Failures, src.Scrapes, orDash(src.LastError))
		}
	}
	if len(sd.Series) == 0 {
		r.warnf("the metrics files hold no metric analysis knows (docs/metrics.md lists them): no server figures")
	}
	r.Server = s

	// The time series' server columns.
	iv := int64(r.Options.Interval)
	for k := range r.Series {
		p := &r.Series[k]
		a, b := int64(k)*iv, int64(k+1)*iv
		p.ServerRunning = scraped.Mean(roles[scraped.Running], a, b)
		p.ServerWaiting = scraped.Mean(roles[scraped.Waiting], a, b)
		p.KVUsage = scraped.Mean(roles[scraped.KVUsage], a, b)
		p.Preemptions = scraped.Increase(roles[scraped.Preemptions], a, b)
		p.GPUUtil = scraped.Mean(roles[scraped.GPUUtil], a, b)
		p.GPUPowerW = scraped.Mean(roles[scraped.GPUPower], a, b)
	}
}

// noServerColumns marks a series' server columns as absent.
func (p *Interval) noServerColumns() {
	nan := math.NaN()
	p.ServerRunning, p.ServerWaiting, p.KVUsage, p.Preemptions, p.GPUUtil, p.GPUPowerW = nan, nan, nan, nan, nan, nan
}

// The JSON shape of the server section (docs/metrics.md, "Server metrics").
type jsonServer struct {
	Sources     []jsonServerSource `json:"sources"`
	Engines     []string           `json:"engines"`
	Window      jsonWindow         `json:"window"`
	SteadyState bool               `json:"steady_state"`
	Running     jsonGauge          `json:"running_requests"`
	Waiting     jsonGauge          `json:"waiting_requests"`
	KVUsage     jsonGauge          `json:"kv_cache_usage"`
	Preemptions Num                `json:"preemptions"`
	PrefixCache jsonServerPrefix   `json:"prefix_cache"`
	GPUUtil     jsonGauge          `json:"gpu_utilization_pct"`
	GPUPower    jsonGauge          `json:"gpu_power_w"`
	GPUMem      jsonGauge          `json:"gpu_memory_used_mib"`
}

type jsonServerSource struct {
	Source    string  `json:"source"`
	Shard     int     `json:"shard"`
	Scrapes   int64   `json:"scrapes"`
	Failures  int64   `json:"failures"`
	LastError *string `json:"last_error"`
}

type jsonGauge struct {
	N    int64 `json:"n"`
	Mean Num   `json:"mean"`
	P99  Num   `json:"p99"`
	Max  Num   `json:"max"`
}

type jsonServerPrefix struct {
	HitRate Num     `json:"hit_rate"`
	Hits    Num     `json:"hits"`
	Queries Num     `json:"queries"`
	From    *string `json:"from"`
}

func jg(g GaugeStats) jsonGauge { return jsonGauge{g.N, Num(g.Mean), Num(g.P99), Num(g.Max)} }

func (s *Server) toJSON() *jsonServer {
	j := &jsonServer{Sources: []jsonServerSource{}, Engines: append([]string{}, s.Engines...),
		Window: jsonWindow{Num(s.WindowStartS), Num(s.WindowEndS)}, SteadyState: s.Steady,
		Running: jg(s.Running), Waiting: jg(s.Waiting), KVUsage: jg(s.KVUsage), Preemptions: Num(s.Preemptions),
		PrefixCache: jsonServerPrefix{HitRate: Num(s.PrefixHitRate), Hits: Num(s.PrefixHits), Queries: Num(s.PrefixQuery)},
		GPUUtil:     jg(s.GPUUtil), GPUPower: jg(s.GPUPowerW), GPUMem: jg(s.GPUMemMiB)}
	if s.PrefixFrom != "" {
		from := s.PrefixFrom
		j.PrefixCache.From = &from
	}
	for _, src := range s.Sources {
		js := jsonServerSource{Source: src.Source, Shard: src.Shard, Scrapes: src.Scrapes, Failures: src.Failures}
		if src.LastError != "" {
			e := src.LastError
			js.LastError = &e
		}
		j.Sources = append(j.Sources, js)
	}
	return j
}

// writeText writes the server section of the text report.
func (s *Server) writeText(p func(string, ...any)) {
	win := "whole run (no steady-state window)"
	if s.Steady {
		win = fmt.Sprintf("steady-state window [%s s, %s s)", f3(s.WindowStartS), f3(s.WindowEndS))
	}
	engines := "none known"
	if len(s.Engines) > 0 {
		engines = strings.Join(s.Engines, ", ")
	}
	p("\nServer (%d source(s) scraped; %s; metrics of %s)\n", len(s.Sources), win, engines)
	p("  %-26s %9s %10s %10s %10s\n", "", "n", "mean", "p99", "max")
	row := func(name string, g GaugeStats, scale float64) {
		if g.N == 0 {
			return
		}
		p("  %-26s %9d %10s %10s %10s\n", name, g.N, f3(g.Mean*scale), f3(g.P99*scale), f3(g.Max*scale))
	}
	row("running requests", s.Running, 1)
	row("waiting requests", s.Waiting, 1)
	row("KV-cache usage, %", s.KVUsage, 100)
	row("GPU utilisation, %", s.GPUUtil, 1)
	row("GPU power, W", s.GPUPowerW, 1)
	row("GPU memory used, MiB", s.GPUMemMiB, 1)
	if !math.IsNaN(s.Preemptions) {
		p("  preemptions: %s (the counter's increase in the window)\n", strconv.FormatFloat(s.Preemptions, 'f', -1, 64))
	}
	switch s.PrefixFrom {
	case "counters":
		p("  prefix cache: hit rate %s (%s of %s queried tokens, the engine's counters)\n", pct(100*s.PrefixHitRate),
			strconv.FormatFloat(s.PrefixHits, 'f', -1, 64), strconv.FormatFloat(s.PrefixQuery, 'f', -1, 64))
	case "gauge":
		p("  prefix cache: hit rate %s (mean of the engine's own rate gauge)\n", pct(100*s.PrefixHitRate))
	}
	for _, src := range s.Sources {
		fail := ""
		if src.Failures > 0 {
			fail = fmt.Sprintf(", last error: %s", src.LastError)
		}
		p("  scrapes of %s (shard %d): %d, %d failed%s\n", src.Source, src.Shard, src.Scrapes, src.Failures, fail)
	}
}

// summaryCols are the server columns of the summary row, on every row (a run that scraped
// nothing has zero counts and null figures), so that summaries of scraped and unscraped
// runs stack.
func (s *Server) summaryCols() []Column {
	if s == nil {
		nan := math.NaN()
		g := GaugeStats{Mean: nan, P99: nan, Max: nan}
		s = &Server{WindowStartS: nan, WindowEndS: nan, Running: g, Waiting: g, KVUsage: g, GPUUtil: g, GPUPowerW: g, GPUMemMiB: g,
			Preemptions: nan, PrefixHitRate: nan}
	}
	var scrapes, failures int64
	for _, src := range s.Sources {
		scrapes += src.Scrapes
		failures += src.Failures
	}
	return []Column{{"server_sources", int64(len(s.Sources))}, {"server_scrapes", scrapes}, {"server_scrape_failures", failures},
		{"server_running_mean", s.Running.Mean}, {"server_running_max", s.Running.Max},
		{"server_waiting_mean", s.Waiting.Mean}, {"server_waiting_max", s.Waiting.Max},
		{"server_kv_cache_usage_mean", s.KVUsage.Mean}, {"server_kv_cache_usage_p99", s.KVUsage.P99}, {"server_kv_cache_usage_max", s.KVUsage.Max},
		{"server_preemptions", s.Preemptions}, {"server_prefix_cache_hit_rate", s.PrefixHitRate},
		{"server_gpu_utilization_pct_mean", s.GPUUtil.Mean}, {"server_gpu_utilization_pct_max", s.GPUUtil.Max},
		{"server_gpu_power_w_mean", s.GPUPowerW.Mean}, {"server_gpu_power_w_max", s.GPUPowerW.Max}}
}

// serverPlots are the HTML report's server panels, on the time axis of the throughput,
// in-flight and TTFT plots (same x range, same window band): the engine's running and
// waiting requests beside the client's in-flight count, so the queue is seen to build
// before TTFT rises; and KV-cache usage with GPU utilisation, both in percent. A panel
// with nothing scraped is left out (the page's check wants marks in every plot).
func (r *Report) serverPlots(xhi float64, window func(*Plot)) []*Plot {
	if r.Server == nil {
		return nil
	}
	iv := r.Options.Interval.Seconds()
	var run, wait, infl, kv, util [][2]float64
	has := func(v float64) bool { return !math.IsNaN(v) }
	var anyQ, anyP bool
	for _, s := range r.Series {
		mid := s.StartS + iv/2
		run = append(run, [2]float64{mid, s.ServerRunning})
		wait = append(wait, [2]float64{mid, s.ServerWaiting})
		infl = append(infl, [2]float64{mid, s.Inflight})
		kv = append(kv, [2]float64{mid, 100 * s.KVUsage})
		util = append(util, [2]float64{mid, s.GPUUtil})
		anyQ = anyQ || has(s.ServerRunning) || has(s.ServerWaiting)
		anyP = anyP || has(s.KVUsage) || has(s.GPUUtil)
	}
	var out []*Plot
	if anyQ {
		hi := math.Max(plot.MaxOf(run, 1)+plot.MaxOf(wait, 1), plot.MaxOf(infl, 1))
		p := plot.New("plot-server-queue", "Engine: running and waiting requests (scraped), client in flight", "time since run start (s)", "requests", 0, xhi, false, 0, hi*1.1, false)
		window(p)
		p.Line(infl, "ref")
		p.Line(run, "s2")
		p.Line(wait, "s3")
		p.Legend([2]string{"s2", "running"}, [2]string{"s3", "waiting"}, [2]string{"ref", "in flight (client)"})
		out = append(out, p)
	}
	if anyP {
		p := plot.New("plot-server-kv", "Engine: KV-cache usage and GPU utilisation (scraped)", "time since run start (s)", "%", 0, xhi, false, 0, 125, false)
		window(p)
		p.HLine(100, "slo", "full")
		p.Line(kv, "s1")
		p.Line(util, "s3")
		p.Legend([2]string{"s1", "KV-cache usage"}, [2]string{"s3", "GPU utilisation"})
		out = append(out, p)
	}
	return out
}
