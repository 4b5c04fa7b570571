package results

import (
	"fmt"
	"github.com/llmreplay/llmreplay/internal/filekind"
	"io"
	"os"
	"time"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/compress"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/internal/atomicfile"
)

// JournalSuffix is appended to a results path to name its journal.
const JournalSuffix = ".journal"

// DefaultFlushInterval bounds how long a record may sit in memory before it reaches the
// journal file: a killed run loses at most this much (plus the batch being written).
const DefaultFlushInterval = 500 * time.Millisecond

// journalBatchRows is the most records kept before a batch is written regardless of time.
const journalBatchRows = 4096

// Journal appends results to a crash-safe Arrow IPC stream: the schema (with the run
// metadata) first, then one record batch per Flush. A reader recovers every whole batch
// of a journal whose writer was killed. A Journal is not safe for concurrent use: one
// goroutine (the run's writer) owns it.
type Journal struct {
	ipcStream
	cols resultBuilders
}

// ipcStream is what a results journal and a metrics journal share: an Arrow IPC stream
// file written one record batch per flush, its schema first. what names it in errors.
type ipcStream struct {
	path, what string
	f          *os.File
	w          *ipc.Writer
	b          *array.RecordBuilder
	pending    int
}

// create creates (truncating) the stream's file and writes its schema, so that even a run
// killed before its first row leaves a journal recover turns into a valid, empty file. On
// error the builder is released and nothing is left open.
func (j *ipcStream) create(schema *arrow.Schema) error {
	// 0644 under the umask, like the file it becomes (os.Create's 0666 would make it
	// group-writable under umask 002).
	f, err := os.OpenFile(j.path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, atomicfile.Perm)
	if err != nil {
		j.b.Release()
		return fmt.Errorf("replay: create %s: %w", j.what, err)
	}
	j.f = f
	j.w = ipc.NewWriter(f, ipc.WithSchema(schema), ipc.WithAllocator(memory.DefaultAllocator))
	if err := j.writeBatch(); err != nil {
		f.Close()
		j.b.Release()
		return err
	}
	return nil
}

// Flush writes the pending rows, if any, as one batch to the file (one write to the
// operating system, so the batch survives the process being killed).
func (j *ipcStream) Flush() error {
	if j.pending == 0 {
		return nil
	}
	return j.writeBatch()
}

func (j *ipcStream) writeBatch() error {
	rec := j.b.NewRecord()
	defer rec.Release()
	j.pending = 0
	if err := j.w.Write(rec); err != nil {
		return fmt.Errorf("replay: write %s %s: %w", j.what, j.path, err)
	}
	return nil
}

// Close flushes, ends the stream and closes the file.
func (j *ipcStream) Close() error {
	err := j.Flush()
	if e := j.w.Close(); err == nil && e != nil {
		err = fmt.Errorf("replay: close %s %s: %w", j.what, j.path, e)
	}
	j.b.Release()
	if e := j.f.Sync(); err == nil && e != nil {
		err = fmt.Errorf("replay: sync %s %s: %w", j.what, j.path, e)
	}
	if e := j.f.Close(); err == nil && e != nil {
		err = fmt.Errorf("replay: close %s %s: %w", j.what, j.path, e)
	}
	return err
}

// CreateJournal creates (truncating) the journal file at path and writes its schema with
// the run metadata.
func CreateJournal(path string, run *RunMeta) (*Journal, error) {
	schema, err := SchemaWithRun(run)
	if err != nil {
		return nil, fmt.Errorf("replay: create journal %s: %w", path, err)
	}
	// Columns are bound by name before the file exists: a writer out of step with the
	// contract fails here, leaving nothing behind.
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	var cols resultBuilders
	if err := cols.bind(b); err != nil {
		b.Release()
		return nil, fmt.Errorf("replay: create journal %s: %w", path, err)
	}
	j := &Journal{ipcStream: ipcStream{path: path, what: "journal", b: b}, cols: cols}
	if err := j.create(schema); err != nil {
		return nil, err
	}
	return j, nil
}

// Add appends r to the pending batch, writing the batch when it is full.
func (j *Journal) Add(r *Result) error {
	j.cols.append(r)
	j.pending++
	if j.pending >= journalBatchRows {
		return j.Flush()
	}
	return nil
}

