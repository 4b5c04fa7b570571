package analysis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// Results file metadata keys and format (docs/results-format.md).
const (
	MetaFormat    = "llmreplay.format"
	MetaRun       = "llmreplay.run"
	ResultsFormat = "results/v1"
)

// Request statuses, as the results file spells them.
const (
	StatusOK             = "ok"
	StatusHTTPError      = "http_error"
	StatusTimeout        = "timeout"
	StatusTransportError = "transport_error"
	StatusStreamError    = "stream_error"
	StatusDropped        = "dropped"
	StatusCanceled       = "canceled"
)

// statuses in code order; a request's status is stored as its index.
var statuses = []string{StatusOK, StatusHTTPError, StatusTimeout, StatusTransportError, StatusStreamError, StatusDropped, StatusCanceled}

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

// null marks a missing int64 (sent_ns, first_token_ns, end_ns) or int32 value.
const (
	null64 = math.MinInt64
	null32 = math.MinInt32
)

// RunMeta is the llmreplay.run metadata of one results file (RESULTS-CONTRACT / DESIGN.md).
type RunMeta struct {
	ToolVersion    string            `json:"tool_version"`
	RunID          string            `json:"run_id"`
	Mode           string            `json:"mode"`
	Endpoint       string            `json:"endpoint"`
	API            string            `json:"api"`
	Backend        string            `json:"backend"`
	Model          string            `json:"model"`
	Simulated      bool              `json:"simulated"`
	SimProfile     string            `json:"sim_profile"`
	TraceFile      string            `json:"trace_file"`
	TraceSHA256    string            `json:"trace_sha256"`
	Speedup        float64           `json:"speedup"`
	Rate           float64           `json:"rate"`
	Concurrency    int               `json:"concurrency"`
	ShardIndex     int               `json:"shard_index"`
	ShardCount     int               `json:"shard_count"`
	RunStartUnixNS int64             `json:"run_start_unix_ns"`
	MaxLatenessMS  float64           `json:"max_lateness_ms"`
	SLO            string            `json:"slo"`
	Host           string            `json:"host"`
	Flags          map[string]string `json:"flags"`
}

// LoadOptions control Load.
type LoadOptions struct {
	// AllowMixed pools files of different runs (different run_id) on absolute time instead
	// of refusing them.
	AllowMixed bool
	// BatchSize is the number of rows decoded per Arrow record; 0 means 64Ki.
	BatchSize int64
}

