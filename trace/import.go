package trace

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"github.com/llmreplay/llmreplay/internal/filekind"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// Import formats accepted by Import.
const (
	FormatAzure = "azure"
	// FormatAzureLMM is Azure's 2025 multimodal production trace (AzureLMMInferenceDataset2025):
	// the azure columns and NumImages.
	FormatAzureLMM = "azure-lmm"
	FormatBurstGPT = "burstgpt"
	FormatMooncake = "mooncake"
	FormatBailian  = "bailian"
	FormatShareGPT = "sharegpt"
	FormatCSV      = "csv"
	FormatJSONL    = "jsonl"
	// FormatCopilotAgent is the GitHub Copilot coding-agent trace (import_copilot.go).
	FormatCopilotAgent = "copilot-agent"
	FormatTraceLab     = "tracelab"
	FormatWeka         = "weka"
)

// ImportFormats lists the formats Import accepts.
var ImportFormats = []string{FormatAzure, FormatAzureLMM, FormatBurstGPT, FormatMooncake, FormatBailian, FormatShareGPT, FormatCSV, FormatJSONL,
	FormatCopilotAgent, FormatTraceLab, FormatWeka}

// ImportOptions configures Import. Only Format is required.
type ImportOptions struct {
	Format string
	// Name is the input's name in error messages (the file name); "-" or "" for stdin.
	Name string
	// Sort accepts rows out of arrival order by buffering every row and sorting them
	// (stably, so ties keep source order). Memory is about 160 bytes per row (a buffered
	// row's size) plus 8 per prefix block and 8 per image: 1 GB holds roughly 6 M rows
	// without prefix blocks or images. Without Sort a row
	// earlier than its predecessor is an error naming the row, and memory stays constant.
	// FormatCopilotAgent always sorts (about 290 bytes a row), whatever Sort says: no order
	// of its session lines is an arrival order.
	Sort bool
	// KeepFailed keeps BurstGPT's failed requests (0 response tokens) with their zero
	// lengths raised to 1, so the arrival process is kept whole. Default: drop and count.
	KeepFailed bool
	// Map maps trace fields (arrival, prompt_tokens, output_tokens, session_id,
	// request_id, model, prompt) to source columns or JSON keys, for FormatCSV/FormatJSONL.
	Map map[string]string
	// TimeUnit is the unit of the generic formats' arrival column: s, ms, us, ns, or
	// datetime (wall-clock timestamps as parseUnixNS accepts).
	TimeUnit string
	// Arrivals makes the arrival times of ShareGPT, which records none.
	Arrivals ArrivalSpec
	// Limit stops after this many rows written (0: no limit).
	Limit int64
}

// ImportReport counts what an import did.
type ImportReport struct {
	Format      string           `json:"format"`
	Source      string           `json:"source"` // the llmreplay.source written
	RowsRead    int64            `json:"rows_read"`
	RowsWritten int64            `json:"rows_written"`
	Dropped     map[string]int64 `json:"dropped,omitempty"` // reason -> rows
	Adjusted    map[string]int64 `json:"adjusted,omitempty"`
	Span        time.Duration    `json:"span_ns"`
}

func (r *ImportReport) drop(reason string) {
	if r.Dropped == nil {
		r.Dropped = map[string]int64{}
	}
	r.Dropped[reason]++
}

func (r *ImportReport) adjust(reason string) {
	if r.Adjusted == nil {
		r.Adjusted = map[string]int64{}
	}
	r.Adjusted[reason]++
}

// row is one parsed source row before arrivals are rebased to the trace start.
type row struct {
	ts   int64 // arrival, ns: Unix time when pipeline.abs, else relative to the source's zero
	line int64 // source line (or record) number, for errors
	req  Request
}

// pipeline receives parsed rows from a format's parser, enforces ordering (or sorts),
// rebases arrivals so the first request arrives at 0, and writes.
type pipeline struct {
	ctx    context.Context
	name   string
	opts   *ImportOptions
	w      *Writer
	rep    *ImportReport
	meta   Meta
	abs    bool // row.ts are Unix times: the start goes into the metadata
	what   string
	first  bool
	t0     int64
	prev   row
	buf    []row // Sort only
	models map[string]string
}

