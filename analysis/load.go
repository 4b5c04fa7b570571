package analysis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/llmreplay/llmreplay/internal/filekind"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// statuses are the contract's statuses in its order; a request's status is stored as its
// index, named by the st* constants.
var statuses = results.Statuses()

const (
	stOK uint8 = iota
	stHTTPError
	stTimeout
	stTransportError
	stStreamError
	stDropped
	stCanceled
)

// binNS is the resolution at which output tokens are attributed to time: every chunk's
// tokens go into the 10 ms bin in which the chunk arrived. Window bounds are snapped to this
// grid, so the sustained rate counts exactly the tokens that arrived between the printed bounds.
const binNS = int64(10e6)

// MaxSpan bounds the time axis: every *_ns offset must lie in [0, MaxSpan) from the run
// start. It keeps the 10 ms token bins of a run under 140 MB and makes a corrupt offset an
// error instead of an allocation of the size it claims.
const MaxSpan = 48 * time.Hour

// null marks a missing int64 (sent_ns, first_token_ns, end_ns) or int32 value in Data's
// columns. Not results.Null (-1): analysis validates what it reads, and -1 in a file is a
// bad value to report, not a null.
const (
	null64 = math.MinInt64
	null32 = math.MinInt32
)

// LoadOptions control Load.
type LoadOptions struct {
	// AllowMixed pools files of different runs (different run_id) on absolute time instead
	// of refusing them.
	AllowMixed bool
	// AllowPartial analyses the shards given even when some shards of their run are
	// missing (the report then warns); otherwise Load refuses an incomplete run.
	AllowPartial bool
	// BatchSize is the number of rows decoded per Arrow record; 0 means 16Ki.
	BatchSize int64
	// Workers is how many row groups are decoded at once; 0 means GOMAXPROCS, at most 4.
	Workers int
}

// Data is the part of one or more results files that analysis keeps: per-request scalars as
// columns (about 60 bytes a request), the inter-chunk gaps of ok requests (4 bytes a chunk)
// and the output tokens of ok requests binned at 10 ms by arrival. Chunk lists themselves are
// read batch by batch and never kept.
type Data struct {
	Files []string          // as given to Load
	Runs  []results.RunMeta // one per file, in Files order
	// Mixed is set when files of different runs were pooled (LoadOptions.AllowMixed).
	Mixed bool
	// ShiftNS is, per file, the offset added to its *_ns columns to put every file on one
	// time axis whose zero is the earliest run_start_unix_ns.
	ShiftNS []int64
	// BaseUnixNS is the wall-clock time of the common time axis's zero.
	BaseUnixNS int64
	// fileEnd is, per file, one past its last row's index in the per-request columns.
	fileEnd []int

	// Per request, in file order (null64/null32 for nulls).
	scheduled, sent, first, end   []int64
	prompt, promptServer          []int32
	outTarget, outTokens          []int32
	outSource                     []uint8 // 0 none, 1 usage, 2 tokenizer
	status                        []uint8
	nChunks                       []int32
	chunkTokSum                   []int64 // sum of chunk_tokens; -1 when chunk_tokens is null
	firstChunkMismatch, hasChunkT int64

	// Conversations (results revision 1.1), per request; nil when no file given holds a
	// value in the column (a file older than 1.1, or an open-loop run without sessions
	// or cached counts), so such runs cost no memory for them.
	sessionID, sessionWait []int64
	turn, cached           []int32

	// ITL samples of ok requests: every gap between consecutive chunks, and per token (a gap
	// before a chunk of k tokens counts k times as gap/k) where chunk_tokens are known.
	itl, itlTok      stats.Hist
	buf              bufTally  // the buffered-stream evidence (buffered.go)
	multiTokenChunks bool      // some chunk_tokens entry is above 1
	tokenBins        []float64 // output tokens of ok requests whose chunk arrived in [i*binNS, (i+1)*binNS)

	// server: the known samples of the metrics files the runs name (RunMeta.MetricsFile);
	// nil when no file names one.
	server *serverData
}

// N returns the number of requests.
func (d *Data) N() int { return len(d.status) }

// FieldError is a bad value in a results file: the file, 0-based row and column name.
type FieldError struct {
	File  string
	Row   int64
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("analysis: read %s row %d: %s: %v", e.File, e.Row, e.Field, e.Err)
}
func (e *FieldError) Unwrap() error { return e.Err }

// ErrPartialRun is returned by Load when shards of a run are missing and
// LoadOptions.AllowPartial is false.
var ErrPartialRun = errors.New("incomplete run")

// ErrMixedRuns is returned by Load when files belong to different runs and
// LoadOptions.AllowMixed is false.
var ErrMixedRuns = errors.New("results files belong to different runs (use --allow-mixed to pool them)")

