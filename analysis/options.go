// Package analysis turns llmreplay results files into the figures users quote: request
// counts, overall and sustained throughput, TTFT/TPOT/ITL/E2E and schedule-lateness
// percentiles, goodput and SLO attainment, token-count reconciliation, client-limited and
// overloaded flags, breakdowns by prompt and output length, and a time series; and renders
// them as text, JSON, Parquet and a self-contained HTML page. docs/metrics.md defines every
// figure. It reads results files by column name and knows nothing of the replayer.
//
// Use:
//
//	d, err := analysis.Load(ctx, analysis.LoadOptions{}, "results.parquet")
//	rep, err := analysis.Analyze(d, analysis.DefaultOptions())
//	rep.WriteText(os.Stdout)
//
// or analysis.AnalyzeFiles(ctx, analysis.DefaultOptions(), paths...) for both steps.
package analysis

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
)

// PercentileMethod names how every percentile in a report is computed. It is printed in the
// text report and documented in docs/metrics.md.
const PercentileMethod = stats.Type7Name + "; ITL over gaps rounded to 1 us"

// WarmupDetect asks Analyze to detect the warm-up (MSER-5, docs/metrics.md).
const WarmupDetect time.Duration = -1

// DefaultMaxLateness is the schedule-lateness p99 above which a run is client-limited,
// when neither the options nor the run metadata give one.
const DefaultMaxLateness = 10 * time.Millisecond

// Options control Analyze. The zero value asks for the defaults. Note that a zero Warmup
// means no warm-up is excluded; use WarmupDetect (or DefaultOptions) to detect it.
type Options struct {
	// SLO for goodput and attainment; when zero, the run's own --slo (metadata) is used.
	SLO SLO
	// Warmup excluded from the start of the steady-state window, counted from the first
	// request sent; WarmupDetect detects it.
	Warmup time.Duration
	// MaxLateness is the client-limited bound on schedule-lateness p99; 0 means the run's
	// max_lateness_ms, else DefaultMaxLateness.
	MaxLateness time.Duration
	// Interval of the time series and of the overload regression; 0 means 1 s. A positive
	// multiple of 10 ms.
	Interval time.Duration
	// PromptBuckets and OutputBuckets are the ascending inner edges of the length buckets;
	// nil means log-spaced (powers of two, merged to at most 8 buckets).
	PromptBuckets, OutputBuckets []int64
}

// DefaultOptions are the options `llmreplay analyze` starts from.
func DefaultOptions() Options { return Options{Warmup: WarmupDetect, Interval: time.Second} }

// Validate checks the options on their own.
func (o *Options) Validate() error {
	if o.Warmup < 0 && o.Warmup != WarmupDetect {
		return fmt.Errorf("warmup %v is negative", o.Warmup)
	}
	if o.MaxLateness < 0 {
		return fmt.Errorf("max lateness %v is negative", o.MaxLateness)
	}
	if o.Interval < 0 || o.Interval%time.Duration(decode.BinNS) != 0 {
		return fmt.Errorf("interval %v: must be a positive multiple of 10ms", o.Interval)
	}
	for _, b := range [][]int64{o.PromptBuckets, o.OutputBuckets} {
		if len(b) > 63 {
			return fmt.Errorf("%d bucket edges: at most 63", len(b))
		}
		for i, e := range b {
			if e < 1 || (i > 0 && e <= b[i-1]) {
				return fmt.Errorf("bucket edges %v: must be ascending positive integers", b)
			}
		}
	}
	return o.SLO.Validate()
}

// SLO is a set of latency objectives; a zero field is not an objective. A request meets the
// SLO when it is ok and meets every objective given (TPOT only applies to requests of more
// than one output token, AnswerTPOT to those of more than one answer token; a request
// without a first answer misses TTFA).
type SLO struct {
	TTFT, TPOT, E2E time.Duration
	// TTFA and AnswerTPOT are the reasoning figures' objectives (docs/metrics.md,
	// "Reasoning"): ttfa= and answer_tpot= in ParseSLO.
	TTFA, AnswerTPOT time.Duration
}