// errStop ends a parse early when Limit rows are written.
var errStop = errors.New("limit reached")

func (p *pipeline) errorf(line int64, format string, a ...any) error {
	return &SyntaxError{File: p.name, Unit: p.what, Line: line, Field: FieldArrival, Err: fmt.Errorf(format, a...)}
}

// SyntaxError is a bad row in an import's input: the file, the line (or the record, for
// formats without lines), the field, and what is wrong with it. Its message reads
// "trace: import FILE line N: FIELD: problem".
type SyntaxError struct {
	File  string
	Unit  string // "line", or "conversation" for ShareGPT
	Line  int64  // 1-based line; 0-based record index when Unit is not "line"
	Field string // column or key; "" for the row as a whole
	Err   error
}

// Error says where, and what was wrong; text taken from the input is shown escaped and cut
// (filekind.Printable), so a message never carries control bytes or a whole binary line.
func (e *SyntaxError) Error() string {
	msg := filekind.Printable(e.Err.Error(), 300)
	if e.Field == "" {
		return fmt.Sprintf("trace: import %s %s %d: %s", e.File, e.Unit, e.Line, msg)
	}
	return fmt.Sprintf("trace: import %s %s %d: %s: %s", e.File, e.Unit, e.Line, filekind.Printable(e.Field, 100), msg)
}

func (e *SyntaxError) Unwrap() error { return e.Err }

