package trace

import (
	"context"
	"errors"
	"fmt"
	"github.com/llmreplay/llmreplay/internal/filekind"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/compress"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/metadata"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/internal/atomicfile"
)

// Column names of trace format v1 (docs/trace-format.md).
const (
	ColRequestID    = "request_id"
	ColArrivalNS    = "arrival_ns"
	ColPromptTokens = "prompt_tokens"
	ColOutputTokens = "output_tokens"
	ColSessionID    = "session_id"
	ColPrefixBlocks = "prefix_blocks"
	ColModel        = "model"
	ColPrompt       = "prompt"
	// ColToolTokens is the tokens of the tool definitions a request sends, counted in its
	// prompt_tokens (nullable: older traces have no such column).
	ColToolTokens = "tool_tokens"
	// ColImages is how many images a request sends (nullable: null or 0, none).
	ColImages = "images"
	// ColImageWidths and ColImageHeights are the images' sizes in pixels, lists as long as
	// images; null when the source gives counts only.
	ColImageWidths  = "image_widths"
	ColImageHeights = "image_heights"
	// ColImageTokens is how many of prompt_tokens the images count for, when the source
	// says (nullable).
	ColImageTokens = "image_tokens"
)

// MetaTransforms is the schema metadata key recording the transforms (slice, speedup, ...)
// applied to a trace after import or synthesis, as a JSON array, oldest first.
const MetaTransforms = "llmreplay.transforms"

const (
	// RowGroupRows is the number of rows per Parquet row group the Writer makes.
	// 1 Mi rows of the fixed-width columns is ~24 MiB before compression: big enough for
	// fast scans, small enough that a buffered row group stays far below the memory budget.
	RowGroupRows = 1 << 20
	// batchRows is how many rows the Writer accumulates in Arrow builders before handing
	// them to the Parquet writer, and how many rows the Reader decodes at a time.
	batchRows = 64 << 10
	// batchBlocks and rowGroupBytes bound both in bytes for rows of long prefix-block lists
	// (a recording's 1,000 blocks are 8 KB a row): converting a journal of them peaks at
	// 200-290 MB RSS so, 700 MB by rows alone (record's BenchmarkTraceJournalConvert).
	batchBlocks   = 1 << 20
	rowGroupBytes = 16 << 20
)

