package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/stats"
)

// strictCheck applies the report's client-limited verdict (analysis.ClientLimited, the one
// definition, over the steady state of a closed loop): with --strict a client-limited run is
// exit status 3. Without a report (rep
// nil) it decides by the same function over the run's own lateness values, and prints the
// warning the report would have.
func strictCheck(w io.Writer, rep *analysis.Report, sum *replay.Summary, strict bool) error {
	var lateness stats.Quantiles
	var bound time.Duration
	var limited bool
	what := "schedule lateness"
	if rep != nil {
		lateness, bound, limited = rep.Lateness, rep.Flags.MaxLateness, rep.Flags.ClientLimited
		if c := rep.Closed; c != nil {
			// A closed loop is judged on its steady state, after the first wave.
			lateness, what = c.SteadyLateness, "steady-state schedule lateness (after the closed loop's first wave)"
		}
	} else {
		lateness, bound = stats.Summarize(slices.Clone(sum.LatenessMS)), sum.MaxLateness
		if limited = analysis.ClientLimited(lateness, bound); limited {
			fmt.Fprintf(w, "WARNING: client-limited: schedule lateness p99 %.3f ms > %v: the endpoint got less load than asked\n", lateness.P99, bound)
		}
	}
	if strict && limited {
		return &exitError{code: 3, err: fmt.Errorf("replay: client-limited: %s p99 %.3f ms > --max-lateness %v", what, lateness.P99, bound)}
	}
	return nil
}
