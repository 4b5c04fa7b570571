package analysis

import "testing"

// What the external tests (package analysis_test, compare_test.go: compare's view of this
// package's figures, which package analysis cannot import) use of the internal ones.

// Row is a hand-built results row (fixture_test.go).
type Row = row

var (
	WriteResults    = writeResults
	TestRunMeta     = testRun
	AgentRun        = agentRun
	AgentMeta       = agentMeta
	ReasoningRows   = reasoningRows
	WantReasoning   = wantReasoning
	NoReasoningRuns = noReasoningRuns
	SameFloat       = sameFloat
	Nearly          = nearly
)

// AddFigure declares f for the rest of the test t.
func AddFigure(t *testing.T, f Figure) {
	saved := reportFigures
	reportFigures = append(append([]Figure(nil), reportFigures...), f)
	t.Cleanup(func() { reportFigures = saved })
}