// fields of the trace/v1 Arrow schema, in column order.
var fields = []arrow.Field{
	{Name: ColRequestID, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColArrivalNS, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColPromptTokens, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColOutputTokens, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColSessionID, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: ColPrefixBlocks, Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
	{Name: ColModel, Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: ColPrompt, Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: ColParents, Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
	{Name: ColGapNS, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: ColGapKind, Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: ColDurationNS, Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	{Name: ColPrefixTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: ColCachedTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: ColReasoningTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: ColToolTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: ColImages, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: ColImageWidths, Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: ColImageHeights, Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	{Name: ColImageTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: ColAPI, Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: ColMaxTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: ColN, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: ColStream, Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
}

// colTools is the index of the tool_tokens column in fields; the agent columns are 8 up
// to it, the image columns follow it, then the recording columns from colParams.
const (
	colTools  = 15
	colParams = colTools + 5
)

// schemaFor returns the Arrow schema of trace/v1 carrying meta as schema metadata.
func schemaFor(meta Meta) *arrow.Schema {
	keys := []string{MetaFormat}
	vals := []string{Format}
	add := func(k, v string) {
		if v != "" {
			keys = append(keys, k)
			vals = append(vals, v)
		}
	}
	add(MetaSource, meta.Source)
	if meta.StartUnixNS != 0 {
		add(MetaStartUnixNS, strconv.FormatInt(meta.StartUnixNS, 10))
	}
	if meta.BlockTokens != 0 {
		add(MetaBlockTokens, strconv.Itoa(meta.BlockTokens))
	}
	add(MetaGenerator, meta.Generator)
	add(MetaTransforms, meta.Transforms)
	md := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(fields, &md)
}

// metaFrom reads Meta back from schema metadata, rejecting anything that is not trace/v1.
func metaFrom(md arrow.Metadata) (Meta, error) {
	var m Meta
	get := func(k string) string {
		if i := md.FindKey(k); i >= 0 {
			return md.Values()[i]
		}
		return ""
	}
	switch f := get(MetaFormat); f {
	case Format:
	case "":
		return m, fmt.Errorf("not an llmreplay trace: schema metadata has no %s key (want %q)", MetaFormat, Format)
	case "results/v1":
		return m, fmt.Errorf("%s is %q: this is a replay's results file, not a trace; analyze it with `llmreplay analyze`", MetaFormat, f)
	default:
		return m, fmt.Errorf("%s is %q; this llmreplay reads %q", MetaFormat, f, Format)
	}
	m.Source = get(MetaSource)
	m.Generator = get(MetaGenerator)
	m.Transforms = get(MetaTransforms)
	var err error
	if s := get(MetaStartUnixNS); s != "" {
		if m.StartUnixNS, err = strconv.ParseInt(s, 10, 64); err != nil {
			return m, fmt.Errorf("%s: %q is not an integer", MetaStartUnixNS, s)
		}
	}
	if s := get(MetaBlockTokens); s != "" {
		if m.BlockTokens, err = strconv.Atoi(s); err != nil || m.BlockTokens < 1 {
			return m, fmt.Errorf("%s: %q is not a positive integer", MetaBlockTokens, s)
		}
	}
	return m, nil
}

// Writer writes a trace/v1 Parquet file row by row. It checks every request (Validate,
// and arrivals non-decreasing) before accepting it, so a file it finishes is valid.
// Rows are batched in Arrow builders and written as zstd-compressed row groups of
// RowGroupRows rows or rowGroupBytes, whichever comes first; memory stays bounded by one
// row group whatever the trace's length.
type Writer struct {
	meta Meta
	dst  io.Writer
	fw   *pqarrow.FileWriter
	bld  *array.RecordBuilder
	rows int64
	// blocks counts the prefix-block ids in the builders; newGroup asks the next flush to
	// start a row group, the current one being rowGroupBytes.
	blocks   int
	newGroup bool
	last     int64 // arrival of the previous row
	err      error // sticky: once a write fails the file is unusable
	done     bool
	label    string // file name for errors; "" for an io.Writer

	// Set by Create only.
	f *atomicfile.File
}

// Create starts a trace file at path (mode 0644 under the umask). The data goes to a
// temporary file in the same directory, synced and renamed to path by Close
// (internal/atomicfile); Abort (or a failed Close) removes it, so a failed import never
// leaves a partial file behind.
func Create(path string, meta Meta) (*Writer, error) {
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, fmt.Errorf("trace: create %s: %w", path, err)
	}
	w := NewWriter(f, meta)
	w.f, w.label = f, path
	return w, nil
}

// NewWriter returns a Writer that writes a trace/v1 Parquet file to dst. Close finishes
// the file but does not close dst.
func NewWriter(dst io.Writer, meta Meta) *Writer {
	return &Writer{meta: meta, dst: dst, last: -1}
}

// SetMeta replaces the metadata to be stored; it fails once a row has been written
// (importers learn the start time and source form only from the first row).
func (w *Writer) SetMeta(meta Meta) error {
	if w.rows > 0 || w.fw != nil {
		return errors.New("trace: SetMeta after the first Write")
	}
	w.meta = meta
	return nil
}

func (w *Writer) errorf(format string, a ...any) error {
	msg := fmt.Sprintf(format, a...)
	if w.label != "" {
		return fmt.Errorf("trace: write %s: %s", w.label, msg)
	}
	return fmt.Errorf("trace: write: %s", msg)
}

// Write appends one request. It returns an error naming the row (0-based) and the field
// when the request is invalid or arrives before the previous one.
func (w *Writer) Write(r Request) error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		return w.errorf("Write after Close")
	}
	if err := r.Validate(); err != nil {
		return w.errorf("row %d (request_id %d): %v", w.rows, r.ID, err)
	}
	a := int64(r.Arrival)
	if a < w.last {
		return w.errorf("row %d (request_id %d): arrival_ns: %d is before the previous row's %d (a trace is sorted by arrival)", w.rows, r.ID, a, w.last)
	}
	if w.bld == nil {
		w.bld = array.NewRecordBuilder(memory.DefaultAllocator, schemaFor(w.meta))
		w.bld.Reserve(batchRows)
	}
	b := w.bld
	b.Field(0).(*array.Int64Builder).Append(r.ID)
	b.Field(1).(*array.Int64Builder).Append(a)
	b.Field(2).(*array.Int32Builder).Append(r.PromptTokens)
	b.Field(3).(*array.Int32Builder).Append(r.OutputTokens)
	if r.HasSession {
		b.Field(4).(*array.Int64Builder).Append(r.SessionID)
	} else {
		b.Field(4).AppendNull()
	}
	lb := b.Field(5).(*array.ListBuilder)
	if r.PrefixBlocks == nil {
		lb.AppendNull()
	} else {
		lb.Append(true)
		lb.ValueBuilder().(*array.Int64Builder).AppendValues(r.PrefixBlocks, nil)
	}
	appendStr(b.Field(6).(*array.StringBuilder), r.Model)
	appendStr(b.Field(7).(*array.StringBuilder), r.Prompt)
	appendCall(b, r.Call)
	if r.HasToolTokens {
		b.Field(colTools).(*array.Int32Builder).Append(r.ToolTokens)
	} else {
		b.Field(colTools).AppendNull()
	}
	appendImages(b, &r)
	appendParams(b, r.Params)
	w.last = a
	w.rows++
	w.blocks += len(r.PrefixBlocks)
	if b.Field(0).Len() >= batchRows || w.blocks >= batchBlocks {
		if err := w.flush(); err != nil {
			w.err = err
			return err
		}
	}
	return nil
}

// appendCall appends the agent columns (8 on) of c, all null when c is nil.
func appendCall(b *array.RecordBuilder, c *Call) {
	if c == nil {
		for i := 8; i < colTools; i++ {
			b.Field(i).AppendNull()
		}
		return
	}
	lb := b.Field(8).(*array.ListBuilder)
	if c.Parents == nil {
		lb.AppendNull()
	} else {
		lb.Append(true)
		lb.ValueBuilder().(*array.Int64Builder).AppendValues(c.Parents, nil)
	}
	appendOpt64(b.Field(9).(*array.Int64Builder), int64(c.Gap))
	appendStr(b.Field(10).(*array.StringBuilder), c.GapKind)
	appendOpt64(b.Field(11).(*array.Int64Builder), int64(c.Duration))
	appendOpt32(b.Field(12).(*array.Int32Builder), c.PrefixTokens)
	appendOpt32(b.Field(13).(*array.Int32Builder), c.CachedTokens)
	appendOpt32(b.Field(14).(*array.Int32Builder), c.ReasoningTokens)
}

// appendImages appends the image columns (after tool_tokens) of r: nulls when it sends
// none, the size lists null when its images are 0x0.
func appendImages(b *array.RecordBuilder, r *Request) {
	n := b.Field(colTools + 1).(*array.Int32Builder)
	wb := b.Field(colTools + 2).(*array.ListBuilder)
	hb := b.Field(colTools + 3).(*array.ListBuilder)
	if len(r.Images) == 0 {
		n.AppendNull()
	} else {
		n.Append(int32(len(r.Images)))
	}
	if len(r.Images) == 0 || !r.Images[0].Known() {
		wb.AppendNull()
		hb.AppendNull()
	} else {
		wb.Append(true)
		hb.Append(true)
		wv := wb.ValueBuilder().(*array.Int32Builder)
		hv := hb.ValueBuilder().(*array.Int32Builder)
		for _, im := range r.Images {
			wv.Append(im.Width)
			hv.Append(im.Height)
		}
	}
	if r.HasImageTokens {
		b.Field(colTools + 4).(*array.Int32Builder).Append(r.ImageTokens)
	} else {
		b.Field(colTools + 4).AppendNull()
	}
}

func appendOpt64(b *array.Int64Builder, v int64) {
	if v == Unknown {
		b.AppendNull()
	} else {
		b.Append(v)
	}
}

func appendOpt32(b *array.Int32Builder, v int32) {
	if v == Unknown {
		b.AppendNull()
	} else {
		b.Append(v)
	}
}

func appendStr(b *array.StringBuilder, s string) {
	if s == "" {
		b.AppendNull()
	} else {
		b.Append(s)
	}
}

// flush hands the builders' rows to the Parquet writer, creating it on first use.
func (w *Writer) flush() error {
	if w.fw == nil {
		props := parquet.NewWriterProperties(
			parquet.WithCompression(compress.Codecs.Zstd),
			// arrow v15's zstd codec builds a new encoder (16 MiB of history) per page at the
			// requested level; level 1 (SpeedFastest) more than doubled the import rate.
			parquet.WithCompressionLevel(1),
			// 1 MiB pages: bigger ones cut the codec's per-page cost (below) a little but
			// every column's open page is buffered uncompressed until the row group ends,
			// and 16 MiB pages doubled the peak RSS of a 5M-row import (to ~200 MB).
			parquet.WithDataPageSize(1<<20),
			parquet.WithMaxRowGroupLength(RowGroupRows),
			parquet.WithCreatedBy("llmreplay"),
			parquet.WithDictionaryDefault(false),
			parquet.WithDictionaryFor(ColModel, true),
		)
		// Hide dst's Close from pqarrow, which closes a Closer: the caller owns dst.
		fw, err := pqarrow.NewFileWriter(schemaFor(w.meta), struct{ io.Writer }{w.dst}, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
		if err != nil {
			return w.errorf("%v", err)
		}
		w.fw = fw
	}
	if w.bld == nil || w.bld.Field(0).Len() == 0 {
		return nil
	}
	rec := w.bld.NewRecord()
	defer rec.Release()
	// NewRecord leaves the builders empty; reserving a whole batch again saves the
	// doubling reallocations (and copies) of every column on the way up.
	w.bld.Reserve(batchRows)
	if w.newGroup {
		w.fw.NewBufferedRowGroup()
	}
	if err := w.fw.WriteBuffered(rec); err != nil {
		return w.errorf("%v", err)
	}
	// pqarrow buffers a row group's pages until it ends: end it by size as well as rows.
	w.blocks, w.newGroup = 0, w.fw.RowGroupTotalCompressedBytes()+w.fw.RowGroupTotalBytesWritten() >= rowGroupBytes
	return nil
}

// Close writes the remaining rows and the file footer and, for a Writer made by Create,
// renames the temporary file into place. On any error the temporary file is removed.
func (w *Writer) Close() error {
	if w.done {
		return w.err
	}
	w.done = true
	err := w.err
	if err == nil {
		err = w.flush()
	}
	if w.fw != nil {
		if cerr := w.fw.Close(); err == nil && cerr != nil {
			err = w.errorf("%v", cerr)
		}
	}
	if w.bld != nil {
		w.bld.Release()
		w.bld = nil
	}
	if w.f != nil {
		if err != nil {
			w.f.Abort()
		} else if cerr := w.f.Commit(); cerr != nil {
			err = w.errorf("%v", cerr)
		}
	}
	w.err = err
	return err
}

// Abort abandons the file: for a Writer made by Create the temporary file is removed and
// nothing appears at the path. Abort after Close does nothing.
func (w *Writer) Abort() {
	if w.done {
		return
	}
	w.done = true
	w.err = errors.New("trace: writer aborted")
	if w.bld != nil {
		w.bld.Release()
		w.bld = nil
	}
	// The pqarrow writer's buffered row group is dropped with it; its Close would write a
	// footer we do not want.
	w.fw = nil
	if w.f != nil {
		w.f.Abort()
	}
}

// Reader reads a trace/v1 Parquet file one request at a time, in the shape of
// bufio.Scanner. It checks every row as the Writer does, so a reader never yields a
// request with a non-positive length or out of arrival order.
type Reader struct {
	name    string
	f       *os.File // nil when reading from a caller's ReaderAt
	pf      *file.Reader
	rr      pqarrow.RecordReader
	meta    Meta
	numRows int64

	rec  arrow.Record
	cols readerCols
	i    int   // index of the current row in rec
	row  int64 // 0-based index of the current row in the file
	last int64
	cur  Request
	err  error
	end  bool

	models map[string]string // interned model names: few distinct, many rows
	has    map[string]bool   // the trace columns the file has
}

type readerCols struct {
	id, arrival, session *array.Int64
	prompt, output       *array.Int32
	blocks               *array.List
	blockVals            *array.Int64
	model, text          *array.String
	tools                *array.Int32 // nil when the file has no tool_tokens

	// image columns; nil when the file has none
	images, imageTokens   *array.Int32
	widths, heights       *array.List
	widthVals, heightVals *array.Int32

	// recording columns (params.go); nil when the file has none
	api               *array.String
	maxTokens, nCount *array.Int32
	stream            *array.Boolean

	// agent columns (call.go); nil when the file has none
	parents              *array.List
	parentVals           *array.Int64
	gap, duration        *array.Int64
	gapKind              *array.String
	prefix, cached, reas *array.Int32
}

// Open opens a trace/v1 Parquet file for streaming. It fails, naming the file, when the
// file is not Parquet, is not trace/v1, or lacks a required column.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: open %s: %w", path, err)
	}
	r, err := NewReader(f, path)
	if err != nil {
		f.Close()
		if k, ok := filekind.OfFile(path); ok && k != filekind.Parquet {
			return nil, fmt.Errorf("trace: open %s: %s", path, filekind.Mismatch(k, "a Parquet trace", path))
		}
		return nil, err
	}
	r.f = f
	return r, nil
}

// NewReader reads a trace/v1 Parquet file from src; name is used in error messages.
// Closing the Reader does not close src.
func NewReader(src parquet.ReaderAtSeeker, name string) (*Reader, error) {
	fail := func(err error) (*Reader, error) {
		return nil, fmt.Errorf("trace: open %s: %w", name, err)
	}
	// Hide src's Close (if any) from the Parquet reader: the caller owns src.
	pf, err := file.NewParquetReader(struct{ parquet.ReaderAtSeeker }{src})
	if err != nil {
		return fail(err)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: batchFor(pf)}, memory.DefaultAllocator)
	if err != nil {
		pf.Close()
		return fail(err)
	}
	sc, err := fr.Schema()
	if err != nil {
		pf.Close()
		return fail(err)
	}
	md := sc.Metadata()
	if md.FindKey(MetaFormat) < 0 {
		// Written by a tool that stores no Arrow schema (DuckDB's KV_METADATA, say): the
		// keys are plain Parquet key-value metadata.
		if kv := pf.MetaData().KeyValueMetadata(); kv != nil {
			md = arrow.NewMetadata(kv.Keys(), kv.Values())
		}
	}
	meta, err := metaFrom(md)
	if err != nil {
		pf.Close()
		return fail(err)
	}
	// Columns by name, so files written by other tools in another column order also read.
	var idx []int
	has := map[string]bool{}
	for _, want := range fields {
		is := sc.FieldIndices(want.Name)
		has[want.Name] = len(is) > 0
		if len(is) == 0 {
			if !want.Nullable {
				pf.Close()
				return fail(fmt.Errorf("column %s: missing", want.Name))
			}
			continue
		}
		got := sc.Field(is[0]).Type
		if !arrow.TypeEqual(got, want.Type) && !sameList(got, want.Type) {
			pf.Close()
			return fail(fmt.Errorf("column %s: type %s, want %s", want.Name, got, want.Type))
		}
		idx = append(idx, is[0])
	}
	rr, err := fr.GetRecordReader(context.Background(), idx, nil)
	if err != nil {
		pf.Close()
		return fail(err)
	}
	return &Reader{name: name, pf: pf, rr: rr, meta: meta, numRows: pf.NumRows(), last: -1, models: map[string]string{}, has: has}, nil
}

