package replay

import (
	"math"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
)

// TestSummaryPercentilesType7: the short summary's percentiles are the reports' (type 7),
// not nearest rank, and LatenessMS keeps the values for the client-limited decision.
func TestSummaryPercentilesType7(t *testing.T) {
	a := newSummary(results.ModeOpen, 0)
	for i := 1; i <= 100; i++ {
		a.add(&Result{Status: results.StatusOK, ScheduledNS: 0, SentNS: int64(101-i) * 1e6, FirstTokenNS: results.Null, EndNS: results.Null, OutputTokens: results.Null})
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
