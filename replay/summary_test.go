package replay

import (
	"math"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
)

// TestSummaryPercentilesType7: the short summary's percentiles are the reports' (type 7),
// not nearest rank, and LatenessMS keeps the values for the client-limited decision.
func TestSummaryPercentilesType7(t *testing.T) {
	a := newSummary(results.ModeOpen, 0)
	for i := 1; i <= 100; i++ {
		a.add(&results.Result{Status: results.StatusOK, ScheduledNS: 0, SentNS: int64(101-i) * 1e6, FirstTokenNS: results.Null, EndNS: results.Null, OutputTokens: results.Null})
	}
	s := a.finish()
	// Lateness 1..100 ms: type-7 p99 = 99 + 0.01 = 99.01 (nearest rank would give 99).
	if l := s.Lateness; l.N != 100 || math.Abs(l.P99-99.01) > 1e-9 || math.Abs(l.P50-50.5) > 1e-9 || math.Abs(l.P90-90.1) > 1e-9 || l.Max != 100 {
		t.Errorf("lateness %+v, want n 100, p50 50.5, p90 90.1, p99 99.01, max 100", l)
	}
	if len(s.LatenessMS) != 100 || s.LatenessMS[0] != 1 || s.LatenessMS[99] != 100 {
		t.Errorf("LatenessMS: %d values, %v..%v; want 100 sorted", len(s.LatenessMS), s.LatenessMS[0], s.LatenessMS[len(s.LatenessMS)-1])
	}
}

// TestSummaryClosedLoopFirstWave: in closed loop the requests scheduled at or before the
// last worker's start are the first wave (reported apart, with when its last was sent);
// the lateness the client-limited decision judges is the rest's.
func TestSummaryClosedLoopFirstWave(t *testing.T) {
	a := newSummary(results.ModeClosed, 0)
	a.closedLoop(100)
	for _, r := range []struct{ sched, sent int64 }{{0, 30e6}, {100, 20e6 + 100}, {101, 101 + 2e6}, {5e6, 5e6 + 4e6}, {7, results.Null}} {
		a.add(&results.Result{Status: results.StatusOK, ScheduledNS: r.sched, SentNS: r.sent, FirstTokenNS: results.Null, EndNS: results.Null, OutputTokens: results.Null})
	}
	s := a.finish()
	fw := s.FirstWave
	if fw == nil || fw.Requests != 3 || fw.SendNS != 30e6 || fw.Lateness.N != 2 || fw.Lateness.Max != 30 {
		t.Fatalf("first wave %+v, want 3 requests (one unsent), the last sent at 30 ms, lateness max 30 ms", fw)
	}
	if s.Lateness.N != 2 || s.Lateness.Max != 4 || len(s.LatenessMS) != 2 || s.LatenessMS[0] != 2 {
		t.Errorf("steady-state lateness %+v %v, want 2 values, 2 and 4 ms", s.Lateness, s.LatenessMS)
	}
}

// TestSummaryInputs: a run of requests with inputs (embeddings, rerank) is summarised by its
// ok requests' inputs and prompt tokens per second and their latency, not by an output it
// never had.
func TestSummaryInputs(t *testing.T) {
	a := newSummary(results.ModeOpen, 0)
	for i := range 4 {
		r := results.NewResult(int64(i), 0, 0, 100, 0)
		r.SentNS, r.EndNS, r.Inputs, r.Status = int64(i)*1e9/2, int64(i)*1e9/2+int64(i+1)*1e7, 8, results.StatusOK
		a.add(r)
	}
	bad := results.NewResult(9, 0, 0, 100, 0)
	bad.SentNS, bad.Inputs, bad.Status = 0, 8, results.StatusStreamError
	a.add(bad)
	var b strings.Builder
	s := a.finish()
	s.WriteText(&b)
	// Sent from 0 to 1.5 s, the last ending at 1.54 s: 32 inputs and 400 tokens in 1.54 s;
	// latencies 10, 20, 30, 40 ms.
	for _, want := range []string{"inputs: 32, 20.8 inputs/s; prompt: 400 tokens, 259.7 tok/s overall", "latency ms: p50 25.0  p90 37.0  p99 39.7  max 40.0  (n=4"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary %q\nwant %q", b.String(), want)
		}
	}
	if strings.Contains(b.String(), "output:") {
		t.Errorf("summary of a run without output speaks of output: %q", b.String())
	}
}
