package analysis

import (
	"context"

	"github.com/llmreplay/llmreplay/analysis/decode"
)

// Load reads results files as decode.Load does, keeping from the metrics files the runs
// name the samples of the metrics the server section knows (serverMetrics): the one way
// analysis's callers load, so that no caller forgets the metrics the report reads.
func Load(ctx context.Context, opts decode.LoadOptions, paths ...string) (*decode.Data, error) {
	opts.Metrics = serverMetricNames
	return decode.Load(ctx, opts, paths...)
}

// serverMetricNames are serverMetrics' names in its order, so that a kept series' Metric
// indexes serverMetrics.
var serverMetricNames = func() []string {
	names := make([]string, len(serverMetrics))
	for i, m := range serverMetrics {
		names[i] = m.Name
	}
	return names
}()
