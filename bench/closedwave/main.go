// Command closedwave prints, for closed-loop results files, the first wave's send duration
// and the schedule lateness, measured the same way whatever build wrote them, for
// bench/ab-closed.sh:
//
//   - wave: the run clock at which the C-th request went out (C = the run's concurrency),
//     i.e. how long it took to put one request on each worker's connection;
//   - lateness p99 (type 7) of every sent request, and of the requests after the first C
//     sent (the steady state; older builds stamped a closed loop's scheduled_ns when a
//     worker took a request, so their lateness could not see the first wave's dials, and
//     this tool measures old and new builds alike).
//
// Usage: closedwave results.parquet...
package main

import (
	"fmt"
	"math"
	"os"
	"slices"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

func main() {
	for _, path := range os.Args[1:] {
		if err := report(path); err != nil {
			fmt.Fprintln(os.Stderr, "closedwave:", err)
			os.Exit(1)
		}
	}
}

func report(path string) error {
	res, meta, err := results.ReadFile(path)
	if err != nil {
		return err
	}
	c := meta.Concurrency
	var sent []*results.Result
	for i := range res {
		if res[i].SentNS != results.Null {
			sent = append(sent, &res[i])
		}
	}
	if c < 1 || len(sent) < c {
		return fmt.Errorf("%s: %d sent requests, concurrency %d: not a closed-loop run with a whole first wave", path, len(sent), c)
	}
	slices.SortFunc(sent, func(a, b *results.Result) int { return int(a.SentNS - b.SentNS) })
	late := func(rs []*results.Result) float64 {
		if len(rs) == 0 {
			return math.NaN()
		}
		x := make([]float64, len(rs))
		for i, r := range rs {
			x[i] = float64(r.SentNS-r.ScheduledNS) / 1e6
		}
		slices.Sort(x)
		return stats.Type7(x, 0.99)
	}
	at := func(q float64) float64 { return float64(sent[int(q*float64(c-1))].SentNS) / 1e6 }
	fmt.Printf("C %d: %d sent, wave %.3f ms, lateness p99 %.3f ms, after the wave p99 %.3f ms (wave's sends at p50 %.3f p90 %.3f p99 %.3f ms)\n",
		c, len(sent), float64(sent[c-1].SentNS)/1e6, late(sent), late(sent[c:]), at(0.5), at(0.9), at(0.99))
	return nil
}