// resultBuilders holds the typed column builders of one RecordBuilder, bound by column
// name through the results contract once, when the journal is created.
type resultBuilders struct {
	requestID, scheduled, sent, first, end *array.Int64Builder
	shard, prompt, promptServer, target    *array.Int32Builder
	output, httpStatus                     *array.Int32Builder
	chunkNS, chunkTokens                   *array.ListBuilder
	chunkNSv                               *array.Int64Builder
	chunkTokensv                           *array.Int32Builder
	source, status, errMsg                 *array.StringBuilder
	ttft, tpot, e2e                        *array.Float64Builder
	sessionID, sessionWait                 *array.Int64Builder
	turn, promptCached                     *array.Int32Builder
	gap, recArrival, recDuration           *array.Int64Builder
	recCached                              *array.Int32Builder
	firstAnswer                            *array.Int64Builder
	reasoning                              *array.Int32Builder
	reasoningSource                        *array.StringBuilder
	images, imageTokens, inputs            *array.Int32Builder
}

// bind binds every column of b's schema; it fails on a column of the schema that Result
// does not fill, so the writer cannot fall behind the contract.
func (c *resultBuilders) bind(b *array.RecordBuilder) error {
	bs, err := NewBuilders(b)
	if err != nil {
		return err
	}
	c.requestID = Builder[*array.Int64Builder](bs, ColRequestID)
	c.shard = Builder[*array.Int32Builder](bs, ColShard)
	c.scheduled = Builder[*array.Int64Builder](bs, ColScheduledNS)
	c.sent = Builder[*array.Int64Builder](bs, ColSentNS)
	c.first = Builder[*array.Int64Builder](bs, ColFirstTokenNS)
	c.end = Builder[*array.Int64Builder](bs, ColEndNS)
	c.chunkNS = Builder[*array.ListBuilder](bs, ColChunkNS)
	c.chunkTokens = Builder[*array.ListBuilder](bs, ColChunkTokens)
	c.prompt = Builder[*array.Int32Builder](bs, ColPromptTokens)
	c.promptServer = Builder[*array.Int32Builder](bs, ColPromptTokensServer)
	c.target = Builder[*array.Int32Builder](bs, ColOutputTokensTarget)
	c.output = Builder[*array.Int32Builder](bs, ColOutputTokens)
	c.source = Builder[*array.StringBuilder](bs, ColOutputTokensSource)
	c.status = Builder[*array.StringBuilder](bs, ColStatus)
	c.httpStatus = Builder[*array.Int32Builder](bs, ColHTTPStatus)
	c.errMsg = Builder[*array.StringBuilder](bs, ColError)
	c.ttft = Builder[*array.Float64Builder](bs, ColTTFTMS)
	c.tpot = Builder[*array.Float64Builder](bs, ColTPOTMS)
	c.e2e = Builder[*array.Float64Builder](bs, ColE2EMS)
	c.sessionID = Builder[*array.Int64Builder](bs, ColSessionID)
	c.turn = Builder[*array.Int32Builder](bs, ColTurn)
	c.sessionWait = Builder[*array.Int64Builder](bs, ColSessionWaitNS)
	c.promptCached = Builder[*array.Int32Builder](bs, ColPromptTokensCached)
	c.gap = Builder[*array.Int64Builder](bs, ColGapNS)
	c.recArrival = Builder[*array.Int64Builder](bs, ColRecordedArrivalNS)
	c.recDuration = Builder[*array.Int64Builder](bs, ColRecordedDurationNS)
	c.recCached = Builder[*array.Int32Builder](bs, ColRecordedCachedTokens)
	c.firstAnswer = Builder[*array.Int64Builder](bs, ColFirstAnswerNS)
	c.reasoning = Builder[*array.Int32Builder](bs, ColReasoningTokens)
	c.reasoningSource = Builder[*array.StringBuilder](bs, ColReasoningTokensSource)
	c.images = Builder[*array.Int32Builder](bs, ColImages)
	c.imageTokens = Builder[*array.Int32Builder](bs, ColImageTokens)
	c.inputs = Builder[*array.Int32Builder](bs, ColInputs)
	if err := bs.Done(); err != nil {
		return err
	}
	var ok1, ok2 bool
	c.chunkNSv, ok1 = c.chunkNS.ValueBuilder().(*array.Int64Builder)
	c.chunkTokensv, ok2 = c.chunkTokens.ValueBuilder().(*array.Int32Builder)
	if !ok1 || !ok2 {
		return fmt.Errorf("list builders of %s or %s hold the wrong type", ColChunkNS, ColChunkTokens)
	}
	return nil
}

func appendF64(b *array.Float64Builder, v float64, ok bool) {
	if ok {
		b.Append(v)
	} else {
		b.AppendNull()
	}
}

