package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/replay"
)

// strictCheck applies the report's client-limited verdict (analysis.ClientLimited, the one
// definition): with --strict a client-limited run is exit status 3. Without a report (rep
// nil) it decides by the same function over the run's own lateness values, and prints the
// warning the report would have.
func strictCheck(w io.Writer, rep *analysis.Report, sum *replay.Summary, strict bool) error {
	var lateness analysis.Quantiles
	var bound time.Duration
	var limited bool
	if rep != nil {
		lateness, bound, limited = rep.Lateness, rep.Flags.MaxLateness, rep.Flags.ClientLimited
	} else {
		lateness, bound = analysis.Summarize(slices.Clone(sum.LatenessMS)), sum.MaxLateness
		if limited = analysis.ClientLimited(lateness, bound); limited {
			fmt.Fprintf(w, "WARNING: client-limited: schedule lateness p99 %.3f ms > %v: the endpoint got less load than asked\n", lateness.P99, bound)
		}
	}
	if strict && limited {
		return &exitError{code: 3, err: fmt.Errorf("replay: client-limited: schedule lateness p99 %.3f ms > --max-lateness %v", lateness.P99, bound)}
	}
	return nil
}