// Data is the part of one or more results files that analysis keeps: per-request scalars as
// columns (about 60 bytes a request), the inter-chunk gaps of ok requests (4 bytes a chunk)
// and the output tokens of ok requests binned at 10 ms by arrival. Chunk lists themselves are
// read batch by batch and never kept.
type Data struct {
	Files []string  // as given to Load
	Runs  []RunMeta // one per file, in Files order
	// Mixed is set when files of different runs were pooled (LoadOptions.AllowMixed).
	Mixed bool
	// ShiftNS is, per file, the offset added to its *_ns columns to put every file on one
	// time axis whose zero is the earliest run_start_unix_ns.
	ShiftNS []int64
	// BaseUnixNS is the wall-clock time of the common time axis's zero.
	BaseUnixNS int64

	// Per request, in file order (null64/null32 for nulls).
	scheduled, sent, first, end   []int64
	prompt, promptServer          []int32
	outTarget, outTokens          []int32
	outSource                     []uint8 // 0 none, 1 usage, 2 tokenizer
	status                        []uint8
	nChunks                       []int32
	chunkTokSum                   []int64 // sum of chunk_tokens; -1 when chunk_tokens is null
	firstChunkMismatch, hasChunkT int64

	itl       []float32 // ms, one per gap between consecutive chunks of ok requests
	itlTok    []float32 // ms per token, one per chunk after the first of ok requests with chunk_tokens
	itlTokW   []uint32  // tokens of that chunk: the weight of itlTok's sample
	tokenBins []float64 // output tokens of ok requests whose chunk arrived in [i*binNS, (i+1)*binNS)
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
		opts.BatchSize = 64 << 10
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
		pr, err := file.OpenParquetFile(p, false)
		if err != nil {
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
	d.BaseUnixNS = d.Runs[0].RunStartUnixNS
	for _, r := range d.Runs {
		d.BaseUnixNS = min(d.BaseUnixNS, r.RunStartUnixNS)
	}
	for i, o := range ofs {
		d.ShiftNS = append(d.ShiftNS, d.Runs[i].RunStartUnixNS-d.BaseUnixNS)
		if err := d.readFile(ctx, paths[i], o.fr, d.ShiftNS[i]); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func readMeta(path string, pr *file.Reader) (RunMeta, error) {
	var m RunMeta
	kv := pr.MetaData().KeyValueMetadata()
	// pqarrow stores the Arrow schema (and its metadata) under ARROW:schema; the
	// llmreplay keys are copied into the Parquet key-value metadata as well.
	format := kv.FindValue(MetaFormat)
	if format == nil {
		fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 1}, memory.DefaultAllocator)
		if err == nil {
			if sc, err := fr.Schema(); err == nil {
				md := sc.Metadata()
				if i := md.FindKey(MetaFormat); i >= 0 {
					v := md.Values()[i]
					format = &v
				}
				if i := md.FindKey(MetaRun); i >= 0 {
					v := md.Values()[i]
					return parseRun(path, format, &v)
				}
			}
		}
		return m, fmt.Errorf("analysis: read %s: schema metadata %s missing: not an llmreplay results file", path, MetaFormat)
	}
	return parseRun(path, format, kv.FindValue(MetaRun))
}

func parseRun(path string, format, run *string) (RunMeta, error) {
	var m RunMeta
	if format == nil || *format != ResultsFormat {
		got := "none"
		if format != nil {
			got = *format
		}
		return m, fmt.Errorf("analysis: read %s: schema metadata %s = %q, want %q", path, MetaFormat, got, ResultsFormat)
	}
	if run == nil {
		return m, fmt.Errorf("analysis: read %s: schema metadata %s missing", path, MetaRun)
	}
	if err := json.Unmarshal([]byte(*run), &m); err != nil {
		return m, fmt.Errorf("analysis: read %s: schema metadata %s: %w", path, MetaRun, err)
	}
	if m.ShardCount <= 0 {
		m.ShardCount = 1
	}
	if m.ShardCount > 1<<16 {
		return m, fmt.Errorf("analysis: read %s: schema metadata %s: shard_count %d is implausible", path, MetaRun, m.ShardCount)
	}
	if m.ShardIndex < 0 || m.ShardIndex >= m.ShardCount {
		return m, fmt.Errorf("analysis: read %s: schema metadata %s: shard_index %d outside [0, %d)", path, MetaRun, m.ShardIndex, m.ShardCount)
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
	"scheduled_ns", "sent_ns", "first_token_ns", "end_ns", "chunk_ns", "chunk_tokens",
	"prompt_tokens", "prompt_tokens_server", "output_tokens_target", "output_tokens",
	"output_tokens_source", "status",
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

func (d *Data) readFile(ctx context.Context, path string, fr *pqarrow.FileReader, shift int64) error {
	sc, err := fr.Schema()
	if err != nil {
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
	rr, err := fr.GetRecordReader(ctx, idx, nil)
	if err != nil {
		return fmt.Errorf("analysis: read %s: %w", path, err)
	}
	defer rr.Release()
	// The record's columns come back in schema order of the selected fields; map by name.
	pos := make([]int, len(resultColumns))
	rsc := rr.Schema()
	for i, name := range resultColumns {
		is := rsc.FieldIndices(name)
		if len(is) != 1 {
			return fmt.Errorf("analysis: read %s: column %s missing", path, name)
		}
		pos[i] = is[0]
	}
	row := int64(0)
	for rr.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec := rr.Record() // borrowed: released by the next call to Next
		if err := d.addRecord(path, row, rec, pos, shift); err != nil {
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

func (d *Data) addRecord(path string, row0 int64, rec arrow.Record, pos []int, shift int64) error {
	wrap := func(err error) error { return fmt.Errorf("analysis: read %s: %w", path, err) }
	sched, err := int64Col(rec, pos[cScheduled], "scheduled_ns")
	if err != nil {
		return wrap(err)
	}
	sent, err := int64Col(rec, pos[cSent], "sent_ns")
	if err != nil {
		return wrap(err)
	}
	first, err := int64Col(rec, pos[cFirst], "first_token_ns")
	if err != nil {
		return wrap(err)
	}
	end, err := int64Col(rec, pos[cEnd], "end_ns")
	if err != nil {
		return wrap(err)
	}
	chunks, ok := rec.Column(pos[cChunkNS]).(*array.List)
	if !ok {
		return wrap(colErr{"chunk_ns", "list<int64>"})
	}
	chunkVals, ok := chunks.ListValues().(*array.Int64)
	if !ok {
		return wrap(colErr{"chunk_ns", "list<int64>"})
	}
	ctoks, ok := rec.Column(pos[cChunkTokens]).(*array.List)
	if !ok {
		return wrap(colErr{"chunk_tokens", "list<int32>"})
	}
	ctokVals, ok := ctoks.ListValues().(*array.Int32)
	if !ok {
		return wrap(colErr{"chunk_tokens", "list<int32>"})
	}
	prompt, err := int32Col(rec, pos[cPrompt], "prompt_tokens")
	if err != nil {
		return wrap(err)
	}
	promptSrv, err := int32Col(rec, pos[cPromptServer], "prompt_tokens_server")
	if err != nil {
		return wrap(err)
	}
	outTarget, err := int32Col(rec, pos[cOutTarget], "output_tokens_target")
	if err != nil {
		return wrap(err)
	}
	outTok, err := int32Col(rec, pos[cOutTokens], "output_tokens")
	if err != nil {
		return wrap(err)
	}
	outSrc, ok := rec.Column(pos[cOutSource]).(*array.String)
	if !ok {
		return wrap(colErr{"output_tokens_source", "string"})
	}
	status, ok := rec.Column(pos[cStatus]).(*array.String)
	if !ok {
		return wrap(colErr{"status", "string"})
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
				if s == name {
					st = k
					break
				}
			}
			if st < 0 {
				return bad("status", "unknown status %q", s)
			}
		} else {
			return bad("status", "null")
		}
		if !sched.IsValid(i) {
			return bad("scheduled_ns", "null")
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
		}{{"scheduled_ns", sched.Value(i) + shift}, {"sent_ns", s}, {"first_token_ns", f}, {"end_ns", e}} {
			if c.v != null64 && (c.v < 0 || c.v >= int64(MaxSpan)) {
				return bad(c.name, "%d ns is outside [0, %v) from the run start", c.v-shift, MaxSpan)
			}
		}
		if st == int(stOK) {
			switch {
			case s == null64:
				return bad("sent_ns", "null in an ok request")
			case f == null64:
				return bad("first_token_ns", "null in an ok request")
			case e == null64:
				return bad("end_ns", "null in an ok request")
			}
		}
		if f != null64 && (s == null64 || f < s) {
			return bad("first_token_ns", "%d before sent_ns", f-shift)
		}
		if e != null64 && (f == null64 || e < f) {
			return bad("end_ns", "%d before first_token_ns", e-shift)
		}
		if !prompt.IsValid(i) {
			return bad("prompt_tokens", "null")
		}
		if !outTarget.IsValid(i) {
			return bad("output_tokens_target", "null")
		}
		ot := opt32(outTok)
		if ot != null32 && ot < 0 {
			return bad("output_tokens", "%d is negative", ot)
		}
		var src uint8
		if outSrc.IsValid(i) {
			switch outSrc.Value(i) {
			case "usage":
				src = 1
			case "tokenizer":
				src = 2
			case "":
			default:
				return bad("output_tokens_source", "unknown source %q", outSrc.Value(i))
			}
		}

		// Chunks: validate, record ITL and attribute tokens to time.
		var cs, ce int64
		if chunks.IsValid(i) {
			cs, ce = chunks.ValueOffsets(i)
		}
		nc := ce - cs
		if nc > 0 && s == null64 {
			return bad("chunk_ns", "chunks in a request never sent")
		}
		var ts, te int64
		hasTok := ctoks.IsValid(i)
		if hasTok {
			ts, te = ctoks.ValueOffsets(i)
			if te-ts != nc {
				return bad("chunk_tokens", "%d entries for %d chunks", te-ts, nc)
			}
			d.hasChunkT++
		}
		tokSum := int64(-1)
		if hasTok {
			tokSum = 0
			for k := ts; k < te; k++ {
				if v := ctokVals.Value(int(k)); v < 0 {
					return bad("chunk_tokens", "entry %d is %d", k-ts, v)
				} else {
					tokSum += int64(v)
				}
			}
		}
		prev := int64(-1)
		for k := cs; k < ce; k++ {
			v := chunkVals.Value(int(k))
			if v < prev {
				return bad("chunk_ns", "entry %d (%d) before entry %d (%d)", k-cs, v, k-cs-1, prev)
			}
			if v < 0 || v >= int64(MaxSpan)-s {
				return bad("chunk_ns", "entry %d (%d) is outside [0, %v) from the run start", k-cs, v, MaxSpan)
			}
			prev = v
		}
		if nc > 0 && (f == null64 || e == null64 || chunkVals.Value(int(cs)) != f-s || chunkVals.Value(int(ce-1)) != e-s) {
			d.firstChunkMismatch++
		}
		if st == int(stOK) && nc > 0 {
			// Tokens per chunk: chunk_tokens when the server sent them; else the reported
			// output_tokens spread evenly over the chunks (1 per chunk when unknown), so
			// the binned tokens of a request add up to its output_tokens.
			per := 1.0
			if !hasTok && ot != null32 {
				per = float64(ot) / float64(nc)
			}
			for k := cs; k < ce; k++ {
				t := s + chunkVals.Value(int(k))
				tok := per
				if hasTok {
					tok = float64(ctokVals.Value(int(ts + k - cs)))
				}
				b := t / binNS
				for int64(len(d.tokenBins)) <= b {
					d.tokenBins = append(d.tokenBins, 0)
				}
				d.tokenBins[b] += tok
				if k > cs {
					gap := float64(chunkVals.Value(int(k))-chunkVals.Value(int(k-1))) / 1e6
					d.itl = append(d.itl, float32(gap))
					if hasTok {
						kt := ctokVals.Value(int(ts + k - cs))
						if kt > 0 {
							d.itlTok = append(d.itlTok, float32(gap/float64(kt)))
							d.itlTokW = append(d.itlTokW, uint32(kt))
						}
					}
				}
			}
		}
		d.scheduled = append(d.scheduled, sched.Value(i)+shift)
		d.sent = append(d.sent, s)
		d.first = append(d.first, f)
		d.end = append(d.end, e)
		d.prompt = append(d.prompt, prompt.Value(i))
		d.promptServer = append(d.promptServer, opt32(promptSrv))
		d.outTarget = append(d.outTarget, outTarget.Value(i))
		d.outTokens = append(d.outTokens, ot)
		d.outSource = append(d.outSource, src)
		d.status = append(d.status, uint8(st))
		d.nChunks = append(d.nChunks, int32(nc))
		d.chunkTokSum = append(d.chunkTokSum, tokSum)
	}
	return nil
}