// leafOf returns the index of the Parquet leaf column of trace column name; -1: none.
func leafOf(md *metadata.FileMetaData, name string) int {
	for i := 0; i < md.Schema.NumColumns(); i++ {
		if p := md.Schema.Column(i).ColumnPath(); len(p) > 0 && p[0] == name {
			return i
		}
	}
	return -1
}

// batchFor returns the rows a read batch holds: batchRows, or fewer when the file's
// prefix-block lists are long, so that a batch holds about batchBlocks ids (a batchRows
// batch of a recording's 1,000-block rows would be half a gigabyte).
func batchFor(pf *file.Reader) int64 {
	md, ids := pf.MetaData(), int64(0)
	for g := 0; g < pf.NumRowGroups() && leafOf(md, ColPrefixBlocks) >= 0; g++ {
		if cc, err := md.RowGroup(g).ColumnChunk(leafOf(md, ColPrefixBlocks)); err == nil {
			ids += cc.NumValues()
		}
	}
	return max(64, min(batchRows, batchBlocks*max(pf.NumRows(), 1)/max(ids, 1)))
}

// sameList accepts a list of want's element type whatever its element field is called
// ("item" here, "element" from some writers).
func sameList(got, want arrow.DataType) bool {
	g, ok := got.(*arrow.ListType)
	w, ok2 := want.(*arrow.ListType)
	return ok && ok2 && arrow.TypeEqual(g.Elem(), w.Elem())
}

