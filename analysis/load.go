package analysis

import (
	"context"

	"github.com/llmreplay/llmreplay/analysis/scraped"

	"github.com/llmreplay/llmreplay/analysis/decode"
)

// Load reads results files as decode.Load does, keeping from the metrics files the runs
// name the samples of the metrics the server section knows (scraped.Metrics): the one way
// analysis's callers load, so that no caller forgets the metrics the report reads.
func Load(ctx context.Context, opts decode.LoadOptions, paths ...string) (*decode.Data, error) {
	opts.Metrics = scraped.Names()
	return decode.Load(ctx, opts, paths...)
}