func (c *resultBuilders) append(r *Result) {
	c.requestID.Append(r.RequestID)
	c.shard.Append(r.Shard)
	c.scheduled.Append(r.ScheduledNS)
	AppendInt64(c.sent, r.SentNS)
	AppendInt64(c.first, r.FirstTokenNS)
	AppendInt64(c.end, r.EndNS)
	c.chunkNS.Append(true)
	c.chunkNSv.AppendValues(r.ChunkNS, nil)
	if r.ChunkTokens == nil {
		c.chunkTokens.AppendNull()
	} else {
		c.chunkTokens.Append(true)
		c.chunkTokensv.AppendValues(r.ChunkTokens, nil)
	}
	c.prompt.Append(r.PromptTokens)
	AppendInt32(c.promptServer, r.PromptTokensServer)
	c.target.Append(r.OutputTokensTarget)
	AppendInt32(c.output, r.OutputTokens)
	c.source.Append(r.OutputTokensSource)
	c.status.Append(string(r.Status))
	AppendInt32(c.httpStatus, r.HTTPStatus)
	AppendString(c.errMsg, r.Error)
	v, ok := r.TTFT()
	appendF64(c.ttft, v, ok)
	v, ok = r.TPOT()
	appendF64(c.tpot, v, ok)
	v, ok = r.E2E()
	appendF64(c.e2e, v, ok)
	AppendInt64(c.sessionID, r.SessionID)
	AppendInt32(c.turn, r.Turn)
	AppendInt64(c.sessionWait, r.SessionWaitNS)
	AppendInt32(c.promptCached, r.PromptTokensCached)
	AppendInt64(c.gap, r.GapNS)
	AppendInt64(c.recArrival, r.RecordedArrivalNS)
	AppendInt64(c.recDuration, r.RecordedDurationNS)
	AppendInt32(c.recCached, r.RecordedCachedTokens)
	AppendInt64(c.firstAnswer, r.FirstAnswerNS)
	AppendInt32(c.reasoning, r.ReasoningTokens)
	AppendString(c.reasoningSource, r.ReasoningTokensSource)
	AppendInt32(c.images, r.Images)
	AppendInt32(c.imageTokens, r.ImageTokens)
	AppendInt32(c.inputs, r.Inputs)
}

// ConvertInfo tells what ConvertJournal found.
type ConvertInfo struct {
	Rows int64    // records written to the results file
	Run  *RunMeta // the run metadata of the journal
	Tail error    // why reading stopped before a clean end of stream (a killed run's cut batch); nil after a clean close
}

// parquetRowGroup bounds a row group: big enough for efficient scans, small enough that
// converting a million-request journal stays within a few tens of MB.
const parquetRowGroup = 32 * 1024

// ConvertJournal turns the journal at journal into the Parquet results file out, through a
// temporary file in out's directory renamed on success, so out is never half-written. It
// keeps every whole batch; when the journal ends in a cut batch (a killed run), the
// records before it are kept and info.Tail says what was cut.
func ConvertJournal(journal, out string) (ConvertInfo, error) {
	return ConvertJournalWith(journal, out, nil)
}

// ConvertJournalWith is ConvertJournal with the run metadata edited by edit (nil: kept)
// before it is written:
// a recording knows the hash of the trace its results go with only once that trace is
// written, after the results journal was created.
func ConvertJournalWith(journal, out string, edit func(*RunMeta)) (ConvertInfo, error) {
	return convertIPC(journal, out, "results", func(s *arrow.Schema) (*RunMeta, error) {
		if _, err := Check(s); err != nil {
			return nil, err
		}
		return ParseRunMeta(s)
	}, edit)
}

// newParquetWriter writes a journal's records to w as Parquet, its schema (with the run
// metadata) stored: the one set of writer properties of results and metrics files.
func newParquetWriter(schema *arrow.Schema, w io.Writer) (*pqarrow.FileWriter, error) {
	props := parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Snappy), parquet.WithDictionaryDefault(false), parquet.WithDataPageVersion(parquet.DataPageV2),
		parquet.WithMaxRowGroupLength(parquetRowGroup),
		parquet.WithCreatedBy("llmreplay"),
	)
	return pqarrow.NewFileWriter(schema, w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
}

// journalReadError is the error of a journal whose stream does not open: what the file is
// when it is not an Arrow IPC stream (filekind), else the reader's error.
func journalReadError(journal string, err error) error {
	if k, ok := filekind.OfFile(journal); ok && k != filekind.ArrowStream {
		return fmt.Errorf("replay: read journal %s: %s", journal, filekind.Mismatch(k, "a replay's journal (an Arrow IPC stream)", journal))
	}
	return fmt.Errorf("replay: read journal %s: schema: %w", journal, err)
}