func (p *pipeline) emit(r row) error {
	if p.opts.Sort {
		p.buf = append(p.buf, r)
		return nil
	}
	if p.first && r.ts < p.prev.ts {
		return p.errorf(r.line, "%s earlier than the previous row (%s %d); rows must be in arrival order, or use --sort (ties keep source order)",
			time.Duration(p.prev.ts-r.ts), p.what, p.prev.line)
	}
	if err := p.write(r); err != nil {
		return err
	}
	p.prev = r
	if p.opts.Limit > 0 && p.rep.RowsWritten >= p.opts.Limit {
		return errStop
	}
	if p.rep.RowsWritten%65536 == 0 {
		if err := p.ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (p *pipeline) write(r row) error {
	if !p.first {
		p.first = true
		p.t0 = r.ts
		if p.abs {
			p.meta.StartUnixNS = r.ts
		}
		if err := p.w.SetMeta(p.meta); err != nil {
			return err
		}
	}
	d := r.ts - p.t0
	if d < 0 {
		return p.errorf(r.line, "before the first row") // unreachable: ordered above
	}
	r.req.Arrival = time.Duration(d)
	if err := p.w.Write(r.req); err != nil {
		return fmt.Errorf("trace: import %s %s %d: %w", p.name, p.what, r.line, err)
	}
	p.rep.RowsWritten++
	p.rep.Span = r.req.Arrival
	return nil
}

// finish writes the sorted rows when Sort is set.
func (p *pipeline) finish() error {
	if !p.opts.Sort {
		if !p.first {
			return p.w.SetMeta(p.meta)
		}
		return nil
	}
	sort.SliceStable(p.buf, func(i, j int) bool { return p.buf[i].ts < p.buf[j].ts })
	for i, r := range p.buf {
		if p.opts.Limit > 0 && int64(i) >= p.opts.Limit {
			break
		}
		if err := p.write(r); err != nil {
			return err
		}
	}
	if !p.first {
		return p.w.SetMeta(p.meta)
	}
	p.buf = nil
	return nil
}

// Import reads a trace in opts.Format from in and writes it to w, streaming: memory does
// not grow with the input (except with Sort, FormatCopilotAgent, and Bailian's
// chat-to-session map). The caller owns w: on error it should Abort it (ImportFile does).
// Request ids are the 0-based index of the data row in the source (dropped rows keep
// their index; for FormatCopilotAgent, of the LLM call among the file's calls), so an id
// leads back to its source line.
func Import(ctx context.Context, in io.Reader, opts ImportOptions, w *Writer) (ImportReport, error) {
	rep := ImportReport{Format: opts.Format}
	name := opts.Name
	if name == "" {
		name = "-"
	}
	p := &pipeline{ctx: ctx, name: name, opts: &opts, w: w, rep: &rep, what: "line"}
	in, err := sniffInput(in, opts.Format, name)
	if err != nil {
		return rep, err
	}
	switch opts.Format {
	case FormatAzure:
		err = importAzure(in, p, false)
	case FormatAzureLMM:
		err = importAzure(in, p, true)
	case FormatBurstGPT:
		err = importBurstGPT(in, p)
	case FormatMooncake:
		err = importMooncake(in, p)
	case FormatBailian:
		err = importBailian(in, p)
	case FormatShareGPT:
		err = importShareGPT(in, p)
	case FormatCSV:
		err = importGenericCSV(in, p)
	case FormatJSONL:
		err = importGenericJSONL(in, p)
	case FormatCopilotAgent:
		err = importCopilot(in, p)
	case FormatTraceLab:
		err = importTraceLab(in, p)
	case FormatWeka:
		err = importWeka(in, p)
	default:
		return rep, fmt.Errorf("trace: import %s: unknown format %q (want one of %s)", name, opts.Format, strings.Join(ImportFormats, ", "))
	}
	if errors.Is(err, errStop) {
		err = nil
	}
	if err == nil {
		err = p.finish()
	}
	rep.Source = p.meta.Source
	return rep, err
}

// ImportFile imports the file inPath ("-" for stdin) into a new trace file outPath.
// On any error nothing is left at outPath.
func ImportFile(ctx context.Context, inPath, outPath string, opts ImportOptions) (ImportReport, error) {
	var in io.Reader = os.Stdin
	if inPath != "-" {
		f, err := os.Open(inPath)
		if err != nil {
			return ImportReport{Format: opts.Format}, fmt.Errorf("trace: import: %w", err)
		}
		defer f.Close()
		in = f
	}
	if opts.Name == "" {
		opts.Name = inPath
	}
	w, err := Create(outPath, Meta{})
	if err != nil {
		return ImportReport{Format: opts.Format}, err
	}
	rep, err := Import(ctx, in, opts, w)
	if err != nil {
		w.Abort()
		return rep, err
	}
	return rep, w.Close()
}

// sniffInput looks at the input's first bytes before any parsing, so that a file of the
// wrong kind gets one line saying what it is instead of a parse error quoting its binary
// content. A gzip-compressed input is read through gzip (azure.csv.gz imports as is); other
// compressed or binary inputs, and JSON given to a CSV format or the reverse, are refused
// with the likely fix.
func sniffInput(in io.Reader, format, name string) (io.Reader, error) {
	br := bufio.NewReaderSize(in, 64<<10)
	head, _ := br.Peek(filekind.HeadSize)
	k := filekind.Sniff(head)
	if k == filekind.Gzip {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("trace: import %s: gzip: %w", name, err)
		}
		br = bufio.NewReaderSize(zr, 64<<10)
		head, _ = br.Peek(filekind.HeadSize)
		if k = filekind.Sniff(head); k == filekind.Gzip {
			return nil, fmt.Errorf("trace: import %s: compressed twice (gzip inside gzip)", name)
		}
	}
	csvFormat := format == FormatAzure || format == FormatAzureLMM || format == FormatBurstGPT || format == FormatCSV
	jsonFormat := format == FormatMooncake || format == FormatBailian || format == FormatShareGPT || format == FormatJSONL ||
		format == FormatCopilotAgent || format == FormatTraceLab || format == FormatWeka
	switch {
	case k == filekind.Empty || k == filekind.Text && csvFormat || k == filekind.JSON && jsonFormat:
		return br, nil
	case k == filekind.JSON && csvFormat:
		return nil, fmt.Errorf("trace: import %s: this is JSON text, not %s CSV; --from mooncake, bailian, sharegpt, jsonl or copilot-agent read JSON", name, format)
	case k == filekind.Text && jsonFormat:
		return nil, fmt.Errorf("trace: import %s: this is text that is not JSON (CSV?), not %s JSON; --from azure, azure-lmm, burstgpt or csv read CSV", name, format)
	case !csvFormat && !jsonFormat:
		return br, nil // an unknown format: Import says so
	}
	want := format + " CSV text"
	if jsonFormat {
		want = format + " JSON text"
	}
	return nil, fmt.Errorf("trace: import %s: %s", name, filekind.Mismatch(k, want, name))
}
