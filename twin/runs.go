package twin

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/analysis/scraped"
	"github.com/llmreplay/llmreplay/internal/filehash"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
)

// Run is one results file read for a fit.
type Run struct {
	Path    string
	File    string // base name
	SHA256  string
	Holdout bool // predicted, not fit on
	Meta    results.RunMeta
	// Reqs are the run's ok generations, by sent time: the requests a fit reads.
	Reqs []Req
	// Rows is how many rows the file had; Reqs may be fewer (failed, dropped, unary).
	Rows int
	// Gauges are the engine's gauges from the run's metrics file, one value per scrape
	// (scraped.Align: summed over the endpoints), by role; empty without a metrics file.
	Gauges [scraped.NRoles][]scraped.Point
}

// Req is one ok generation of a run, its times in ns from the run start.
type Req struct {
	ID              int64
	Scheduled, Sent int64
	First, End      int64
	Prompt, Output  int
	Cached          int // prompt tokens from the prefix cache; -1 when the server did not say
	Chunks          []int64
	ChunkTokens     []int32 // nil: not said per chunk
}

// ReadRun reads the results file at path, and its metrics file when the run scraped.
func ReadRun(ctx context.Context, path string, holdout bool) (Run, error) {
	sum, err := filehash.SHA256(path)
	if err != nil {
		return Run{}, fmt.Errorf("twin: %w", err)
	}
	rows, meta, err := results.ReadFile(path)
	if err != nil {
		return Run{}, fmt.Errorf("twin: %w", err)
	}
	if meta.ShardCount > 1 {
		// A shard sees part of the engine's load: the batch it implies would be too small.
		return Run{}, fmt.Errorf("twin: %s is shard %d of %d of its run: fit on runs replayed unsharded", path, meta.ShardIndex, meta.ShardCount)
	}
	r := Run{Path: path, File: filepath.Base(path), SHA256: sum, Holdout: holdout, Meta: *meta, Rows: len(rows)}
	for i := range rows {
		x := &rows[i]
		if x.Status != results.StatusOK || x.Inputs != results.Null || x.SentNS == results.Null ||
			x.FirstTokenNS == results.Null || x.EndNS == results.Null || x.OutputTokens == results.Null || x.OutputTokens < 1 {
			continue
		}
		prompt := int(x.PromptTokens)
		if x.PromptTokensServer != results.Null {
			prompt = int(x.PromptTokensServer)
		}
		q := Req{ID: x.RequestID, Scheduled: x.ScheduledNS, Sent: x.SentNS, First: x.FirstTokenNS, End: x.EndNS,
			Prompt: max(prompt, 1), Output: int(x.OutputTokens), Cached: -1, ChunkTokens: x.ChunkTokens}
		if x.PromptTokensCached != results.Null {
			q.Cached = int(x.PromptTokensCached)
		}
		q.Chunks = make([]int64, len(x.ChunkNS))
		for k, c := range x.ChunkNS {
			q.Chunks[k] = x.SentNS + c
		}
		r.Reqs = append(r.Reqs, q)
	}
	slices.SortStableFunc(r.Reqs, func(a, b Req) int { return cmp.Compare(a.Sent, b.Sent) })
	if len(r.Reqs) == 0 {
		return r, fmt.Errorf("twin: %s: no ok generation among its %d rows: a fit needs streamed generations", path, len(rows))
	}
	if meta.MetricsFile != "" {
		d, err := analysis.Load(ctx, decode.LoadOptions{}, path)
		if err != nil {
			return r, fmt.Errorf("twin: %w", err)
		}
		if d.Server != nil {
			r.Gauges = scraped.Align(d.Server)
		}
	}
	return r, nil
}

// WriteResults writes a results file at path whose rows are what the engine's step model
// decided for reqs (sim.Simulate's answer res to them): each request sent at its arrival,
// one chunk per token at its model time, with ids from ids (nil: 0, 1, ...). Unserved
// requests have no row. It is how the twin's predictions meet `analyze`, and how tests
// make runs of a known engine without living through them.
func WriteResults(path string, meta results.RunMeta, reqs []sim.SimRequest, res []sim.SimResult, ids []int64) error {
	j, err := results.CreateJournal(path+".journal", &meta)
	if err != nil {
		return err
	}
	for i, s := range res {
		if !s.Served {
			continue
		}
		id := int64(i)
		if ids != nil {
			id = ids[i]
		}
		sent := int64(s.Arrival)
		r := results.NewResult(id, 0, sent, int32(reqs[i].Prompt), int32(reqs[i].Output))
		r.SentNS, r.FirstTokenNS, r.EndNS = sent, int64(s.First), int64(s.End)
		r.FirstAnswerNS = r.FirstTokenNS
		r.ChunkNS = make([]int64, len(s.Tokens))
		for k, t := range s.Tokens {
			r.ChunkNS[k] = int64(t) - sent
		}
		r.PromptTokensServer, r.OutputTokens, r.OutputTokensSource = int32(reqs[i].Prompt), int32(len(s.Tokens)), results.SourceUsage
		r.Status, r.HTTPStatus = results.StatusOK, 200
		r.PromptTokensCached = int32(s.Cached)
		if err := j.Add(r); err != nil {
			j.Close()
			return err
		}
	}
	if err := j.Close(); err != nil {
		return err
	}
	defer os.Remove(path + ".journal")
	_, err = results.ConvertJournal(path+".journal", path)
	return err
}

// SimulateRun simulates reqs on cfg (an open loop at their arrivals, or a closed loop at
// concurrency > 0) and writes the run's results file at path, meta's mode and
// concurrency set to match: a run of a known engine, made in model time.
func SimulateRun(path string, cfg sim.Config, reqs []sim.SimRequest, concurrency int, meta results.RunMeta) error {
	res, err := sim.Simulate(cfg, reqs, concurrency)
	if err != nil {
		return err
	}
	meta.Mode, meta.Concurrency = results.ModeOpen, 0
	if concurrency > 0 {
		meta.Mode, meta.Concurrency = results.ModeClosed, concurrency
	}
	return WriteResults(path, meta, reqs, res, nil)
}
