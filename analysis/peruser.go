package analysis

import (
	"math"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
)

// Speeds summarise a per-request rate where the slow end is the one that matters: mean,
// p50, and the low tail (p10, p1, min) over N requests. N == 0: no sample, every figure NaN.
type Speeds struct {
	N                       int64
	Mean, P50, P10, P1, Min float64
}

func summarizeSpeeds(xs []float64) Speeds {
	if len(xs) == 0 {
		nan := math.NaN()
		return Speeds{Mean: nan, P50: nan, P10: nan, P1: nan, Min: nan}
	}
	q := stats.Summarize(xs) // sorts xs; the mean is compensated
	return Speeds{N: q.N, Mean: q.Mean, P50: q.P50, P10: stats.Type7(xs, 0.10), P1: stats.Type7(xs, 0.01), Min: xs[0]}
}

// PerUser is the decode speed each ok request saw, the figure the field quotes as "tok/s
// per user" (docs/metrics.md, "Per-user speed"), over ok requests with output_tokens > 1
// and end_ns > first_token_ns:
//   - TokensPerS: output_tokens / (E2E − TTFT), in tokens per second;
//   - InvTPOT: 1 / TPOT = (output_tokens − 1) / (E2E − TTFT), the same with the first
//     token left out (NVIDIA AIPerf's output_token_throughput_per_user).
type PerUser struct {
	TokensPerS, InvTPOT Speeds
}

// perUser computes r.PerUser over d's ok requests.
func (r *Report) perUser(d *decode.Data) {
	var tok, inv []float64
	for i, s := range d.Status {
		if s != decode.StOK {
			continue
		}
		n := d.OutTokens[i]
		dec := d.End[i] - d.First[i]
		if n == decode.Null32 || n <= 1 || dec <= 0 {
			continue
		}
		sec := float64(dec) / 1e9
		tok = append(tok, float64(n)/sec)
		inv = append(inv, float64(n-1)/sec)
	}
	r.PerUser = PerUser{TokensPerS: summarizeSpeeds(tok), InvTPOT: summarizeSpeeds(inv)}
}