// Load reads one or more results files (results/v1 Parquet). Shards of one run (same
// run_id) merge on absolute time; files of different runs are refused unless
// opts.AllowMixed, in which case they are pooled on absolute time (run_start_unix_ns).
func Load(ctx context.Context, opts LoadOptions, paths ...string) (*Data, error) {
	if len(paths) == 0 {
		return nil, errors.New("analysis: no results files given")
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 16 << 10
	}
	d := &Data{Files: paths}
	type opened struct {
		f  *os.File
		pr *file.Reader
		fr *pqarrow.FileReader
	}
	var ofs []opened
	defer func() {
		for _, o := range ofs {
			o.pr.Close()
		}
	}()
	for _, p := range paths {
		pr, err := file.OpenParquetFile(p, false, file.WithReadProps(readProps()))
		if err != nil {
			if k, ok := filekind.OfFile(p); ok && k != filekind.Parquet {
				return nil, fmt.Errorf("analysis: open %s: %s", p, filekind.Mismatch(k, "a results file (Parquet)", p))
			}
			return nil, fmt.Errorf("analysis: open %s: %w", p, err)
		}
		fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: opts.BatchSize}, memory.DefaultAllocator)
		if err != nil {
			pr.Close()
			return nil, fmt.Errorf("analysis: open %s: %w", p, err)
		}
		ofs = append(ofs, opened{pr: pr, fr: fr})
		meta, err := readMeta(p, pr)
		if err != nil {
			return nil, err
		}
		d.Runs = append(d.Runs, meta)
	}
	if err := d.checkRuns(opts.AllowMixed); err != nil {
		return nil, err
	}
	if miss := d.missingShards(); len(miss) > 0 && !opts.AllowPartial {
		return nil, fmt.Errorf("analysis: %s: shards %s of the run are missing: give every shard's file, or --allow-partial to analyse these alone: %w",
			strings.Join(paths, ", "), strings.Join(miss, ", "), ErrPartialRun)
	}
	// Reserve the per-request columns up front from the Parquet metadata.
	var rows int64
	for _, o := range ofs {
		rows += max(o.pr.NumRows(), 0)
	}
	if rows > 1<<31 {
		return nil, fmt.Errorf("analysis: %d rows: more than analysis holds in memory", rows)
	}
	d.alloc(int(rows))
	for k, name := range optionalColumns {
		for _, o := range ofs {
			if hasValues(o.pr, name) {
				d.allocOptional(k, int(rows))
				break
			}
		}
	}
	base := 0
	if opts.Workers <= 0 {
		opts.Workers = min(runtime.GOMAXPROCS(0), 4)
	}
	d.BaseUnixNS = d.Runs[0].RunStartUnixNS
	for _, r := range d.Runs {
		d.BaseUnixNS = min(d.BaseUnixNS, r.RunStartUnixNS)
	}
	for i, o := range ofs {
		d.ShiftNS = append(d.ShiftNS, d.Runs[i].RunStartUnixNS-d.BaseUnixNS)
		if err := d.readFile(ctx, paths[i], o.pr, o.fr, d.ShiftNS[i], base, opts); err != nil {
			return nil, err
		}
		base += int(o.pr.NumRows())
		d.fileEnd = append(d.fileEnd, base)
	}
	if err := d.loadServer(ctx, opts); err != nil {
		return nil, err
	}
	return d, nil
}

// alloc sizes the per-request columns for n requests; row groups are decoded straight into
// their rows.
func (d *Data) alloc(n int) {
	d.scheduled, d.sent, d.first, d.end = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	d.prompt, d.promptServer, d.outTarget, d.outTokens = make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	d.outSource, d.status = make([]uint8, n), make([]uint8, n)
	d.nChunks, d.chunkTokSum = make([]int32, n), make([]int64, n)
}

// optionalColumns are the revision-1.1 columns analysis reads when a file has them (an
// older file reads them as null), in the order of the o* constants.
var optionalColumns = []string{results.ColSessionID, results.ColTurn, results.ColSessionWaitNS, results.ColPromptTokensCached}

const (
	oSessionID = iota
	oTurn
	oSessionWait
	oCached
)

// allocOptional sizes the k-th optional column for n requests, every entry null.
func (d *Data) allocOptional(k, n int) {
	fill64 := func() []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = null64
		}
		return s
	}
	fill32 := func() []int32 {
		s := make([]int32, n)
		for i := range s {
			s[i] = null32
		}
		return s
	}
	switch k {
	case oSessionID:
		d.sessionID = fill64()
	case oTurn:
		d.turn = fill32()
	case oSessionWait:
		d.sessionWait = fill64()
	case oCached:
		d.cached = fill32()
	}
}

