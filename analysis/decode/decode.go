package decode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/file"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

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
	buf                           BufTally
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
	d.ITL.Merge(&w.itl)
	d.ITLTok.Merge(&w.itlTok)
	d.Buf.Merge(&w.buf)
	d.FirstChunkMismatch += w.firstChunkMismatch
	d.HasChunkT += w.hasChunkT
	d.MultiTokenChunks = d.MultiTokenChunks || w.multiTokenChunks
	if len(d.TokenBins) < len(w.bins) {
		d.TokenBins = append(d.TokenBins, make([]float64, len(w.bins)-len(d.TokenBins))...)
	}
	for i, v := range w.bins {
		d.TokenBins[i] += v
	}
}

// scalarColumns are the flat columns of results/v1 analysis reads, by name (the contract
// fixes names, not order); chunk_ns and chunk_tokens are read from their levels.
var scalarColumns = []string{
	results.ColScheduledNS, results.ColSentNS, results.ColFirstTokenNS, results.ColEndNS,
	results.ColPromptTokens, results.ColPromptTokensServer, results.ColOutputTokensTarget, results.ColOutputTokens,
	results.ColOutputTokensSource, results.ColStatus,
}

// readPlan is what a file's row groups are decoded with: the Parquet leaves pqarrow decodes
// (the scalar columns, then the optional ones the file has), the optional columns among
// them (indexes into optionalColumns) and the two list columns read by listCursor.
type readPlan struct {
	scalar []int
	opt    []int
	lists  [2]listSpec // chunk_ns, chunk_tokens
}

// plan checks f's schema against the contract by name (required columns present, types and
// nullability as the contract says; order free) and locates the columns analysis reads.
func (d *Data) plan(f *results.File) (readPlan, error) {
	var p readPlan
	if _, err := f.Check(); err != nil {
		return p, fmt.Errorf("analysis: %w", err)
	}
	sc, err := f.Arrow.Schema()
	if err != nil {
		return p, fmt.Errorf("analysis: read %s: %w", f.Path, err)
	}
	leaves := results.Leaves(sc)
	for _, name := range append(scalarColumns, results.ColChunkNS, results.ColChunkTokens) {
		if len(leaves[name]) != 1 {
			return p, fmt.Errorf("analysis: read %s: column %s missing", f.Path, name)
		}
	}
	for _, name := range scalarColumns {
		p.scalar = append(p.scalar, leaves[name][0])
	}
	for k, name := range []string{results.ColChunkNS, results.ColChunkTokens} {
		fs, _ := sc.FieldsByName(name)
		lt := fs[0].Type.(*arrow.ListType) // Check made sure
		leaf := leaves[name][0]
		p.lists[k] = listSpec{leaf: leaf, nullable: fs[0].Nullable, elemNullable: lt.ElemField().Nullable,
			maxDef: f.Parquet.MetaData().Schema.Column(leaf).MaxDefinitionLevel()}
	}
	// The revision-1.1 columns Load allocated, when this file has them: Check made sure
	// of their type; an absent one stays null.
	for k, name := range optionalColumns {
		if l, ok := leaves[name]; ok && d.optionalAllocated(k) {
			p.scalar = append(p.scalar, l[0])
			p.opt = append(p.opt, k)
		}
	}
	return p, nil
}

