//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// targetAddedTTFTP99 is the most the proxy may add to TTFT p99, in ms, at 1,000 streamed
// requests/s on loopback: what a recording must cost for a team to leave it in front of
// production.
const targetAddedTTFTP99 = 0.2

// busyLatenessP99 is the schedule lateness p99, ms, above which a run says the machine was
// too busy for the figures to mean what they say: a replayer that sends requests this late
// also reads their first tokens late, by noise of the same size, and the proxy's tenths of
// a millisecond drown in it.
const busyLatenessP99 = 1.0

// runResult is one run, on one path. Times are ms unless named; CPU is in ns.
type runResult struct {
	Pair           int      `json:"pair"`
	Path           string   `json:"path"`
	Requests       int      `json:"requests"`
	Sent           int      `json:"sent"`
	OK             int      `json:"ok"`
	WarmupRequests int      `json:"warmup_requests"`
	WarmupOK       int      `json:"warmup_ok"`
	NotOK          []string `json:"not_ok,omitempty"`
	TTFTP50        float64  `json:"ttft_p50_ms"`
	TTFTP99        float64  `json:"ttft_p99_ms"`
	LatenessP99    float64  `json:"lateness_p99_ms"`
	Tokens         int64    `json:"output_tokens"`
	ReplayerCPU    int64    `json:"replayer_cpu_ns"`
	UpstreamCPU    int64    `json:"upstream_cpu_ns"`
	// The proxy's, on a proxy run: CPU during the measured replay (/proc, 10 ms steps),
	// CPU over its whole life (getrusage: its start, the warm-up and the files written at
	// SIGTERM included) and its peak RSS.
	ProxyCPU     int64      `json:"proxy_cpu_ns,omitempty"`
	ProxyLifeCPU int64      `json:"proxy_life_cpu_ns,omitempty"`
	ProxyMaxRSS  int64      `json:"proxy_max_rss_bytes,omitempty"`
	Recording    *recording `json:"recording,omitempty"`
	// ProxyCPUsAllowed is the proxy's CPU affinity as the run began (--proxy-cpus).
	ProxyCPUsAllowed string `json:"proxy_cpus_allowed,omitempty"`
	LoadAvg          string `json:"load_average"`
}

// recording is what a proxy run's folder held.
type recording struct {
	Forwarded   int64  `json:"forwarded"` // requests the replayer sent through the proxy
	TraceRows   int64  `json:"trace_rows"`
	ResultsRows int64  `json:"results_rows"`
	Problem     string `json:"problem,omitempty"`
}

// fill takes a measured replay's figures.
func (r *runResult) fill(sum *replay.Summary, replayerCPU, upstreamCPU time.Duration) {
	r.Requests, r.Sent, r.OK = int(sum.Requests), sum.Lateness.N, int(sum.ByStatus[results.StatusOK])
	r.TTFTP50, r.TTFTP99, r.LatenessP99 = sum.TTFT.P50, sum.TTFT.P99, sum.Lateness.P99
	r.Tokens = sum.OutputTok
	r.ReplayerCPU, r.UpstreamCPU = int64(replayerCPU), int64(upstreamCPU)
	r.LoadAvg = loadavg()
}

// pathSummary is one path's figures: medians over its runs.
type pathSummary struct {
	Runs                int     `json:"runs"`
	Requests            int     `json:"requests"` // measured and warm-up, every run
	OK                  int     `json:"ok"`
	TTFTP50             float64 `json:"ttft_p50_ms"`
	TTFTP99             float64 `json:"ttft_p99_ms"`
	LatenessP99         float64 `json:"lateness_p99_ms"`
	ReplayerCPUPerToken float64 `json:"replayer_cpu_per_token_us"`
	UpstreamCPUPerToken float64 `json:"upstream_cpu_per_token_us"`
}

// report is the benchmark's result.
type report struct {
	Config *config `json:"config"`
	Proxy  string  `json:"proxy_command"`
	// UpstreamCPUs and ReplayerCPUs are the processes' CPU affinity.
	UpstreamCPUs string      `json:"upstream_cpus_allowed"`
	ReplayerCPUs string      `json:"replayer_cpus_allowed"`
	Direct       pathSummary `json:"direct"`
	Proxied      pathSummary `json:"proxy"`
	// AddedTTFTP50 and AddedTTFTP99 are the medians over pairs of (proxy run's figure −
	// direct run's figure): what the proxy adds, each pair measured under the same load of
	// the machine.
	AddedTTFTP50       float64 `json:"added_ttft_p50_ms"`
	AddedTTFTP99       float64 `json:"added_ttft_p99_ms"`
	TargetAddedTTFTP99 float64 `json:"target_added_ttft_p99_ms"`
	MeetsTarget        bool    `json:"meets_target"`
	// The proxy's CPU during the measured replays per streamed token and per request
	// (medians over its runs), its CPU over a whole run's life (median) and its peak RSS
	// (the largest of its runs).
	ProxyCPUPerToken   float64  `json:"proxy_cpu_per_token_us"`
	ProxyCPUPerRequest float64  `json:"proxy_cpu_per_request_us"`
	ProxyLifeCPU       int64    `json:"proxy_life_cpu_ns"`
	ProxyPeakRSS       int64    `json:"proxy_peak_rss_bytes"`
	AllOK              bool     `json:"all_ok"`
	Problems           []string `json:"problems,omitempty"`
	// Warnings say why figures may not mean what they say (a busy machine, few pairs);
	// they do not fail the run.
	Warnings []string    `json:"warnings,omitempty"`
	Runs     []runResult `json:"runs"`
}

