package record

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/internal/filehash"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// segment is one rotation's files: the trace and results journals while it records, the
// trace and results files once it is finalized.
type segment struct {
	index  int
	start  int64 // run clock of the rotation's first arrival: the files' time 0
	trace  string
	res    string
	tj     *TraceJournal
	rj     *results.Journal
	tjPath string
	rjPath string
	rows   int64
	apis   map[string]bool
	models map[string]bool
}

// Names of a rotation's files in the recording's folder (NNNN from 0001).
func tracePath(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("trace-%04d.parquet", i+1))
}
func resultsPath(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("results-%04d.parquet", i+1))
}

// TraceSource is the llmreplay.source of a trace the recorder writes.
const TraceSource = "record"

// JournalSuffix ends the name of a journal the recorder writes while it records; a
// recording killed before it wrote its files leaves them, for `llmreplay recover`.
const JournalSuffix = ".journal"

// CheckDir refuses a folder that already holds a recording's files, so that a recording
// never overwrites another.
func CheckDir(dir string) error {
	for _, pat := range []string{"trace-*.parquet", "results-*.parquet", "*" + JournalSuffix} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return err
		}
		if len(m) > 0 {
			return fmt.Errorf("%s already holds a recording's files (%s): record into another folder, or move them", dir, filepath.Base(m[0]))
		}
	}
	return nil
}

// segment returns rotation i's open segment, creating its journals at its first row.
func (r *Recorder) segment(i int) (*segment, error) {
	if s := r.segs[i]; s != nil {
		return s, nil
	}
	// A file's time 0 is the first request the proxy received in its rotation (a trace's
	// first row arrives at 0, as importers make it, unless that request was not recorded).
	r.mu.Lock()
	start := r.first[i]
	r.mu.Unlock()
	s := &segment{index: i, start: start, trace: tracePath(r.o.Dir, i), res: resultsPath(r.o.Dir, i),
		apis: map[string]bool{}, models: map[string]bool{}}
	s.tjPath, s.rjPath = s.trace+JournalSuffix, s.res+JournalSuffix
	meta := trace.Meta{Source: TraceSource, StartUnixNS: r.startUnix + start, BlockTokens: r.o.BlockTokens, Generator: r.generator()}
	var err error
	if s.tj, err = CreateTraceJournal(s.tjPath, meta); err != nil {
		return nil, err
	}
	run := r.runMeta(start)
	if s.rj, err = results.CreateJournal(s.rjPath, &run); err != nil {
		s.tj.Close()
		os.Remove(s.tjPath)
		return nil, err
	}
	r.segs[i] = s
	return s, nil
}

// generator is the trace's llmreplay.generator: how the recording was made (never the
// salt).
func (r *Recorder) generator() string {
	b, _ := json.Marshal(map[string]any{
		"recorder": "llmreplay record", "tokenizer": r.o.Encoding.Name(), "block_tokens": r.o.BlockTokens,
		"sample": r.o.Sample, "session_header": r.o.SessionHeader, "rotate_ns": int64(r.o.Rotate),
	})
	return string(b)
}

// runMeta is the production results' run metadata: an open loop at the recorded speed.
func (r *Recorder) runMeta(start int64) results.RunMeta {
	var id [8]byte
	rand.Read(id[:])
	host, _ := os.Hostname()
	return results.RunMeta{
		ToolVersion: r.o.ToolVersion, RunID: hex.EncodeToString(id[:]), Mode: results.ModeOpen,
		Endpoint: wire.SafeEndpoint(r.o.Upstream), Speedup: 1, ShardCount: 1,
		RunStartUnixNS: r.startUnix + start, Host: host, Flags: r.o.Flags, Source: results.SourceRecord,
	}
}

// add journals one request's trace row and results row.
func (s *segment) add(row *trace.Request, res *results.Result) error {
	if err := s.tj.Add(row); err != nil {
		return err
	}
	if err := s.rj.Add(res); err != nil {
		return err
	}
	s.rows++
	s.apis[row.Params.API] = true
	if row.Model != "" {
		s.models[row.Model] = true
	}
	return nil
}

// flush writes what the open segments' journals hold, so that a crash loses at most the
// last half second.
func (r *Recorder) flush() {
	for _, s := range r.segs {
		if err := s.tj.Flush(); err != nil {
			r.fail(err)
		}
		if err := s.rj.Flush(); err != nil {
			r.fail(err)
		}
	}
}

// rotate hands the finalizer every segment that is over: its rotation has passed and no
// request that arrived in it is still passing (all of them, when final).
func (r *Recorder) rotate(final bool) {
	r.mu.Lock()
	cur, _ := r.rotation(r.now())
	var done []int
	for i := range r.segs {
		if final || i < cur && r.inflight[i] == 0 {
			done = append(done, i)
			delete(r.inflight, i)
		}
	}
	r.mu.Unlock()
	slices.Sort(done)
	for _, i := range done {
		r.finals <- r.segs[i]
		delete(r.segs, i)
	}
}

// finalize writes the segments handed to it, off the linker's goroutine: a conversion
// of an hour's journal takes seconds, during which the recording goes on.
func (r *Recorder) finalize() {
	defer close(r.finished)
	for s := range r.finals {
		files, err := s.finish()
		r.mu.Lock()
		r.files = append(r.files, files...)
		r.mu.Unlock()
		if err != nil {
			r.fail(err)
			continue
		}
		fmt.Fprintf(r.o.Log, "record: wrote %s and %s (%d requests)\n", filepath.Base(s.trace), filepath.Base(s.res), s.rows)
	}
}