func durationNS(ns int64) time.Duration { return time.Duration(ns) }

// Meta returns the file's metadata.
func (r *Reader) Meta() Meta { return r.meta }

// HasValues reports whether the file's trace column name (ColModel, ...) may hold a
// non-null value: false when the file has no such column, or when the footer's statistics
// say every value of it is null (llmreplay's writer stores every column, null when the
// source has none), so a caller can skip a pass over the file. A list column (parents)
// counts as without values when every list is null or empty: its one leaf holds nulls only.
func (r *Reader) HasValues(name string) bool {
	if !r.has[name] {
		return false
	}
	md := r.pf.MetaData()
	leaf := leafOf(md, name)
	if leaf < 0 {
		return true
	}
	for i := 0; i < r.pf.NumRowGroups(); i++ {
		rg := md.RowGroup(i)
		cc, err := rg.ColumnChunk(leaf)
		if err != nil {
			return true
		}
		if ok, _ := cc.StatsSet(); !ok {
			return true
		}
		st, err := cc.Statistics()
		if err != nil || !st.HasNullCount() || st.NullCount() != rg.NumRows() {
			return true
		}
	}
	return false
}

// NumRows returns the number of rows in the file (from its footer).
func (r *Reader) NumRows() int64 { return r.numRows }

// Name returns the file name the Reader reports in errors.
func (r *Reader) Name() string { return r.name }