// summarize makes the report from the runs, in the order they ran.
func summarize(c *config, runs []runResult) *report {
	rep := &report{Config: c, TargetAddedTTFTP99: targetAddedTTFTP99, AllOK: true, Runs: runs}
	rep.Direct = pathOf(runs, pathDirect)
	rep.Proxied = pathOf(runs, pathProxy)
	direct := map[int]runResult{}
	for _, r := range runs {
		if r.Path == pathDirect {
			direct[r.Pair] = r
		}
	}
	var d50, d99, cpuTok, cpuReq, life []float64
	for _, r := range runs {
		if r.OK < r.Requests || r.WarmupOK < r.WarmupRequests {
			rep.AllOK = false
			rep.Problems = append(rep.Problems, fmt.Sprintf("pair %d, %s: %d of %d requests ok (warm-up: %d of %d)", r.Pair, r.Path, r.OK, r.Requests, r.WarmupOK, r.WarmupRequests))
		}
		if r.LatenessP99 > busyLatenessP99 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("pair %d, %s: schedule lateness p99 %.3f ms > %.1f ms: the machine was too busy for tenths of a ms to be the proxy's (load average %s)", r.Pair, r.Path, r.LatenessP99, busyLatenessP99, r.LoadAvg))
		}
		if r.Recording != nil && r.Recording.Problem != "" {
			rep.Problems = append(rep.Problems, fmt.Sprintf("pair %d, the proxy's recording: %s", r.Pair, r.Recording.Problem))
		}
		if r.Path != pathProxy {
			continue
		}
		if d, ok := direct[r.Pair]; ok {
			d50 = append(d50, r.TTFTP50-d.TTFTP50)
			d99 = append(d99, r.TTFTP99-d.TTFTP99)
		}
		cpuTok = append(cpuTok, perUnit(r.ProxyCPU, r.Tokens))
		cpuReq = append(cpuReq, perUnit(r.ProxyCPU, int64(r.Sent)))
		life = append(life, float64(r.ProxyLifeCPU))
		rep.ProxyPeakRSS = max(rep.ProxyPeakRSS, r.ProxyMaxRSS)
	}
	if len(d99) < 3 {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%d pairs: the medians of fewer than 3 pairs are a single run's figures, noise included", len(d99)))
	}
	rep.AddedTTFTP50, rep.AddedTTFTP99 = median(d50), median(d99)
	rep.MeetsTarget = len(d99) > 0 && rep.AddedTTFTP99 <= targetAddedTTFTP99
	rep.ProxyCPUPerToken, rep.ProxyCPUPerRequest = median(cpuTok), median(cpuReq)
	rep.ProxyLifeCPU = int64(median(life))
	return rep
}

func pathOf(runs []runResult, path string) pathSummary {
	var s pathSummary
	var p50, p99, late, rep, up []float64
	for _, r := range runs {
		if r.Path != path {
			continue
		}
		s.Runs++
		s.Requests += r.Requests + r.WarmupRequests
		s.OK += r.OK + r.WarmupOK
		p50, p99, late = append(p50, r.TTFTP50), append(p99, r.TTFTP99), append(late, r.LatenessP99)
		rep, up = append(rep, perUnit(r.ReplayerCPU, r.Tokens)), append(up, perUnit(r.UpstreamCPU, r.Tokens))
	}
	s.TTFTP50, s.TTFTP99, s.LatenessP99 = median(p50), median(p99), median(late)
	s.ReplayerCPUPerToken, s.UpstreamCPUPerToken = median(rep), median(up)
	return s
}

// perUnit is ns of CPU per unit, in µs (0 for no units).
func perUnit(ns int64, units int64) float64 {
	if units <= 0 {
		return 0
	}
	return float64(ns) / 1e3 / float64(units)
}

// median is the type-7 median of x (the mean of the middle two for an even count), 0 for
// none.
func median(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	s := slices.Clone(x)
	slices.Sort(s)
	return stats.Type7(s, 0.5)
}

// failure is the error run returns after printing the report: nil when every request was
// ok on both paths and every recording passed its check.
func (rep *report) failure() error {
	if len(rep.Problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(rep.Problems, "; "))
}