// IsZero reports whether no objective is set.
func (s SLO) IsZero() bool { return s == SLO{} }

// Validate rejects negative objectives.
func (s SLO) Validate() error {
	if s.TTFT < 0 || s.TPOT < 0 || s.E2E < 0 || s.TTFA < 0 || s.AnswerTPOT < 0 {
		return fmt.Errorf("slo %s: objectives must be positive", s)
	}
	return nil
}

// String formats the SLO the way ParseSLO reads it.
func (s SLO) String() string {
	var parts []string
	for _, p := range []struct {
		n string
		d time.Duration
	}{{"ttft", s.TTFT}, {"tpot", s.TPOT}, {"e2e", s.E2E}, {"ttfa", s.TTFA}, {"answer_tpot", s.AnswerTPOT}} {
		if p.d > 0 {
			parts = append(parts, p.n+"="+p.d.String())
		}
	}
	return strings.Join(parts, ",")
}

// ParseSLO reads "ttft=2s,tpot=100ms,e2e=30s,ttfa=3s,answer_tpot=50ms": any subset, comma-separated, each a Go
// duration or a bare number of milliseconds (vLLM's --goodput unit); ':' may stand for '='.
func ParseSLO(s string) (SLO, error) {
	var slo SLO
	s = strings.TrimSpace(s)
	if s == "" {
		return slo, nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			k, v, ok = strings.Cut(strings.TrimSpace(part), ":")
		}
		if !ok {
			return SLO{}, fmt.Errorf("slo %q: %q is not NAME=DURATION", s, part)
		}
		k = strings.ToLower(strings.TrimSpace(k))
		v = strings.TrimSpace(v)
		d, err := time.ParseDuration(v)
		if err != nil {
			ms, err2 := strconv.ParseFloat(v, 64)
			if err2 != nil {
				return SLO{}, fmt.Errorf("slo %q: %s: %q is not a duration (e.g. 2s, 150ms)", s, k, v)
			}
			d = time.Duration(ms * float64(time.Millisecond))
		}
		if d <= 0 {
			return SLO{}, fmt.Errorf("slo %q: %s must be positive", s, k)
		}
		if seen[k] {
			return SLO{}, fmt.Errorf("slo %q: %s given twice", s, k)
		}
		seen[k] = true
		switch k {
		case "ttft":
			slo.TTFT = d
		case "tpot":
			slo.TPOT = d
		case "e2e", "e2el":
			slo.E2E = d
		case "ttfa":
			slo.TTFA = d
		case "answer_tpot":
			slo.AnswerTPOT = d
		default:
			return SLO{}, fmt.Errorf("slo %q: unknown objective %q (want ttft, tpot, e2e, ttfa, answer_tpot)", s, k)
		}
	}
	return slo, nil
}

// ParseBuckets reads bucket edges: "256,1024,4096" for both breakdowns, or
// "prompt=256,1024,4096" / "output=64,256" for one. It returns the updated edges.
func ParseBuckets(s string, prompt, output []int64) ([]int64, []int64, error) {
	which, list, ok := strings.Cut(s, "=")
	if !ok {
		which, list = "both", s
	}
	var edges []int64
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		mult := int64(1)
		switch {
		case strings.HasSuffix(f, "k") || strings.HasSuffix(f, "K"):
			mult, f = 1024, f[:len(f)-1]
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v < 1 || v > 1<<40 {
			return prompt, output, fmt.Errorf("buckets %q: %q is not a positive token count", s, f)
		}
		edges = append(edges, v*mult)
	}
	if !slices.IsSorted(edges) || len(slices.Compact(slices.Clone(edges))) != len(edges) {
		return prompt, output, fmt.Errorf("buckets %q: edges must be strictly ascending", s)
	}
	switch strings.TrimSpace(which) {
	case "both":
		return edges, edges, nil
	case "prompt":
		return edges, output, nil
	case "output":
		return prompt, edges, nil
	}
	return prompt, output, errors.New("buckets " + strconv.Quote(s) + ": want EDGES, prompt=EDGES or output=EDGES")
}
