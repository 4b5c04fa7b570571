// Package decode reads llmreplay results files (results/v1 Parquet) and the metrics files
// they name into Data, the columns analysis computes its figures from: the run and shard
// checks, the parallel decoding of row groups, each record's validation, the chunk lists
// read straight from their Parquet levels, and the kept samples of the metrics files. It
// decodes and validates; it computes no figure. A bad value is a *FieldError naming the
// file, row and column.
//
// Use:
//
//	d, err := decode.Load(ctx, decode.LoadOptions{}, "results.parquet")
//
// analysis.Load is Load with the metric names analysis's server section reads.
package decode