// text prints the report for people.
func (rep *report) text(w io.Writer) {
	c := rep.Config
	fmt.Fprintf(w, "recordbench: %.0f streamed requests/s (Poisson), %d pairs of %v runs (each after a %v warm-up), %d prompt and %d output tokens a request; upstream TTFT %v, ITL %v\n",
		c.Rate, c.Pairs, c.Duration, c.Warmup, c.PromptTokens, c.OutputTokens, c.TTFT, c.ITL)
	fmt.Fprintf(w, "  proxy: %s\n", rep.Proxy)
	proxyCPUs := "?"
	for _, r := range rep.Runs {
		if r.ProxyCPUsAllowed != "" {
			proxyCPUs = r.ProxyCPUsAllowed
		}
	}
	fmt.Fprintf(w, "  three processes: the upstream on CPUs %s, the proxy on CPUs %s, the replayer on CPUs %s; load average at the end %s\n\n",
		rep.UpstreamCPUs, proxyCPUs, cpusAllowed("self"), loadavg())
	fmt.Fprintf(w, "  %-34s %10s %10s %10s\n", "medians over pairs", "direct", "proxy", "added")
	fmt.Fprintf(w, "  %-34s %10.3f %10.3f %10.3f\n", "TTFT p50 ms", rep.Direct.TTFTP50, rep.Proxied.TTFTP50, rep.AddedTTFTP50)
	verdict := "met"
	if !rep.MeetsTarget {
		verdict = "NOT MET"
	}
	fmt.Fprintf(w, "  %-34s %10.3f %10.3f %10.3f   target added <= %.1f: %s\n", "TTFT p99 ms", rep.Direct.TTFTP99, rep.Proxied.TTFTP99, rep.AddedTTFTP99, rep.TargetAddedTTFTP99, verdict)
	fmt.Fprintf(w, "  %-34s %10.3f %10.3f\n", "schedule lateness p99 ms", rep.Direct.LatenessP99, rep.Proxied.LatenessP99)
	fmt.Fprintf(w, "  %-34s %10.2f %10.2f\n", "replayer CPU µs/token", rep.Direct.ReplayerCPUPerToken, rep.Proxied.ReplayerCPUPerToken)
	fmt.Fprintf(w, "  %-34s %10.2f %10.2f\n", "upstream CPU µs/token", rep.Direct.UpstreamCPUPerToken, rep.Proxied.UpstreamCPUPerToken)
	fmt.Fprintf(w, "  %-34s %10s %10s\n", "requests ok (warm-ups included)", fmt.Sprintf("%d/%d", rep.Direct.OK, rep.Direct.Requests), fmt.Sprintf("%d/%d", rep.Proxied.OK, rep.Proxied.Requests))
	fmt.Fprintf(w, "\n  proxy CPU during the measured replays: %.2f µs per streamed token (the replayer's: %.2f), %.1f µs per request\n",
		rep.ProxyCPUPerToken, rep.Proxied.ReplayerCPUPerToken, rep.ProxyCPUPerRequest)
	fmt.Fprintf(w, "  proxy CPU over a run's life (start, warm-up, the files written at SIGTERM): %v; peak RSS %.1f MB\n",
		time.Duration(rep.ProxyLifeCPU).Round(time.Millisecond), float64(rep.ProxyPeakRSS)/(1<<20))
	fmt.Fprintln(w, "\n  runs:")
	for _, r := range rep.Runs {
		fmt.Fprintf(w, "    pair %d %-6s %d/%d ok, TTFT p50 %.3f p99 %.3f ms, lateness p99 %.3f ms, replayer %.2f µs/token",
			r.Pair, r.Path, r.OK, r.Requests, r.TTFTP50, r.TTFTP99, r.LatenessP99, perUnit(r.ReplayerCPU, r.Tokens))
		if r.Path == pathProxy {
			fmt.Fprintf(w, ", proxy %.2f µs/token, peak RSS %.1f MB", perUnit(r.ProxyCPU, r.Tokens), float64(r.ProxyMaxRSS)/(1<<20))
		}
		if r.Recording != nil {
			fmt.Fprintf(w, ", recorded %d trace and %d results rows for %d requests", r.Recording.TraceRows, r.Recording.ResultsRows, r.Recording.Forwarded)
		}
		fmt.Fprintf(w, "; load %s\n", r.LoadAvg)
		for _, why := range r.NotOK {
			fmt.Fprintf(w, "      NOT OK: %s\n", why)
		}
	}
	for _, p := range rep.Warnings {
		fmt.Fprintf(w, "  WARNING: %s\n", p)
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "  PROBLEM: %s\n", p)
	}
}

// cpusAllowed is a process's CPU affinity (Cpus_allowed_list in /proc/PID/status; pid
// "self" for this one), what taskset really gave it.
func cpusAllowed(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