// Next advances to the next request. It returns false at the end of the file or on the
// first error; Err tells which.
func (r *Reader) Next() bool {
	if r.end {
		return false
	}
	for r.rec == nil || r.i+1 >= int(r.rec.NumRows()) {
		if !r.rr.Next() {
			r.end = true
			if err := r.rr.Err(); err != nil && !errors.Is(err, io.EOF) {
				r.err = fmt.Errorf("trace: read %s row %d: %w", r.name, r.row, err)
			}
			return false
		}
		// rr.Next released the previous record; the new one stays valid until the next call.
		r.rec = r.rr.Record()
		r.i = -1
		if err := r.bind(); err != nil {
			r.err = fmt.Errorf("trace: read %s row %d: %w", r.name, r.row, err)
			r.end = true
			return false
		}
	}
	r.i++
	c, i := &r.cols, r.i
	req := Request{
		ID:           c.id.Value(i),
		Arrival:      durationNS(c.arrival.Value(i)),
		PromptTokens: c.prompt.Value(i),
		OutputTokens: c.output.Value(i),
	}
	if c.id.IsNull(i) {
		return r.fail("%s: null", ColRequestID)
	}
	if c.arrival.IsNull(i) {
		return r.fail("%s: null", ColArrivalNS)
	}
	if c.prompt.IsNull(i) || c.output.IsNull(i) {
		return r.fail("token counts: null")
	}
	if c.session != nil && c.session.IsValid(i) {
		req.SessionID, req.HasSession = c.session.Value(i), true
	}
	if c.blocks != nil && c.blocks.IsValid(i) {
		s, e := c.blocks.ValueOffsets(i)
		// A fresh slice per row: callers may keep requests beyond the next call to Next,
		// and the record's memory is released then.
		req.PrefixBlocks = make([]int64, e-s)
		copy(req.PrefixBlocks, c.blockVals.Int64Values()[s:e])
	}
	if c.model != nil && c.model.IsValid(i) {
		m := c.model.Value(i)
		if v, ok := r.models[m]; ok {
			req.Model = v
		} else {
			v = strings.Clone(m)
			if len(r.models) < 1024 {
				r.models[v] = v
			}
			req.Model = v
		}
	}
	if c.text != nil && c.text.IsValid(i) {
		req.Prompt = strings.Clone(c.text.Value(i))
	}
	if c.tools != nil && c.tools.IsValid(i) {
		req.ToolTokens, req.HasToolTokens = c.tools.Value(i), true
	}
	req.Call = c.call(i)
	if err := c.readParams(i, &req); err != nil {
		return r.fail("request_id %d: %v", req.ID, err)
	}
	if err := c.readImages(i, &req); err != nil {
		return r.fail("request_id %d: %v", req.ID, err)
	}
	if err := req.Validate(); err != nil {
		return r.fail("request_id %d: %v", req.ID, err)
	}
	if int64(req.Arrival) < r.last {
		return r.fail("request_id %d: arrival_ns: %d is before the previous row's %d (a trace is sorted by arrival)", req.ID, int64(req.Arrival), r.last)
	}
	r.last = int64(req.Arrival)
	r.cur = req
	r.row++
	return true
}