// optional returns d's k-th optional column (nil when not allocated).
func (d *Data) optional64(k int) []int64 {
	if k == oSessionID {
		return d.sessionID
	}
	return d.sessionWait
}

func (d *Data) optional32(k int) []int32 {
	if k == oTurn {
		return d.turn
	}
	return d.cached
}

// leafIndex returns the Parquet leaf index of the named top-level column, or -1.
func leafIndex(pr *file.Reader, name string) int {
	sc := pr.MetaData().Schema
	for i := 0; i < sc.NumColumns(); i++ {
		if c := sc.Column(i); c.ColumnPath().String() == name {
			return i
		}
	}
	return -1
}

// hasValues reports whether the file has the named (flat, nullable) column with a value in
// some row: false when it lacks the column or when every row group's statistics say it is
// all null; true when a statistic is missing (the column is then read).
func hasValues(pr *file.Reader, name string) bool {
	leaf := leafIndex(pr, name)
	if leaf < 0 {
		return false
	}
	for g := 0; g < pr.NumRowGroups(); g++ {
		rg := pr.MetaData().RowGroup(g)
		md, err := rg.ColumnChunk(leaf)
		if err != nil {
			return true
		}
		ok, _ := md.StatsSet()
		if !ok {
			return true
		}
		st, err := md.Statistics()
		if err != nil || !st.HasNullCount() || st.NullCount() != rg.NumRows() {
			return true
		}
	}
	return false
}

// worker holds what one decoding goroutine accumulates over the row groups it reads.
type worker struct {
	itl, itlTok                   stats.Hist
	buf                           bufTally
	bins                          []float64
	firstChunkMismatch, hasChunkT int64

	// Conversations (results revision 1.1), per request; nil when no file given holds a
	// value in the column (a file older than 1.1, or an open-loop run without sessions
	// or cached counts), so such runs cost no memory for them.
	sessionID, sessionWait []int64
	turn, cached           []int32
	multiTokenChunks       bool
}

// part is one row group being decoded into rows [at, end) of d.
type part struct {
	d       *Data
	w       *worker
	at, end int
}

// merge adds a worker's samples, token bins and counters to d.
func (d *Data) mergeWorker(w *worker) {
	d.itl.Merge(&w.itl)
	d.itlTok.Merge(&w.itlTok)
	d.buf.merge(&w.buf)
	d.firstChunkMismatch += w.firstChunkMismatch
	d.hasChunkT += w.hasChunkT
	d.multiTokenChunks = d.multiTokenChunks || w.multiTokenChunks
	if len(d.tokenBins) < len(w.bins) {
		d.tokenBins = append(d.tokenBins, make([]float64, len(w.bins)-len(d.tokenBins))...)
	}
	for i, v := range w.bins {
		d.tokenBins[i] += v
	}
}

func readMeta(path string, pr *file.Reader) (results.RunMeta, error) {
	var m results.RunMeta
	kv := pr.MetaData().KeyValueMetadata()
	// pqarrow stores the Arrow schema (and its metadata) under ARROW:schema; the
	// llmreplay keys are copied into the Parquet key-value metadata as well.
	format := kv.FindValue(results.MetaFormat)
	if format == nil {
		fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 1}, memory.DefaultAllocator)
		if err == nil {
			if sc, err := fr.Schema(); err == nil {
				md := sc.Metadata()
				if i := md.FindKey(results.MetaFormat); i >= 0 {
					v := md.Values()[i]
					format = &v
				}
				if i := md.FindKey(results.MetaRun); i >= 0 {
					v := md.Values()[i]
					return parseRun(path, format, &v)
				}
			}
		}
		return m, fmt.Errorf("analysis: read %s: schema metadata %s missing: not an llmreplay results file", path, results.MetaFormat)
	}
	return parseRun(path, format, kv.FindValue(results.MetaRun))
}

