package analysis

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/compress"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/internal/atomicfile"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// Format values of the files WriteParquetDir writes (schema metadata llmreplay.format).
const (
	SummaryFormat    = "summary/v1"
	TimeseriesFormat = "timeseries/v1"
)

// writeAtomic writes path through internal/atomicfile (a synced temporary file renamed
// into place, 0644 under the umask), so a failure never leaves a half-written file. The
// writer has no Close, so pqarrow's FileWriter cannot close it.
func writeAtomic(path string, write func(w io.Writer) error) error {
	if err := atomicfile.Write(path, write); err != nil {
		return fmt.Errorf("analysis: write %s: %w", path, err)
	}
	return nil
}

// runID names a report's run (ids joined with "+" when runs were pooled).
func (r *Report) runID() string {
	var ids []string
	seen := map[string]bool{}
	for _, m := range r.Runs {
		if !seen[m.RunID] {
			seen[m.RunID] = true
			ids = append(ids, m.RunID)
		}
	}
	return strings.Join(ids, "+")
}

// Column is one summary column: a float64 (null when NaN), int64, bool or string value.
type Column struct {
	name string
	v    any
}

func quantileCols(prefix string, q stats.Quantiles) []Column {
	nan := math.NaN()
	if q.N == 0 {
		q = stats.Quantiles{Mean: nan, P50: nan, P90: nan, P95: nan, P99: nan, P999: nan, Max: nan}
	}
	return []Column{{prefix + "_n", q.N}, {prefix + "_mean", q.Mean}, {prefix + "_p50", q.P50}, {prefix + "_p90", q.P90},
		{prefix + "_p95", q.P95}, {prefix + "_p99", q.P99}, {prefix + "_p99_9", q.P999}, {prefix + "_max", q.Max}}
}

// summaryCols is the flat summary row: the declared figures' columns (figures.go), then
// the other sections' with underscore-joined names (docs/metrics.md).
func (r *Report) summaryCols() []Column {
	cs := []Column{{"run_id", r.runID()}, {"files", strings.Join(r.Files, ",")}, {"run_start_unix_ns", r.BaseUnixNS}}
	cs = append(cs, r.summaryFigureCols()...)
	cs = append(cs, Column{"percentile_method", PercentileMethod}, Column{"warnings", strings.Join(r.Warnings, "\n")})
	nan := math.NaN()
	cs = append(cs, speedCols("per_user_tokens_per_s", r.PerUser.TokensPerS)...)
	cs = append(cs, speedCols("per_user_inv_tpot_per_s", r.PerUser.InvTPOT)...)
	// Closed loop: the same columns on every row (an open-loop row has closed_loop false,
	// zero counts and null figures), so open- and closed-loop summaries stack.
	c := r.Closed
	if c == nil {
		c = &ClosedLoop{RampUpS: nan, FirstWaveSendS: nan}
	}
	cs = append(cs, Column{"closed_loop", r.Closed != nil}, Column{"closed_loop_concurrency", int64(c.Concurrency)},
		Column{"closed_loop_ramp_up_s", c.RampUpS}, Column{"closed_loop_first_wave_requests", c.FirstWaveRequests},
		Column{"closed_loop_first_wave_send_s", c.FirstWaveSendS})
	cs = append(cs, quantileCols("closed_loop_first_wave_schedule_lateness_ms", c.FirstWaveLateness)...)
	cs = append(cs, quantileCols("closed_loop_steady_state_schedule_lateness_ms", c.SteadyLateness)...)
	// Conversations: likewise on every row (zero counts and null rates without them).
	pc := PrefixCache{CacheBucket: CacheBucket{HitRate: nan}, BestRate: nan}
	w := &SessionWaits{WaitedShare: nan}
	o := &TurnOverlap{Share: nan}
	if r.Conversations != nil {
		pc = r.Conversations.PrefixCache
		if r.Conversations.Overlap != nil {
			o = r.Conversations.Overlap
		}
		if r.Conversations.Sessions != nil {
			w = r.Conversations.Sessions
		}
	}
	cs = append(cs, Column{"prefix_cache_requests", pc.Requests}, Column{"prefix_cache_cached_tokens", pc.CachedTokens},
		Column{"prefix_cache_prompt_tokens", pc.PromptTokens}, Column{"prefix_cache_hit_rate", pc.HitRate}, Column{"prefix_cache_best_rate", pc.BestRate},
		Column{"session_turns", w.Turns}, Column{"session_waited", w.Waited}, Column{"session_waited_share", w.WaitedShare})
	cs = append(cs, quantileCols("session_wait_ms", w.Wait)...)
	cs = append(cs, Column{"session_waited_over_bound", w.OverBound}, Column{"reshaped_by_server", w.Reshaped})
	cs = append(cs, Column{"turn_overlap_turns", o.Turns}, Column{"turn_overlap_overlapped", o.Overlapped}, Column{"turn_overlap_share", o.Share})
	return append(cs, r.Server.summaryCols()...)
}