// finish closes the segment's journals and turns them into its trace and results files:
// the trace first, since the results name its hash, as a replay's do, so that compare
// takes the two for runs of one trace. A journal is removed only once its file is written.
func (s *segment) finish() ([]string, error) {
	terr := s.tj.Close()
	rerr := s.rj.Close()
	if terr != nil || rerr != nil {
		return nil, fmt.Errorf("record: close the journals of %s: %w", filepath.Base(s.trace), errors.Join(terr, rerr))
	}
	return convertRotation(s.trace, s.res, func(m *results.RunMeta) {
		m.API, m.Model = joinKeys(s.apis), joinKeys(s.models)
	})
}

// convertRotation turns a rotation's two journals (trace's and results' names with
// JournalSuffix) into its files, the results naming the trace's file and hash.
func convertRotation(tracePath, resPath string, edit func(*results.RunMeta)) ([]string, error) {
	if _, err := ConvertTraceJournal(tracePath+JournalSuffix, tracePath); err != nil {
		return nil, err
	}
	sha, err := filehash.SHA256(tracePath)
	if err != nil {
		return []string{tracePath}, fmt.Errorf("record: %w", err)
	}
	if _, err := results.ConvertJournalWith(resPath+JournalSuffix, resPath, func(m *results.RunMeta) {
		m.TraceFile, m.TraceSHA256 = filepath.Base(tracePath), sha
		if edit != nil {
			edit(m)
		}
	}); err != nil {
		return []string{tracePath}, err
	}
	os.Remove(tracePath + JournalSuffix)
	os.Remove(resPath + JournalSuffix)
	return []string{tracePath, resPath}, nil
}

// RecoverRotation turns the journals a killed recording left for one rotation, named by
// its trace journal (trace-NNNN.parquet.journal, with results-NNNN.parquet.journal
// beside it), into that rotation's trace and results files; it returns the files written.
func RecoverRotation(traceJournal string) ([]string, error) {
	dir, name := filepath.Split(traceJournal)
	var n int
	if _, err := fmt.Sscanf(name, "trace-%04d.parquet"+JournalSuffix, &n); err != nil || tracePath(dir, n-1)+JournalSuffix != traceJournal {
		return nil, fmt.Errorf("record: %s is not a recording's trace journal (trace-NNNN.parquet%s)", traceJournal, JournalSuffix)
	}
	res := resultsPath(dir, n-1)
	if _, err := os.Stat(res + JournalSuffix); err != nil {
		return nil, fmt.Errorf("record: %s has no results journal beside it: %w", traceJournal, err)
	}
	return convertRotation(tracePath(dir, n-1), res, nil)
}

// joinKeys is a set's members sorted and joined by commas ("chat", or "chat,completions"
// for a recording of several).
func joinKeys(m map[string]bool) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// rows builds an exchange's trace row and results row, on the rotation's clock.
func rows(ex *exchange, link Link, parentEnd int64, start int64, blockTokens int) (*trace.Request, *results.Result) {
	res := ex.res
	rebase := func(t *int64) {
		if *t != results.Null {
			*t -= start
		}
	}
	rebase(&res.ScheduledNS)
	rebase(&res.SentNS)
	rebase(&res.FirstTokenNS)
	rebase(&res.EndNS)
	rebase(&res.FirstAnswerNS)
	// The server's count of the prompt is the one a replay must reproduce; the recorder's
	// own count (text only, no template) stands in when the server said none.
	prompt := res.PromptTokensServer
	if prompt == results.Null || prompt < 1 {
		prompt = max(ex.req.PromptTokens, 1)
	}
	// A request that failed before its output was counted is sent by a replay for the
	// tokens it asked for, or one: the load it put on production is unknown beyond that.
	output := res.OutputTokens
	if output == results.Null || output < 1 {
		output = ex.req.MaxTokens
		if output < 1 {
			output = 1
		}
	}
	res.PromptTokens, res.OutputTokensTarget = prompt, output
	res.SessionID = link.Session
	if ex.req.Images > 0 {
		res.Images = ex.req.Images
	}
	row := &trace.Request{ID: ex.id, Arrival: time.Duration(ex.arrival - start), PromptTokens: prompt, OutputTokens: output,
		SessionID: link.Session, HasSession: true, Model: ex.req.Model}
	if ex.req.ToolTokens > 0 {
		// The recorder's count of the tool definitions' text: the server renders them in
		// its own template, so it is an estimate, kept within the prompt.
		row.ToolTokens, row.HasToolTokens = min(ex.req.ToolTokens, prompt), true
	}
	if n := min(len(ex.req.Blocks), int(prompt)/max(blockTokens, 1)); n > 0 {
		row.PrefixBlocks = ex.req.Blocks[:n]
	}
	call := &trace.Call{Gap: trace.Unknown, PrefixTokens: trace.Unknown, CachedTokens: trace.Unknown, ReasoningTokens: trace.Unknown,
		Duration: time.Duration(ex.finished - ex.arrival)}
	if c := res.PromptTokensCached; c != results.Null {
		call.CachedTokens = min(c, prompt)
	}
	if rt := res.ReasoningTokens; rt != results.Null {
		call.ReasoningTokens = min(rt, output)
	}
	if link.Parent >= 0 {
		call.Parents = []int64{link.Parent}
		call.Gap = time.Duration(max(ex.arrival-parentEnd, 0))
		call.GapKind = link.GapKind
	}
	row.Call = call
	row.Params = &trace.Params{API: string(ex.api), MaxTokens: ex.req.MaxTokens, N: ex.req.N, Stream: ex.req.Stream, HasStream: ex.req.HasStream}
	if ex.req.Images > 0 {
		row.Images = make([]trace.Image, ex.req.Images)
	}
	return row, &res
}