func parseRun(path string, format, run *string) (results.RunMeta, error) {
	var m results.RunMeta
	if format == nil || *format != results.Format {
		got := "none"
		if format != nil {
			got = *format
		}
		if got == "trace/v1" {
			return m, fmt.Errorf("analysis: read %s: this is a trace (%s = %q), not a replay's results file; replay it with `llmreplay replay --trace %s`", path, results.MetaFormat, got, path)
		}
		return m, fmt.Errorf("analysis: read %s: schema metadata %s = %q, want %q", path, results.MetaFormat, got, results.Format)
	}
	if run == nil {
		return m, fmt.Errorf("analysis: read %s: schema metadata %s missing", path, results.MetaRun)
	}
	if err := json.Unmarshal([]byte(*run), &m); err != nil {
		return m, fmt.Errorf("analysis: read %s: schema metadata %s: %w", path, results.MetaRun, err)
	}
	if m.ShardCount <= 0 {
		m.ShardCount = 1
	}
	if m.ShardCount > 1<<16 {
		return m, fmt.Errorf("analysis: read %s: schema metadata %s: shard_count %d is implausible", path, results.MetaRun, m.ShardCount)
	}
	if m.ShardIndex < 0 || m.ShardIndex >= m.ShardCount {
		return m, fmt.Errorf("analysis: read %s: schema metadata %s: shard_index %d outside [0, %d)", path, results.MetaRun, m.ShardIndex, m.ShardCount)
	}
	return m, nil
}

// checkRuns refuses files of different runs (unless allowMixed) and duplicate shards.
func (d *Data) checkRuns(allowMixed bool) error {
	first := d.Runs[0]
	seen := map[string]map[int]string{}
	for i, r := range d.Runs {
		if r.RunID != first.RunID || r.ShardCount != first.ShardCount {
			if !allowMixed {
				return fmt.Errorf("analysis: %s (run %q) and %s (run %q): %w", d.Files[0], first.RunID, d.Files[i], r.RunID, ErrMixedRuns)
			}
			d.Mixed = true
		}
		if seen[r.RunID] == nil {
			seen[r.RunID] = map[int]string{}
		}
		if prev, dup := seen[r.RunID][r.ShardIndex]; dup {
			if abs(prev) == abs(d.Files[i]) {
				return fmt.Errorf("analysis: %s given twice", d.Files[i])
			}
			return fmt.Errorf("analysis: %s and %s are both shard %d/%d of run %q", prev, d.Files[i], r.ShardIndex, r.ShardCount, r.RunID)
		}
		seen[r.RunID][r.ShardIndex] = d.Files[i]
	}
	return nil
}

func abs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// missingShards lists, per run, the shards not given.
func (d *Data) missingShards() []string {
	have := map[string]map[int]bool{}
	count := map[string]int{}
	for _, r := range d.Runs {
		if have[r.RunID] == nil {
			have[r.RunID] = map[int]bool{}
		}
		have[r.RunID][r.ShardIndex] = true
		count[r.RunID] = r.ShardCount
	}
	var out []string
	ids := make([]string, 0, len(have))
	for id := range have {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for s := 0; s < count[id]; s++ {
			if !have[id][s] {
				out = append(out, fmt.Sprintf("%d/%d", s, count[id]))
			}
		}
	}
	return out
}

// resultColumns are the columns analysis reads, by name (the contract fixes names, not order).
var resultColumns = []string{
	results.ColScheduledNS, results.ColSentNS, results.ColFirstTokenNS, results.ColEndNS, results.ColChunkNS, results.ColChunkTokens,
	results.ColPromptTokens, results.ColPromptTokensServer, results.ColOutputTokensTarget, results.ColOutputTokens,
	results.ColOutputTokensSource, results.ColStatus,
}

const (
	cScheduled = iota
	cSent
	cFirst
	cEnd
	cChunkNS
	cChunkTokens
	cPrompt
	cPromptServer
	cOutTarget
	cOutTokens
	cOutSource
	cStatus
)