func (r *Reader) fail(format string, a ...any) bool {
	r.err = fmt.Errorf("trace: read %s row %d: %s", r.name, r.row, fmt.Sprintf(format, a...))
	r.end = true
	return false
}

// bind looks the current record's columns up by name.
func (r *Reader) bind() error {
	sc := r.rec.Schema()
	col := func(name string) arrow.Array {
		if is := sc.FieldIndices(name); len(is) > 0 {
			return r.rec.Column(is[0])
		}
		return nil
	}
	r.cols = readerCols{}
	var ok bool
	if r.cols.id, ok = col(ColRequestID).(*array.Int64); !ok {
		return fmt.Errorf("%s: unexpected Arrow type", ColRequestID)
	}
	if r.cols.arrival, ok = col(ColArrivalNS).(*array.Int64); !ok {
		return fmt.Errorf("%s: unexpected Arrow type", ColArrivalNS)
	}
	if r.cols.prompt, ok = col(ColPromptTokens).(*array.Int32); !ok {
		return fmt.Errorf("%s: unexpected Arrow type", ColPromptTokens)
	}
	if r.cols.output, ok = col(ColOutputTokens).(*array.Int32); !ok {
		return fmt.Errorf("%s: unexpected Arrow type", ColOutputTokens)
	}
	if a := col(ColSessionID); a != nil {
		r.cols.session, _ = a.(*array.Int64)
	}
	if a := col(ColPrefixBlocks); a != nil {
		if l, ok := a.(*array.List); ok {
			r.cols.blocks = l
			r.cols.blockVals, _ = l.ListValues().(*array.Int64)
			if r.cols.blockVals == nil {
				return fmt.Errorf("%s: unexpected Arrow type", ColPrefixBlocks)
			}
		} else {
			return fmt.Errorf("%s: unexpected Arrow type %s", ColPrefixBlocks, a.DataType())
		}
	}
	if a := col(ColModel); a != nil {
		r.cols.model, _ = a.(*array.String)
	}
	if a := col(ColPrompt); a != nil {
		r.cols.text, _ = a.(*array.String)
	}
	r.cols.tools, _ = col(ColToolTokens).(*array.Int32)
	r.cols.api, _ = col(ColAPI).(*array.String)
	r.cols.maxTokens, _ = col(ColMaxTokens).(*array.Int32)
	r.cols.nCount, _ = col(ColN).(*array.Int32)
	r.cols.stream, _ = col(ColStream).(*array.Boolean)
	if err := r.cols.bindImages(col); err != nil {
		return err
	}
	return r.cols.bindCall(col)
}

