package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// The median table: per-round ratios, medians over the runs that gave a figure, the
// verdicts against the targets, and a run without a server record shown as such.
func TestPrintSuite(t *testing.T) {
	fl := []*runSummary{{FloorPerChnk: 10}, {FloorPerChnk: 8}, nil}
	fid := func(cpu, late, sleep, own float64) *runSummary {
		return &runSummary{Requests: 100, Sent: 100, OK: 100, CPUPerToken: cpu, LateP99: late, SleeperP99: sleep,
			TTFTNomP99: 2, Server: serverJoin{OwnTTFTErr: dist{N: 100, P99: own}}, Goroutines: [2]int{3, 3}, FDs: [2]int{9, 9}}
	}
	un := []*runSummary{fid(12, 1.0, 0.9, 0.5), fid(12, 1.2, 0.9, 0.7), fid(20, 9, 1, 0.6)}
	un[2].ServerRecord = "no stamps"
	un[1].FDs[1] = 10 // one fd more after the run
	pn := []*runSummary{fid(10, 0.8, 0.5, 0.4), nil, fid(10, 0.9, 0.5, 0.4)}
	pn[2].OK = 99
	sw := &runSummary{SweepBest: 1500, Sweep: []sweepPt{{Rate: 1500, N: 10, OK: 10, LateP99: 3}, {Rate: 2000, N: 10, OK: 9, LateP99: 8}}}
	var b bytes.Buffer
	fm := []*runSummary{{FloorPerChnk: 4}, nil, {FloorPerChnk: 5}}
	printSuite(&b, fl, fm, un, pn, sw, 20, "1")
	out := b.String()
	row := func(name string) []string {
		t.Helper()
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, name) {
				return regexp.MustCompile(` {2,}`).Split(strings.TrimSpace(strings.TrimPrefix(l, name)), -1)
			}
		}
		t.Fatalf("no row %q in\n%s", name, out)
		return nil
	}
	check := func(name string, want ...string) {
		t.Helper()
		got := row(name)
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: got %q, want %q", name, got, want)
		}
	}
	// Rounds 1 and 2: 12/10 and 12/8; round 3 has no floor.
	check("unpinned: CPU per token / floor per chunk (same round)", "1.20 1.50 -", "1.35", "<= 1.3 NOT met")
	check("unpinned: CPU per token / io_uring+batching floor", "3.00 - 4.00", "3.50")
	check("unpinned: lateness p99 - sleeper p99, ms", "0.100 0.300 8.000", "0.300", "<= +0.2 NOT met")
	check("unpinned: replayer's own TTFT error p99, ms", "0.500 0.700 -", "0.600", "<= 1 met")
	check("pinned: schedule lateness p99, ms", "0.800 - 0.900", "0.850", "<= 1 met")
	check("pinned: TTFT - nominal p99, ms", "2.000 - 2.000", "2.000", "<= 3 met")
	check("unpinned: ok/sent/requests", "100/100/100 100/100/100 100/100/100", "all ok met")
	check("pinned: ok/sent/requests", "100/100/100 - 99/100/100", "all ok NOT met")
	check("unpinned: goroutines start>end, fds start>end", "3>3,9>9 3>3,9>10 3>3,9>9", "back to start NOT met")
	check("pinned: goroutines start>end, fds start>end", "3>3,9>9 - 3>3,9>9", "back to start met")
	check("sweep: highest rate, lateness p99 < 5 ms, all ok, req/s", "1500", ">= 1500 met")
	if !strings.Contains(out, "2000:8.000(not all ok)") {
		t.Errorf("sweep points not shown:\n%s", out)
	}
	if !strings.Contains(out, "server record unavailable (run 3 of the fidelity runs): no stamps") {
		t.Errorf("no note on the missing server record:\n%s", out)
	}
}