func (d *Data) readFile(ctx context.Context, path string, pr *file.Reader, fr *pqarrow.FileReader, shift int64, base int, opts LoadOptions) error {
	sc, err := fr.Schema()
	if err != nil {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	// The contract's check by name: required columns present, types and nullability as
	// the contract says; order free.
	if _, err := results.Check(sc); err != nil {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	// Parquet leaf column indices of the wanted fields (a list field has one leaf).
	leaf := 0
	leafOf := map[string]int{}
	for _, f := range sc.Fields() {
		leafOf[f.Name] = leaf
		leaf += countLeaves(f.Type)
	}
	idx := make([]int, len(resultColumns))
	for i, name := range resultColumns {
		l, ok := leafOf[name]
		if !ok {
			return fmt.Errorf("analysis: read %s: column %s missing", path, name)
		}
		idx[i] = l
	}
	// chunk_ns and chunk_tokens are read from their column chunks' levels (listCursor);
	// pqarrow decodes the scalar columns.
	lists := [2]listSpec{}
	for k, name := range []string{results.ColChunkNS, results.ColChunkTokens} {
		f, _ := sc.FieldsByName(name)
		lt := f[0].Type.(*arrow.ListType) // Check made sure
		lists[k] = listSpec{leaf: leafOf[name], nullable: f[0].Nullable, elemNullable: lt.ElemField().Nullable,
			maxDef: pr.MetaData().Schema.Column(leafOf[name]).MaxDefinitionLevel()}
	}
	var scalar []int
	for i, l := range idx {
		if i != cChunkNS && i != cChunkTokens {
			scalar = append(scalar, l)
		}
	}
	// The revision-1.1 columns Load allocated, when this file has them: Check made sure
	// of their type; an absent one stays null.
	var opt []int // indexes into optionalColumns read from this file
	for k, name := range optionalColumns {
		if l, ok := leafOf[name]; ok && d.optionalAllocated(k) {
			scalar = append(scalar, l)
			opt = append(opt, k)
		}
	}
	nrg := pr.NumRowGroups()
	row0 := make([]int64, nrg+1)
	for g := 0; g < nrg; g++ {
		row0[g+1] = row0[g] + pr.MetaData().RowGroup(g).NumRows()
	}
	// Row groups are decoded by up to opts.Workers goroutines, each with its own reader;
	// the parts are merged in row-group order.
	errs := make([]error, nrg)
	if row0[nrg] != pr.NumRows() {
		return fmt.Errorf("analysis: read %s: row groups hold %d rows, footer says %d", path, row0[nrg], pr.NumRows())
	}
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	workers := make([]worker, min(opts.Workers, nrg))
	var openMu sync.Mutex
	var openErr error
	for w := 0; w < min(opts.Workers, nrg); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wfr, wpr := fr, pr
			if w > 0 {
				var err error
				wpr, err = file.OpenParquetFile(path, false, file.WithReadProps(readProps()))
				if err == nil {
					defer wpr.Close()
					wfr, err = pqarrow.NewFileReader(wpr, pqarrow.ArrowReadProperties{BatchSize: opts.BatchSize}, memory.DefaultAllocator)
				}
				if err != nil {
					openMu.Lock()
					openErr = fmt.Errorf("analysis: open %s: %w", path, err)
					openMu.Unlock()
					failed.Store(true)
					return
				}
			}
			for !failed.Load() {
				g := int(next.Add(1) - 1)
				if g >= nrg {
					return
				}
				p := &part{d: d, w: &workers[w], at: base + int(row0[g]), end: base + int(row0[g+1])}
				errs[g] = p.readRowGroup(ctx, path, wpr, wfr, scalar, opt, lists, g, row0[g], shift)
				if errs[g] == nil && p.at != p.end {
					errs[g] = fmt.Errorf("analysis: read %s: row group %d holds %d rows, footer says %d", path, g, p.at-base-int(row0[g]), row0[g+1]-row0[g])
				}
				if errs[g] != nil {
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	if openErr != nil {
		return openErr
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for w := range workers {
		d.mergeWorker(&workers[w])
	}
	return nil
}

// listSpec locates a list column: its Parquet leaf and its nullability.
type listSpec struct {
	leaf                   int
	nullable, elemNullable bool
	maxDef                 int16
}

// readProps streams column chunks through a 1 MiB buffer instead of reading each whole
// chunk (100+ MB for chunk_ns) into memory and copying it once more.
func readProps() *parquet.ReaderProperties {
	p := parquet.NewReaderProperties(memory.DefaultAllocator)
	p.BufferedStreamEnabled = true
	p.BufferSize = 1 << 20
	return p
}

func (p *part) readRowGroup(ctx context.Context, path string, pr *file.Reader, fr *pqarrow.FileReader, scalar, opt []int, lists [2]listSpec, g int, row0, shift int64) error {
	rr, err := fr.GetRecordReader(ctx, scalar, []int{g})
	if err != nil {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	defer rr.Release()
	rg := pr.RowGroup(g)
	nsCol, err := rg.Column(lists[0].leaf)
	if err != nil {
		return fmt.Errorf("analysis: read %s: chunk_ns: %w", path, err)
	}
	nsRd, ok := nsCol.(*file.Int64ColumnChunkReader)
	if !ok {
		return fmt.Errorf("analysis: read %s: chunk_ns: %w", path, colErr{results.ColChunkNS, "list<int64>"})
	}
	tokCol, err := rg.Column(lists[1].leaf)
	if err != nil {
		return fmt.Errorf("analysis: read %s: chunk_tokens: %w", path, err)
	}
	tokRd, ok := tokCol.(*file.Int32ColumnChunkReader)
	if !ok {
		return fmt.Errorf("analysis: read %s: chunk_tokens: %w", path, colErr{results.ColChunkTokens, "list<int32>"})
	}
	nsCur, err := newListCursor(nsRd.ReadBatch, lists[0].nullable, lists[0].elemNullable, lists[0].maxDef)
	if err != nil {
		return fmt.Errorf("analysis: read %s: chunk_ns: %w", path, err)
	}
	tokCur, err := newListCursor(tokRd.ReadBatch, lists[1].nullable, lists[1].elemNullable, lists[1].maxDef)
	if err != nil {
		return fmt.Errorf("analysis: read %s: chunk_tokens: %w", path, err)
	}
	// Most servers send no per-chunk token counts: when the footer says every chunk_tokens
	// of the row group is null, skip decoding it.
	if md, err := rg.MetaData().ColumnChunk(lists[1].leaf); err == nil && lists[1].nullable {
		if ok, _ := md.StatsSet(); ok {
			if st, err := md.Statistics(); err == nil && st.HasNullCount() && st.NullCount() == md.NumValues() && md.NumValues() == rg.NumRows() {
				tokCur.allNull = true
			}
		}
	}
	// The record's columns come back in schema order of the selected fields; map by name.
	pos := make([]int, len(resultColumns))
	rsc := rr.Schema()
	for i, name := range resultColumns {
		if i == cChunkNS || i == cChunkTokens {
			continue
		}
		is := rsc.FieldIndices(name)
		if len(is) != 1 {
			return fmt.Errorf("analysis: read %s: column %s missing", path, name)
		}
		pos[i] = is[0]
	}
	optPos := make([]int, len(opt))
	for j, k := range opt {
		is := rsc.FieldIndices(optionalColumns[k])
		if len(is) != 1 {
			return fmt.Errorf("analysis: read %s: column %s missing", path, optionalColumns[k])
		}
		optPos[j] = is[0]
	}
	row := row0
	for rr.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec := rr.Record() // borrowed: released by the next call to Next
		if err := p.addRecord(path, row, rec, pos, nsCur, tokCur, shift); err != nil {
			return err
		}
		if err := p.addOptional(path, row, rec, opt, optPos); err != nil {
			return err
		}
		row += rec.NumRows()
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("analysis: read %s after row %d: %w", path, row, err)
	}
	return nil
}

func countLeaves(t arrow.DataType) int {
	switch t := t.(type) {
	case *arrow.ListType:
		return countLeaves(t.Elem())
	case *arrow.StructType:
		n := 0
		for _, f := range t.Fields() {
			n += countLeaves(f.Type)
		}
		return n
	case *arrow.MapType:
		return countLeaves(t.KeyType()) + countLeaves(t.ItemType())
	}
	return 1
}

type colErr struct {
	field string
	want  string
}

func (e colErr) Error() string { return "column " + e.field + " is not " + e.want }

func int64Col(rec arrow.Record, i int, name string) (*array.Int64, error) {
	a, ok := rec.Column(i).(*array.Int64)
	if !ok {
		return nil, colErr{name, "int64"}
	}
	return a, nil
}

func int32Col(rec arrow.Record, i int, name string) (*array.Int32, error) {
	a, ok := rec.Column(i).(*array.Int32)
	if !ok {
		return nil, colErr{name, "int32"}
	}
	return a, nil
}

func (p *part) addRecord(path string, row0 int64, rec arrow.Record, pos []int, nsCur *listCursor[int64], tokCur *listCursor[int32], shift int64) error {
	wrap := func(err error) error { return fmt.Errorf("analysis: read %s: %w", path, err) }
	d, w := p.d, p.w
	if p.at+int(rec.NumRows()) > p.end {
		return fmt.Errorf("analysis: read %s: row group holds more rows than the footer says", path)
	}
	sched, err := int64Col(rec, pos[cScheduled], results.ColScheduledNS)
	if err != nil {
		return wrap(err)
	}
	sent, err := int64Col(rec, pos[cSent], results.ColSentNS)
	if err != nil {
		return wrap(err)
	}
	first, err := int64Col(rec, pos[cFirst], results.ColFirstTokenNS)
	if err != nil {
		return wrap(err)
	}
	end, err := int64Col(rec, pos[cEnd], results.ColEndNS)
	if err != nil {
		return wrap(err)
	}
	prompt, err := int32Col(rec, pos[cPrompt], results.ColPromptTokens)
	if err != nil {
		return wrap(err)
	}
	promptSrv, err := int32Col(rec, pos[cPromptServer], results.ColPromptTokensServer)
	if err != nil {
		return wrap(err)
	}
	outTarget, err := int32Col(rec, pos[cOutTarget], results.ColOutputTokensTarget)
	if err != nil {
		return wrap(err)
	}
	outTok, err := int32Col(rec, pos[cOutTokens], results.ColOutputTokens)
	if err != nil {
		return wrap(err)
	}
	outSrc, ok := rec.Column(pos[cOutSource]).(*array.String)
	if !ok {
		return wrap(colErr{results.ColOutputTokensSource, "string"})
	}
	status, ok := rec.Column(pos[cStatus]).(*array.String)
	if !ok {
		return wrap(colErr{results.ColStatus, "string"})
	}

	n := int(rec.NumRows())
	for i := 0; i < n; i++ {
		row := row0 + int64(i)
		bad := func(field, format string, a ...any) error {
			return &FieldError{File: path, Row: row, Field: field, Err: fmt.Errorf(format, a...)}
		}
		st := -1
		if status.IsValid(i) {
			s := status.Value(i)
			for k, name := range statuses {
				if results.Status(s) == name {
					st = k
					break
				}
			}
			if st < 0 {
				return bad(results.ColStatus, "unknown status %q", s)
			}
		} else {
			return bad(results.ColStatus, "null")
		}
		if !sched.IsValid(i) {
			return bad(results.ColScheduledNS, "null")
		}
		opt64 := func(a *array.Int64) int64 {
			if a.IsValid(i) {
				return a.Value(i) + shift
			}
			return null64
		}
		opt32 := func(a *array.Int32) int32 {
			if a.IsValid(i) {
				return a.Value(i)
			}
			return null32
		}
		s, f, e := opt64(sent), opt64(first), opt64(end)
		for _, c := range []struct {
			name string
			v    int64
		}{{results.ColScheduledNS, sched.Value(i) + shift}, {results.ColSentNS, s}, {results.ColFirstTokenNS, f}, {results.ColEndNS, e}} {
			if c.v != null64 && (c.v < 0 || c.v >= int64(MaxSpan)) {
				return bad(c.name, "%d ns is outside [0, %v) from the run start", c.v-shift, MaxSpan)
			}
		}
		if st == int(stOK) {
			switch {
			case s == null64:
				return bad(results.ColSentNS, "null in an ok request")
			case f == null64:
				return bad(results.ColFirstTokenNS, "null in an ok request")
			case e == null64:
				return bad(results.ColEndNS, "null in an ok request")
			}
		}
		if f != null64 && (s == null64 || f < s) {
			return bad(results.ColFirstTokenNS, "%d before sent_ns", f-shift)
		}
		if e != null64 && (f == null64 || e < f) {
			return bad(results.ColEndNS, "%d before first_token_ns", e-shift)
		}
		if !prompt.IsValid(i) {
			return bad(results.ColPromptTokens, "null")
		}
		if !outTarget.IsValid(i) {
			return bad(results.ColOutputTokensTarget, "null")
		}
		ot := opt32(outTok)
		if ot != null32 && ot < 0 {
			return bad(results.ColOutputTokens, "%d is negative", ot)
		}
		var src uint8
		if outSrc.IsValid(i) {
			switch outSrc.Value(i) {
			case results.SourceUsage:
				src = 1
			case results.SourceTokenizer:
				src = 2
			case "":
			default:
				return bad(results.ColOutputTokensSource, "unknown source %q", outSrc.Value(i))
			}
		}

		// Chunks: validate, record ITL and attribute tokens to time.
		cns, _, err := nsCur.next()
		if err != nil {
			return bad(results.ColChunkNS, "%v", err)
		}
		ctk, tokNull, err := tokCur.next()
		if err != nil {
			return bad(results.ColChunkTokens, "%v", err)
		}
		nc := len(cns)
		if nc > 0 && s == null64 {
			return bad(results.ColChunkNS, "chunks in a request never sent")
		}
		hasTok := !tokNull
		tokSum := int64(-1)
		if hasTok {
			if len(ctk) != nc {
				return bad(results.ColChunkTokens, "%d entries for %d chunks", len(ctk), nc)
			}
			w.hasChunkT++
			tokSum = 0
			for k, v := range ctk {
				if v < 0 {
					return bad(results.ColChunkTokens, "entry %d is %d", k, v)
				}
				if v > 1 {
					w.multiTokenChunks = true
				}
				tokSum += int64(v)
			}
		}
		// chunk_ns must be non-decreasing offsets inside the time axis. Checking is folded
		// into the ok-request loop below, the hottest loop of a load (10^8 chunks).
		if nc > 0 && (cns[0] < 0 || cns[nc-1] >= int64(MaxSpan)-s) {
			k := 0
			if cns[0] >= 0 {
				k = nc - 1
			}
			return bad(results.ColChunkNS, "entry %d (%d) is outside [0, %v) from the run start", k, cns[k], MaxSpan)
		}
		if st != int(stOK) || (nc > 0 && cns[0] > cns[nc-1]) {
			for k := 1; k < nc; k++ {
				if cns[k] < cns[k-1] {
					return bad(results.ColChunkNS, "entry %d (%d) before entry %d (%d)", k, cns[k], k-1, cns[k-1])
				}
			}
		}
		if nc > 0 && (f == null64 || e == null64 || cns[0] != f-s || cns[nc-1] != e-s) {
			w.firstChunkMismatch++
		}
		if st == int(stOK) && nc > 0 {
			// Tokens per chunk: chunk_tokens when the server sent them; else the reported
			// output_tokens spread evenly over the chunks (1 per chunk when unknown), so
			// the binned tokens of a request add up to its output_tokens.
			per := 1.0
			if !hasTok && ot != null32 {
				per = float64(ot) / float64(nc)
			}
			if last := (s + cns[nc-1]) / binNS; int64(len(w.bins)) <= last {
				w.bins = append(w.bins, make([]float64, last+1-int64(len(w.bins)))...)
			}
			bins := w.bins
			h := &w.itl
			tok0 := per
			if hasTok {
				tok0 = float64(ctk[0])
			}
			bins[(s+cns[0])/binNS] += tok0
			// The gaps go straight into the µs histogram; their sum and max are folded in
			// once per request.
			var sum, mx int64
			zeros := 0 // gaps of 0: chunks of one read
			prev := cns[0]
			for k := 1; k < nc; k++ {
				v := cns[k]
				g := v - prev
				if g < 0 {
					return bad(results.ColChunkNS, "entry %d (%d) before entry %d (%d)", k, v, k-1, prev)
				}
				prev = v
				sum += g
				mx = max(mx, g)
				if g == 0 {
					zeros++
				}
				h.CountUS((g + 500) / 1000)
				tok := per
				if hasTok {
					tok = float64(ctk[k])
					if ctk[k] > 0 {
						w.itlTok.Add(float64(g)/float64(ctk[k]), int64(ctk[k]))
					}
				}
				b := (s + v) / binNS
				if b >= int64(len(bins)) {
					// Past the last chunk's bin: a later chunk must come earlier than this one.
					for k2 := k + 1; k2 < nc; k2++ {
						if cns[k2] < cns[k2-1] {
							return bad(results.ColChunkNS, "entry %d (%d) before entry %d (%d)", k2, cns[k2], k2-1, cns[k2-1])
						}
					}
				}
				bins[b] += tok
			}
			if nc > 1 {
				h.AddTotals(int64(nc-1), float64(sum), float64(mx))
			}
			w.buf.addStream(nc, zeros, sum)
		}
		j := p.at
		p.at++
		d.scheduled[j] = sched.Value(i) + shift
		d.sent[j], d.first[j], d.end[j] = s, f, e
		d.prompt[j], d.promptServer[j] = prompt.Value(i), opt32(promptSrv)
		d.outTarget[j], d.outTokens[j], d.outSource[j] = outTarget.Value(i), ot, src
		d.status[j], d.nChunks[j], d.chunkTokSum[j] = uint8(st), int32(nc), tokSum
	}
	return nil
}

func (d *Data) optionalAllocated(k int) bool {
	if k == oSessionID || k == oSessionWait {
		return d.optional64(k) != nil
	}
	return d.optional32(k) != nil
}

// addOptional stores the revision-1.1 columns of rec's rows (the rows addRecord just
// stored, ending at p.at), refusing negative values: a count, an id or a wait is never
// negative.
func (p *part) addOptional(path string, row0 int64, rec arrow.Record, opt, optPos []int) error {
	n := int(rec.NumRows())
	at := p.at - n
	for j, k := range opt {
		name := optionalColumns[k]
		bad := func(i int, v int64) error {
			return &FieldError{File: path, Row: row0 + int64(i), Field: name, Err: fmt.Errorf("%d is negative", v)}
		}
		switch k {
		case oSessionID, oSessionWait:
			a, err := int64Col(rec, optPos[j], name)
			if err != nil {
				return fmt.Errorf("analysis: read %s: %w", path, err)
			}
			dst := p.d.optional64(k)[at : at+n]
			for i := range n {
				if a.IsValid(i) {
					if v := a.Value(i); v < 0 {
						return bad(i, v)
					}
					dst[i] = a.Value(i)
				}
			}
		default:
			a, err := int32Col(rec, optPos[j], name)
			if err != nil {
				return fmt.Errorf("analysis: read %s: %w", path, err)
			}
			dst := p.d.optional32(k)[at : at+n]
			for i := range n {
				if a.IsValid(i) {
					if v := a.Value(i); v < 0 {
						return bad(i, int64(v))
					}
					dst[i] = a.Value(i)
				}
			}
		}
	}
	return nil
}