// bindImages looks the image columns up; a file may have none of them.
func (c *readerCols) bindImages(col func(string) arrow.Array) error {
	c.images, _ = col(ColImages).(*array.Int32)
	c.imageTokens, _ = col(ColImageTokens).(*array.Int32)
	list := func(name string) (*array.List, *array.Int32, error) {
		a := col(name)
		if a == nil {
			return nil, nil, nil
		}
		l, ok := a.(*array.List)
		var v *array.Int32
		if ok {
			v, ok = l.ListValues().(*array.Int32)
		}
		if !ok {
			return nil, nil, fmt.Errorf("%s: unexpected Arrow type %s", name, a.DataType())
		}
		return l, v, nil
	}
	var err error
	if c.widths, c.widthVals, err = list(ColImageWidths); err != nil {
		return err
	}
	c.heights, c.heightVals, err = list(ColImageHeights)
	return err
}

// readImages sets req's images and image tokens from row i, checking the columns agree:
// a non-negative count, and size lists both null or both as long as the count.
func (c *readerCols) readImages(i int, req *Request) error {
	var n int32
	if c.images != nil && c.images.IsValid(i) {
		n = c.images.Value(i)
	}
	if n < 0 || n > MaxImages {
		return fmt.Errorf("%s: %d not in [0, %d]", ColImages, n, MaxImages)
	}
	wOK := c.widths != nil && c.widths.IsValid(i)
	hOK := c.heights != nil && c.heights.IsValid(i)
	if wOK != hOK {
		return fmt.Errorf("%s and %s: one is null and the other is not (both null: sizes unknown; both lists: one size per image)", ColImageWidths, ColImageHeights)
	}
	if c.imageTokens != nil && c.imageTokens.IsValid(i) {
		req.ImageTokens, req.HasImageTokens = c.imageTokens.Value(i), true
	}
	if !wOK {
		if n > 0 {
			req.Images = make([]Image, n) // 0x0: sizes unknown
		}
		return nil
	}
	ws, we := c.widths.ValueOffsets(i)
	hs, he := c.heights.ValueOffsets(i)
	if we-ws != int64(n) || he-hs != int64(n) {
		return fmt.Errorf("%s has %d values and %s %d, want %s = %d of each", ColImageWidths, we-ws, ColImageHeights, he-hs, ColImages, n)
	}
	if n == 0 {
		return nil
	}
	req.Images = make([]Image, n)
	for k := range req.Images {
		wi, hi := int(ws)+k, int(hs)+k
		if c.widthVals.IsNull(wi) || c.heightVals.IsNull(hi) {
			return fmt.Errorf("%s/%s: image %d has a null size", ColImageWidths, ColImageHeights, k)
		}
		req.Images[k] = Image{Width: c.widthVals.Value(wi), Height: c.heightVals.Value(hi)}
		if !req.Images[k].Known() {
			return fmt.Errorf("%s/%s: image %d is 0x0 in a size list (an unknown size is a null list)", ColImageWidths, ColImageHeights, k)
		}
	}
	return nil
}