func speedCols(prefix string, s Speeds) []Column {
	return []Column{{prefix + "_n", s.N}, {prefix + "_mean", s.Mean}, {prefix + "_p50", s.P50}, {prefix + "_p10", s.P10},
		{prefix + "_p1", s.P1}, {prefix + "_min", s.Min}}
}

// WriteParquetDir writes dir/summary.parquet (one row per report) and dir/timeseries.parquet
// (one row per interval per report), creating dir if needed.
func WriteParquetDir(dir string, reps ...*Report) error {
	if len(reps) == 0 {
		return errors.New("analysis: no reports to write")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("analysis: %w", err)
	}
	// Summary: the column set is the same for every report.
	rows := make([][]Column, len(reps))
	for i, r := range reps {
		rows[i] = r.summaryCols()
	}
	if err := WriteColumns(filepath.Join(dir, "summary.parquet"), SummaryFormat, rows); err != nil {
		return err
	}

	tmd := arrow.NewMetadata([]string{results.MetaFormat}, []string{TimeseriesFormat})
	tsc := arrow.NewSchema([]arrow.Field{
		{Name: "run_id", Type: arrow.BinaryTypes.String},
		{Name: "start_s", Type: arrow.PrimitiveTypes.Float64},
		{Name: "interval_s", Type: arrow.PrimitiveTypes.Float64},
		{Name: "sent", Type: arrow.PrimitiveTypes.Int64},
		{Name: "completed", Type: arrow.PrimitiveTypes.Int64},
		{Name: "errors", Type: arrow.PrimitiveTypes.Int64},
		{Name: "dropped", Type: arrow.PrimitiveTypes.Int64},
		{Name: "inflight", Type: arrow.PrimitiveTypes.Float64},
		{Name: "output_tokens_per_s", Type: arrow.PrimitiveTypes.Float64},
		{Name: "ttft_p50_ms", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "ttft_p99_ms", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "server_running", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "server_waiting", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "server_kv_cache_usage", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "server_preemptions", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "server_gpu_utilization_pct", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "server_gpu_power_w", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	}, &tmd)
	tb := array.NewRecordBuilder(memory.DefaultAllocator, tsc)
	defer tb.Release()
	opt := func(k int, v float64) {
		if math.IsNaN(v) {
			tb.Field(k).AppendNull()
		} else {
			tb.Field(k).(*array.Float64Builder).Append(v)
		}
	}
	for _, r := range reps {
		id := r.runID()
		for _, p := range r.Series {
			tb.Field(0).(*array.StringBuilder).Append(id)
			tb.Field(1).(*array.Float64Builder).Append(p.StartS)
			tb.Field(2).(*array.Float64Builder).Append(r.Options.Interval.Seconds())
			tb.Field(3).(*array.Int64Builder).Append(p.Sent)
			tb.Field(4).(*array.Int64Builder).Append(p.Completed)
			tb.Field(5).(*array.Int64Builder).Append(p.Errors)
			tb.Field(6).(*array.Int64Builder).Append(p.Dropped)
			tb.Field(7).(*array.Float64Builder).Append(p.Inflight)
			tb.Field(8).(*array.Float64Builder).Append(p.OutputTokensPerS)
			opt(9, p.TTFTP50)
			opt(10, p.TTFTP99)
			for k, v := range []float64{p.ServerRunning, p.ServerWaiting, p.KVUsage, p.Preemptions, p.GPUUtil, p.GPUPowerW} {
				opt(11+k, v)
			}
		}
	}
	return writeRecord(filepath.Join(dir, "timeseries.parquet"), tb.NewRecord())
}

func writeRecord(path string, rec arrow.Record) error {
	defer rec.Release()
	return writeAtomic(path, func(w io.Writer) error {
		fw, err := pqarrow.NewFileWriter(rec.Schema(), w, parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Snappy)),
			pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
		if err != nil {
			return err
		}
		if err := fw.WriteBuffered(rec); err != nil {
			fw.Close()
			return err
		}
		return fw.Close()
	})
}
