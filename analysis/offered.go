package analysis

import "github.com/llmreplay/llmreplay/analysis/decode"

// Offered is the load the schedule asked for, as opposed to what the endpoint delivered.
type Offered struct {
	// Over the whole schedule: due requests (every record, dropped ones too) and their target
	// output tokens, divided by the span from the first to the last scheduled time.
	RequestsPerS, OutputTokensPerS float64
	// Within [startS, endS): requests scheduled in the window and their target output
	// tokens, divided by the window's length. Sweeps compare this with the sustained output
	// rate over the same steady-state window: an endpoint that keeps up delivers, at steady
	// state, the tokens it is asked for in any window.
	WindowRequestsPerS, WindowOutputTokensPerS float64
}

// OfferedLoad computes the offered load of d; startS and endS bound the window, in seconds on
// d's time axis (Report.Throughput.WindowStartS and WindowEndS). A window of zero or
// negative length leaves the window rates zero.
func OfferedLoad(d *decode.Data, startS, endS float64) Offered {
	var o Offered
	n := len(d.Scheduled)
	if n == 0 {
		return o
	}
	lo, hi := d.Scheduled[0], d.Scheduled[0]
	var tokens, winTokens, winReqs int64
	ws, we := int64(startS*1e9), int64(endS*1e9)
	for i, s := range d.Scheduled {
		lo, hi = min(lo, s), max(hi, s)
		t := int64(max(d.OutTarget[i], 0))
		tokens += t
		if s >= ws && s < we {
			winTokens += t
			winReqs++
		}
	}
	if span := float64(hi-lo) / 1e9; span > 0 {
		// n-1 gaps between n arrivals span the schedule; the tokens of all n are offered.
		o.RequestsPerS = float64(n-1) / span
		o.OutputTokensPerS = float64(tokens) * float64(n-1) / float64(n) / span
	}
	if w := endS - startS; w > 0 {
		o.WindowRequestsPerS = float64(winReqs) / w
		o.WindowOutputTokensPerS = float64(winTokens) / w
	}
	return o
}