// bindCall looks the agent columns up; a file may have any of them, or none.
func (c *readerCols) bindCall(col func(string) arrow.Array) error {
	if a := col(ColParents); a != nil {
		l, ok := a.(*array.List)
		if ok {
			c.parentVals, ok = l.ListValues().(*array.Int64)
		}
		if !ok {
			return fmt.Errorf("%s: unexpected Arrow type %s", ColParents, a.DataType())
		}
		c.parents = l
	}
	c.gap, _ = col(ColGapNS).(*array.Int64)
	c.duration, _ = col(ColDurationNS).(*array.Int64)
	c.gapKind, _ = col(ColGapKind).(*array.String)
	c.prefix, _ = col(ColPrefixTokens).(*array.Int32)
	c.cached, _ = col(ColCachedTokens).(*array.Int32)
	c.reas, _ = col(ColReasoningTokens).(*array.Int32)
	return nil
}

// call returns row i's Call, nil when every agent column of it is null.
func (c *readerCols) call(i int) *Call {
	k := NewCall()
	if c.parents != nil && c.parents.IsValid(i) {
		s, e := c.parents.ValueOffsets(i)
		k.Parents = make([]int64, e-s) // the caller keeps it beyond the record's release
		copy(k.Parents, c.parentVals.Int64Values()[s:e])
	}
	if c.gap != nil && c.gap.IsValid(i) {
		k.Gap = time.Duration(c.gap.Value(i))
	}
	if c.duration != nil && c.duration.IsValid(i) {
		k.Duration = time.Duration(c.duration.Value(i))
	}
	if c.gapKind != nil && c.gapKind.IsValid(i) {
		switch v := c.gapKind.Value(i); v {
		case GapTool: // the constants, not the record's bytes, which are released
			k.GapKind = GapTool
		case GapUser:
			k.GapKind = GapUser
		default:
			k.GapKind = strings.Clone(v) // Validate names it
		}
	}
	opt := func(a *array.Int32) int32 {
		if a != nil && a.IsValid(i) {
			return a.Value(i)
		}
		return Unknown
	}
	k.PrefixTokens, k.CachedTokens, k.ReasoningTokens = opt(c.prefix), opt(c.cached), opt(c.reas)
	if k.IsZero() {
		return nil
	}
	return k
}

// Request returns the current request. Its PrefixBlocks and strings are the caller's to keep.
func (r *Reader) Request() Request { return r.cur }

// Err returns the first error met, or nil at a normal end of file.
func (r *Reader) Err() error { return r.err }

// Close releases the file.
func (r *Reader) Close() error {
	r.end = true
	if r.rr != nil {
		r.rr.Release()
		r.rr = nil
	}
	var err error
	if r.pf != nil {
		err = r.pf.Close()
		r.pf = nil
	}
	if r.f != nil {
		if cerr := r.f.Close(); err == nil {
			err = cerr
		}
		r.f = nil
	}
	return err
}