// readFile decodes f into rows [base, base+rows) of d, its times shifted by shift onto the
// common axis. Row groups are decoded by up to opts.Workers goroutines, each with its own
// reader, into their own rows; the workers' samples are merged at the end.
func (d *Data) readFile(ctx context.Context, f *results.File, shift int64, base int, opts LoadOptions) error {
	plan, err := d.plan(f)
	if err != nil {
		return err
	}
	path, pr := f.Path, f.Parquet
	nrg := pr.NumRowGroups()
	row0 := make([]int64, nrg+1)
	for g := 0; g < nrg; g++ {
		row0[g+1] = row0[g] + pr.MetaData().RowGroup(g).NumRows()
	}
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
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wf := f
			if w > 0 {
				var err error
				if wf, err = results.Open(path, results.OpenOptions{Props: ReadProps(), BatchSize: opts.BatchSize}); err != nil {
					openMu.Lock()
					openErr = fmt.Errorf("analysis: %w", err)
					openMu.Unlock()
					failed.Store(true)
					return
				}
				defer wf.Close()
			}
			for !failed.Load() {
				g := int(next.Add(1) - 1)
				if g >= nrg {
					return
				}
				p := &part{d: d, w: &workers[w], at: base + int(row0[g]), end: base + int(row0[g+1])}
				errs[g] = p.readRowGroup(ctx, wf, &plan, g, row0[g], shift)
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

// ReadProps are the Parquet reader properties results and metrics files are read with: they
// stream column chunks through a 1 MiB buffer instead of reading each whole chunk (100+ MB
// for chunk_ns) into memory and copying it once more.
func ReadProps() *parquet.ReaderProperties {
	p := parquet.NewReaderProperties(memory.DefaultAllocator)
	p.BufferedStreamEnabled = true
	p.BufferSize = 1 << 20
	return p
}

// readRowGroup decodes row group g of f, whose first row is row0 of the file, into the
// part's rows.
func (p *part) readRowGroup(ctx context.Context, f *results.File, plan *readPlan, g int, row0, shift int64) error {
	path, pr := f.Path, f.Parquet
	rr, err := f.Arrow.GetRecordReader(ctx, plan.scalar, []int{g})
	if err != nil {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	defer rr.Release()
	nsCur, tokCur, err := listCursors(pr.RowGroup(g), &plan.lists)
	if err != nil {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	// The record's columns come back in schema order of the selected fields: locate them
	// by name.
	l, err := results.Locate(rr.Schema())
	if err != nil {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	row := row0
	for rr.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec := rr.Record() // borrowed: released by the next call to Next
		if err := p.addRecord(path, row, rec, l, nsCur, tokCur, shift); err != nil {
			return err
		}
		if err := p.addOptional(path, row, rec, l, plan.opt, shift); err != nil {
			return err
		}
		row += rec.NumRows()
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("analysis: read %s after row %d: %w", path, row, err)
	}
	return nil
}

// listCursors opens the cursors of a row group's chunk_ns and chunk_tokens. The errors
// name the column.
func listCursors(rg *file.RowGroupReader, lists *[2]listSpec) (*listCursor[int64], *listCursor[int32], error) {
	nsCol, err := rg.Column(lists[0].leaf)
	if err != nil {
		return nil, nil, fmt.Errorf("chunk_ns: %w", err)
	}
	nsRd, ok := nsCol.(*file.Int64ColumnChunkReader)
	if !ok {
		return nil, nil, fmt.Errorf("chunk_ns: %w", &results.Error{Column: results.ColChunkNS, Msg: "not list<int64>"})
	}
	tokCol, err := rg.Column(lists[1].leaf)
	if err != nil {
		return nil, nil, fmt.Errorf("chunk_tokens: %w", err)
	}
	tokRd, ok := tokCol.(*file.Int32ColumnChunkReader)
	if !ok {
		return nil, nil, fmt.Errorf("chunk_tokens: %w", &results.Error{Column: results.ColChunkTokens, Msg: "not list<int32>"})
	}
	nsCur, err := newListCursor(nsRd.ReadBatch, lists[0].nullable, lists[0].elemNullable, lists[0].maxDef)
	if err != nil {
		return nil, nil, fmt.Errorf("chunk_ns: %w", err)
	}
	tokCur, err := newListCursor(tokRd.ReadBatch, lists[1].nullable, lists[1].elemNullable, lists[1].maxDef)
	if err != nil {
		return nil, nil, fmt.Errorf("chunk_tokens: %w", err)
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
	return nsCur, tokCur, nil
}
