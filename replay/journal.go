package replay

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
	"github.com/llmreplay/llmreplay/replay/results"
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
	rows       int64
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

// Path returns the journal's file name.
func (j *ipcStream) Path() string { return j.path }

// Rows returns the number of rows added so far.
func (j *ipcStream) Rows() int64 { return j.rows }

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
func CreateJournal(path string, run *results.RunMeta) (*Journal, error) {
	schema, err := results.SchemaWithRun(run)
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
	j.rows++
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
}

// bind binds every column of b's schema; it fails on a column of the schema that Result
// does not fill, so the writer cannot fall behind the contract.
func (c *resultBuilders) bind(b *array.RecordBuilder) error {
	bs, err := results.NewBuilders(b)
	if err != nil {
		return err
	}
	c.requestID = results.Builder[*array.Int64Builder](bs, results.ColRequestID)
	c.shard = results.Builder[*array.Int32Builder](bs, results.ColShard)
	c.scheduled = results.Builder[*array.Int64Builder](bs, results.ColScheduledNS)
	c.sent = results.Builder[*array.Int64Builder](bs, results.ColSentNS)
	c.first = results.Builder[*array.Int64Builder](bs, results.ColFirstTokenNS)
	c.end = results.Builder[*array.Int64Builder](bs, results.ColEndNS)
	c.chunkNS = results.Builder[*array.ListBuilder](bs, results.ColChunkNS)
	c.chunkTokens = results.Builder[*array.ListBuilder](bs, results.ColChunkTokens)
	c.prompt = results.Builder[*array.Int32Builder](bs, results.ColPromptTokens)
	c.promptServer = results.Builder[*array.Int32Builder](bs, results.ColPromptTokensServer)
	c.target = results.Builder[*array.Int32Builder](bs, results.ColOutputTokensTarget)
	c.output = results.Builder[*array.Int32Builder](bs, results.ColOutputTokens)
	c.source = results.Builder[*array.StringBuilder](bs, results.ColOutputTokensSource)
	c.status = results.Builder[*array.StringBuilder](bs, results.ColStatus)
	c.httpStatus = results.Builder[*array.Int32Builder](bs, results.ColHTTPStatus)
	c.errMsg = results.Builder[*array.StringBuilder](bs, results.ColError)
	c.ttft = results.Builder[*array.Float64Builder](bs, results.ColTTFTMS)
	c.tpot = results.Builder[*array.Float64Builder](bs, results.ColTPOTMS)
	c.e2e = results.Builder[*array.Float64Builder](bs, results.ColE2EMS)
	c.sessionID = results.Builder[*array.Int64Builder](bs, results.ColSessionID)
	c.turn = results.Builder[*array.Int32Builder](bs, results.ColTurn)
	c.sessionWait = results.Builder[*array.Int64Builder](bs, results.ColSessionWaitNS)
	c.promptCached = results.Builder[*array.Int32Builder](bs, results.ColPromptTokensCached)
	if err := bs.Done(); err != nil {
		return err
	}
	var ok1, ok2 bool
	c.chunkNSv, ok1 = c.chunkNS.ValueBuilder().(*array.Int64Builder)
	c.chunkTokensv, ok2 = c.chunkTokens.ValueBuilder().(*array.Int32Builder)
	if !ok1 || !ok2 {
		return fmt.Errorf("list builders of %s or %s hold the wrong type", results.ColChunkNS, results.ColChunkTokens)
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
	results.AppendInt64(c.sent, r.SentNS)
	results.AppendInt64(c.first, r.FirstTokenNS)
	results.AppendInt64(c.end, r.EndNS)
	c.chunkNS.Append(true)
	c.chunkNSv.AppendValues(r.ChunkNS, nil)
	if r.ChunkTokens == nil {
		c.chunkTokens.AppendNull()
	} else {
		c.chunkTokens.Append(true)
		c.chunkTokensv.AppendValues(r.ChunkTokens, nil)
	}
	c.prompt.Append(r.PromptTokens)
	results.AppendInt32(c.promptServer, r.PromptTokensServer)
	c.target.Append(r.OutputTokensTarget)
	results.AppendInt32(c.output, r.OutputTokens)
	c.source.Append(r.OutputTokensSource)
	c.status.Append(string(r.Status))
	results.AppendInt32(c.httpStatus, r.HTTPStatus)
	if r.Error == "" {
		c.errMsg.AppendNull()
	} else {
		c.errMsg.Append(r.Error)
	}
	v, ok := r.TTFT()
	appendF64(c.ttft, v, ok)
	v, ok = r.TPOT()
	appendF64(c.tpot, v, ok)
	v, ok = r.E2E()
	appendF64(c.e2e, v, ok)
	results.AppendInt64(c.sessionID, r.SessionID)
	results.AppendInt32(c.turn, r.Turn)
	results.AppendInt64(c.sessionWait, r.SessionWaitNS)
	results.AppendInt32(c.promptCached, r.PromptTokensCached)
}

// ConvertInfo tells what ConvertJournal found.
type ConvertInfo struct {
	Rows int64            // records written to the results file
	Run  *results.RunMeta // the run metadata of the journal
	Tail error            // why reading stopped before a clean end of stream (a killed run's cut batch); nil after a clean close
}

// parquetRowGroup bounds a row group: big enough for efficient scans, small enough that
// converting a million-request journal stays within a few tens of MB.
const parquetRowGroup = 32 * 1024

// ConvertJournal turns the journal at journal into the Parquet results file out, through a
// temporary file in out's directory renamed on success, so out is never half-written. It
// keeps every whole batch; when the journal ends in a cut batch (a killed run), the
// records before it are kept and info.Tail says what was cut.
func ConvertJournal(journal, out string) (ConvertInfo, error) {
	return convertIPC(journal, out, "results", func(s *arrow.Schema) (*results.RunMeta, error) {
		if _, err := results.Check(s); err != nil {
			return nil, err
		}
		return results.ParseRunMeta(s)
	})
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
