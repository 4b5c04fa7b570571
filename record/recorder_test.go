package record

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/filehash"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/trace"
)

// TestRotation: requests on either side of a rotation's end go to two pairs of files;
// the first pair is written while the recording goes on; each file starts at its first
// request, ids go on across files, and each results file names its own trace's hash.
func TestRotation(t *testing.T) {
	up := streamer(t, nil)
	// Long enough that the first three requests arrive in the first rotation on a loaded
	// machine (they take milliseconds).
	const rotate = 2 * time.Second
	rec := startRecording(t, up.URL, func(o *Options) { o.Rotate = rotate })
	for range 3 {
		post(t, rec.srv.URL, "/v1/chat/completions", chatStreamBody, nil)
	}
	for rec.rec.now() < int64(rotate) { // the recording's own clock, not a timing assertion
		time.Sleep(10 * time.Millisecond)
	}
	for range 2 {
		post(t, rec.srv.URL, "/v1/chat/completions", chatStreamBody, nil)
	}
	first := filepath.Join(rec.dir, "results-0001.parquet")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(first); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first rotation's files were not written while the recording went on")
		}
	}
	rec.stop()
	ids := int64(0)
	for i, want := range []int{3, 2} {
		tp := filepath.Join(rec.dir, fmt.Sprintf("trace-%04d.parquet", i+1))
		rows := traceRows(t, tp)
		if len(rows) != want {
			t.Fatalf("%s: %d rows, want %d", tp, len(rows), want)
		}
		if rows[0].Arrival != 0 {
			t.Errorf("%s: first arrival %v, want 0", tp, rows[0].Arrival)
		}
		for _, r := range rows {
			if r.ID != ids {
				t.Errorf("%s: request_id %d, want %d", tp, r.ID, ids)
			}
			ids++
		}
		res, run, err := results.ReadFile(filepath.Join(rec.dir, fmt.Sprintf("results-%04d.parquet", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		sha, err := filehash.SHA256(tp)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != want || run.TraceSHA256 != sha || run.TraceFile != filepath.Base(tp) || run.Source != results.SourceRecord {
			t.Errorf("results %d: %d rows, trace %s %s, source %q; want %d rows, trace %s %s, source record",
				i+1, len(res), run.TraceFile, run.TraceSHA256, run.Source, want, filepath.Base(tp), sha)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(rec.dir, "*"+JournalSuffix)); len(m) != 0 {
		t.Errorf("journals left after the files were written: %v", m)
	}
}

// TestSample: --sample keeps whole sessions: each user's two requests are both recorded
// or both left out, and some of each.
func TestSample(t *testing.T) {
	up := streamer(t, nil)
	rec := startRecording(t, up.URL, func(o *Options) { o.Sample = 0.5; o.Salt = [32]byte{1, 2, 3} })
	const users = 40
	for turn := range 2 {
		for u := range users {
			body := fmt.Sprintf(`{"model":"m","user":"user-%d","messages":[{"role":"user","content":"turn %d"}],"stream":true}`, u, turn)
			post(t, rec.srv.URL, "/v1/chat/completions", body, nil)
		}
	}
	rec.stop()
	rows := traceRows(t, filepath.Join(rec.dir, "trace-0001.parquet"))
	per := map[int64]int{}
	for _, r := range rows {
		per[r.SessionID]++
	}
	for s, n := range per {
		if n != 2 {
			t.Errorf("session %d: %d of its 2 requests recorded", s, n)
		}
	}
	if len(per) == 0 || len(per) == users {
		t.Errorf("%d of %d sessions recorded at --sample 0.5", len(per), users)
	}
	c := rec.rec.Counts()
	if c.SampledOut+c.Recorded != 2*users || c.Recorded != int64(len(rows)) {
		t.Errorf("counts %+v for %d rows of %d requests", c, len(rows), 2*users)
	}
}

// TestRecoverRotation: the journals a killed recording leaves (copied while it records,
// after a flush) become the rotation's files, the results naming the trace's hash.
func TestRecoverRotation(t *testing.T) {
	up := streamer(t, nil)
	rec := startRecording(t, up.URL, nil)
	for range 4 {
		post(t, rec.srv.URL, "/v1/chat/completions", chatStreamBody, nil)
	}
	killed := t.TempDir()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// Copy the journals once the recorder has linked all four and flushed them.
		if rec.rec.Counts().Recorded == 4 {
			time.Sleep(600 * time.Millisecond) // one flush period (500 ms) later
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the recorder never recorded the four requests")
		}
	}
	for _, n := range []string{"trace-0001.parquet", "results-0001.parquet"} {
		b, err := os.ReadFile(filepath.Join(rec.dir, n+JournalSuffix))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(killed, n+JournalSuffix), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := RecoverRotation(filepath.Join(killed, "trace-0001.parquet"+JournalSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("recovered %v", files)
	}
	rows := traceRows(t, files[0])
	res, run, err := results.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	sha, _ := filehash.SHA256(files[0])
	if len(rows) != 4 || len(res) != 4 || run.TraceSHA256 != sha {
		t.Errorf("recovered %d rows and %d results naming trace %s; want 4, 4 and %s", len(rows), len(res), run.TraceSHA256, sha)
	}
	if _, err := RecoverRotation(filepath.Join(killed, "other.journal")); err == nil {
		t.Error("RecoverRotation took a file that is not a trace journal")
	}
}

func traceRows(t *testing.T, path string) []trace.Request {
	t.Helper()
	rows, _ := readTrace(t, path)
	return rows
}

// TestRecordWithoutBlocks: with no prefix blocks (BlockTokens 0) a request the server
// counted is not tokenized, its prompt_tokens is the server's and it has no blocks; one
// the server did not count (an error answer) is tokenized for its count.
func TestRecordWithoutBlocks(t *testing.T) {
	up := streamer(t, nil) // its stream's usage says 12 prompt tokens
	rec := startRecording(t, up.URL, func(o *Options) { o.BlockTokens = 0 })
	long := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + words(0, 100) + `"}]}`
	post(t, rec.srv.URL, "/v1/chat/completions", long, nil)
	rec.stop()
	if n := rec.rec.parser.cache.encodes.Load(); n != 0 {
		t.Errorf("%d texts tokenized for a request the server counted, want none", n)
	}
	rows := traceRows(t, filepath.Join(rec.dir, "trace-0001.parquet"))
	if len(rows) != 1 || rows[0].PromptTokens != 12 || rows[0].PrefixBlocks != nil {
		t.Fatalf("rows %+v, want one of the server's 12 prompt tokens without blocks", rows)
	}
	tr, err := trace.Open(filepath.Join(rec.dir, "trace-0001.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if bt := tr.Meta().BlockTokens; bt != 0 {
		t.Errorf("llmreplay.block_tokens %d, want none", bt)
	}

	// The upstream answers /v1/completions with an error: no usage, so the prompt is
	// counted.
	rec = startRecording(t, up.URL, func(o *Options) { o.BlockTokens = 0 })
	post(t, rec.srv.URL, "/v1/completions", `{"model":"m","prompt":"`+words(0, 100)+`"}`, nil)
	rec.stop()
	rows = traceRows(t, filepath.Join(rec.dir, "trace-0001.parquet"))
	if want := rec.rec.o.Encoding.Count(words(0, 100)); len(rows) != 1 || int(rows[0].PromptTokens) != want {
		t.Fatalf("rows %+v, want one of %d prompt tokens counted by the recorder", rows, want)
	}
}
