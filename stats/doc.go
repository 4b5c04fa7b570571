// Package stats holds the statistics behind llmreplay's figures, apart from what the
// figures mean: quantiles by one named method (Type7) and the reported summary of a
// sample (Summarize), a microsecond histogram for samples too many to keep (Hist), the
// seeded bootstrap with its percentile intervals, m-out-of-n and block variants and the
// change between two runs (Bootstrap, Compare), the time-series tools that find a run's
// warm-up and trends (MSER, SlopeHAC), and the search for the load where an endpoint stops
// keeping up (SearchKnee, SearchConcurrency, SaturationOf, BoundsOf).
//
// It imports the standard library and numerical modules only, nothing of llmreplay: the
// maths is read and tested without results files, and every figure printed under a
// method's name is computed by the one function of that name here. docs/metrics.md and
// docs/compare.md give the methods in words.
package stats
