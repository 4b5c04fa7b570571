package record

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/trace"
)

// randomRow returns a valid row with every field of trace.Request in play: each optional
// field present or not by a coin, prefix blocks random 64-bit ids (salted hashes), images
// sized or 0x0, a call with or without parents, params of every shape. Arrivals are
// drawn, so rows come out of order, with ties.
func randomRow(rng *rand.Rand, id int64, blocks int) trace.Request {
	coin := func() bool { return rng.IntN(2) == 0 }
	r := trace.Request{ID: id, Arrival: time.Duration(rng.Int64N(50)) * time.Millisecond,
		PromptTokens: 1 + rng.Int32N(100000), OutputTokens: 1 + rng.Int32N(4000)}
	if coin() {
		r.SessionID, r.HasSession = rng.Int64()-rng.Int64(), true
	}
	if coin() {
		r.Model = []string{"llama-3-8b", "qwen", "gpt-4o-mini"}[rng.IntN(3)]
	}
	if coin() {
		r.PrefixBlocks = make([]int64, rng.IntN(blocks+1)) // empty lists too: not nil
		for k := range r.PrefixBlocks {
			r.PrefixBlocks[k] = int64(rng.Uint64())
		}
	}
	if coin() {
		r.ToolTokens, r.HasToolTokens = rng.Int32N(r.PromptTokens/4), true
	}
	if n := rng.IntN(4); n > 0 {
		r.Images = make([]trace.Image, n)
		if coin() {
			for k := range r.Images {
				r.Images[k] = trace.Image{Width: 1 + rng.Int32N(trace.MaxImageSide), Height: 1 + rng.Int32N(trace.MaxImageSide)}
			}
		}
	}
	if coin() {
		r.ImageTokens, r.HasImageTokens = 0, true
		if len(r.Images) > 0 {
			r.ImageTokens = rng.Int32N(r.PromptTokens / 4)
		}
	}
	if coin() {
		c := trace.NewCall()
		c.Duration, c.CachedTokens = time.Duration(rng.Int64N(1e10)), rng.Int32N(r.PromptTokens+1)
		if coin() {
			c.ReasoningTokens = rng.Int32N(r.OutputTokens + 1)
		}
		if r.HasSession && coin() {
			c.Parents = []int64{id + 1_000_000, id + 2_000_000}
			c.Gap, c.GapKind, c.PrefixTokens = time.Duration(rng.Int64N(1e9)), []string{trace.GapTool, trace.GapUser, ""}[rng.IntN(3)], rng.Int32N(r.PromptTokens+1)
		}
		r.Call = c
	}
	if coin() {
		p := &trace.Params{API: trace.APIs[rng.IntN(len(trace.APIs))], MaxTokens: 1 + rng.Int32N(8192), HasStream: true, Stream: coin()}
		if coin() {
			p.N = 1 + rng.Int32N(8)
		}
		if coin() {
			p = &trace.Params{N: 2} // one field alone
		}
		r.Params = p
	}
	return r
}

// readTrace reads a whole trace file.
func readTrace(t testing.TB, path string) ([]trace.Request, trace.Meta) {
	t.Helper()
	r, err := trace.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []trace.Request
	for r.Next() {
		out = append(out, r.Request())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return out, r.Meta()
}

// writeJournal adds rows to a new journal at path, flushing every flushEvery rows, and
// returns the file size before each row was added (the offsets of the records).
func writeJournal(t testing.TB, path string, meta trace.Meta, rows []trace.Request, flushEvery int) []int64 {
	t.Helper()
	j, err := CreateTraceJournal(path, meta)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for i := range rows {
		if flushEvery == 1 {
			if err := j.Flush(); err != nil {
				t.Fatal(err)
			}
			st, _ := os.Stat(path)
			offs = append(offs, st.Size())
		}
		if err := j.Add(&rows[i]); err != nil {
			t.Fatal(err)
		}
		if flushEvery > 1 && i%flushEvery == 0 {
			if err := j.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	return offs
}

func sortedRows(rows []trace.Request) []trace.Request {
	s := slices.Clone(rows)
	slices.SortStableFunc(s, func(a, b trace.Request) int {
		return cmp.Or(cmp.Compare(a.Arrival, b.Arrival), cmp.Compare(a.ID, b.ID))
	})
	return s
}

// TestTraceJournalRoundTrip: rows added out of arrival order, of every shape, convert to
// a trace of the same rows sorted by arrival then request_id, every field as it was,
// with the journal's metadata; a journal with no rows converts to an empty trace.
func TestTraceJournalRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rows := make([]trace.Request, 3000)
	for i := range rows {
		rows[i] = randomRow(rng, int64(len(rows)-i)*7, 40) // ids not in arrival order either
	}
	dir := t.TempDir()
	meta := trace.Meta{Source: "record", StartUnixNS: 1764900000123456789, BlockTokens: 16}
	jp := filepath.Join(dir, "trace.journal")
	writeJournal(t, jp, meta, rows, 500)
	out := filepath.Join(dir, "trace.parquet")
	info, err := ConvertTraceJournal(jp, out)
	if err != nil {
		t.Fatal(err)
	}
	got, gotMeta := readTrace(t, out)
	want := sortedRows(rows)
	if info.Rows != int64(len(rows)) || info.TornBytes != 0 || gotMeta != meta || len(got) != len(want) {
		t.Fatalf("converted %+v, meta %+v, %d rows read", info, gotMeta, len(got))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("row %d:\n%+v\nwant\n%+v", i, got[i], want[i])
		}
	}

	empty := filepath.Join(dir, "empty.journal")
	writeJournal(t, empty, meta, nil, 0)
	if info, err := ConvertTraceJournal(empty, out); err != nil || info.Rows != 0 {
		t.Fatalf("empty journal: %+v, %v", info, err)
	}
	if got, _ := readTrace(t, out); len(got) != 0 {
		t.Errorf("empty journal converts to %d rows", len(got))
	}
}

// TestTraceJournalTorn: a journal cut at every byte of its last record (a crash
// mid-write) converts to the rows before it, counting the cut bytes; so does one whose
// end is zeros (a file system that extended the file before the data reached it), and
// one whose last record's end was never written.
func TestTraceJournalTorn(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	rows := make([]trace.Request, 5)
	for i := range rows {
		rows[i] = randomRow(rng, int64(i), 8)
	}
	rows[4].PrefixBlocks = []int64{1, -2, 3}
	dir := t.TempDir()
	jp := filepath.Join(dir, "full.journal")
	offs := writeJournal(t, jp, trace.Meta{Source: "record"}, rows, 1)
	full, err := os.ReadFile(jp)
	if err != nil {
		t.Fatal(err)
	}
	last := offs[len(offs)-1]
	want := sortedRows(rows[:4])
	out := filepath.Join(dir, "t.parquet")
	check := func(what string, b []byte, rows []trace.Request, torn int64) {
		t.Helper()
		p := filepath.Join(dir, "cut.journal")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		info, err := ConvertTraceJournal(p, out)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, _ := readTrace(t, out)
		if info.Rows != int64(len(rows)) || info.TornBytes != torn || !reflect.DeepEqual(got, rows) {
			t.Fatalf("%s: %+v, %d rows read; want %d rows, %d torn bytes", what, info, len(got), len(rows), torn)
		}
	}
	for cut := last; cut < int64(len(full)); cut++ {
		check("cut at "+strconv.FormatInt(cut, 10), full[:cut], want, cut-last)
	}
	check("whole", full, sortedRows(rows), 0)
	check("zero tail", append(slices.Clone(full), make([]byte, 100)...), sortedRows(rows), 100)
	check("a zero byte after the end", append(slices.Clone(full), 0), sortedRows(rows), 1)
	unwritten := slices.Clone(full)
	clear(unwritten[last+8:])
	check("last record's end unwritten", unwritten, want, int64(len(full))-last)
	zeroed := slices.Clone(full)
	clear(zeroed[last:])
	check("last record zeros", zeroed, want, int64(len(full))-last)
}

// TestTraceJournalCorrupt: a bad byte in a record before the last (its length, its
// length's checksum, its payload or its payload's checksum) is an error naming the
// journal and the record's offset, and writes no trace.
func TestTraceJournalCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	rows := make([]trace.Request, 4)
	for i := range rows {
		rows[i] = randomRow(rng, int64(i), 8)
	}
	dir := t.TempDir()
	jp := filepath.Join(dir, "j.journal")
	offs := writeJournal(t, jp, trace.Meta{}, rows, 1)
	full, _ := os.ReadFile(jp)
	mid := offs[2]
	size := offs[3] - mid
	for _, at := range []int64{0, 1, 4, 5, 6, size / 2, size - 5, size - 1} {
		b := slices.Clone(full)
		b[mid+at] ^= 0x40
		p := filepath.Join(dir, "bad.journal")
		os.WriteFile(p, b, 0o644)
		out := filepath.Join(dir, "bad.parquet")
		_, err := ConvertTraceJournal(p, out)
		want := p + ": record at byte " + strconv.FormatInt(mid, 10) + ": "
		// Found by the first pass, before a row is written.
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasSuffix(err.Error(), "(the journal is corrupt there)") {
			t.Errorf("byte %d of the record flipped: %v, want an error with %q", at, err, want)
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Errorf("byte %d flipped: a trace was written", at)
		}
	}
	// Zeros in the middle are corruption too: only the tail may be zeros.
	b := slices.Clone(full)
	clear(b[mid : mid+size])
	if _, err := ConvertTraceJournal(writeTemp(t, b), filepath.Join(dir, "z.parquet")); err == nil || !strings.Contains(err.Error(), "record at byte "+strconv.FormatInt(mid, 10)) {
		t.Errorf("a zeroed middle record: %v", err)
	}
}

func writeTemp(t *testing.T, b []byte) string {
	p := filepath.Join(t.TempDir(), "x.journal")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTraceJournalHeader: a file that is not a journal, a journal of another version, a
// cut or damaged header, are errors naming the file; a journal is never overwritten.
func TestTraceJournalHeader(t *testing.T) {
	dir := t.TempDir()
	jp := filepath.Join(dir, "h.journal")
	writeJournal(t, jp, trace.Meta{Source: "record"}, nil, 0)
	full, _ := os.ReadFile(jp)
	v2 := slices.Clone(full)
	v2[4] = 2
	damaged := slices.Clone(full)
	damaged[len(damaged)-6] ^= 1
	for _, c := range []struct {
		b    []byte
		want string
	}{
		{[]byte("PAR1\x15\x04"), "this is a Parquet file, not an llmreplay trace journal"},
		{[]byte("request_id,arrival\n1,2\n"), "not an llmreplay trace journal"},
		{v2, "version 2; this llmreplay reads version 1"},
		{full[:len(full)-1], "header: cut short"},
		{full[:3], "not an llmreplay trace journal"},
		{damaged, "header: checksum mismatch"},
	} {
		p := writeTemp(t, c.b)
		_, err := ConvertTraceJournal(p, filepath.Join(dir, "o.parquet"))
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.b, err, c.want)
		}
	}
	if _, err := CreateTraceJournal(jp, trace.Meta{}); err == nil || !strings.Contains(err.Error(), "converted to a trace, or removed") {
		t.Errorf("CreateTraceJournal over a journal: %v", err)
	}
	if now, _ := os.ReadFile(jp); !bytes.Equal(now, full) {
		t.Error("CreateTraceJournal changed an existing journal")
	}
}

// TestTraceJournalRefuses: Add refuses a row with prompt text, never writing or quoting
// the text, and a row trace refuses, naming the request_id; the journal goes on.
func TestTraceJournalRefuses(t *testing.T) {
	const marker = "zqxj-private-marker-7781"
	dir := t.TempDir()
	jp := filepath.Join(dir, "p.journal")
	j, err := CreateTraceJournal(jp, trace.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	good := trace.Request{ID: 1, PromptTokens: 10, OutputTokens: 2}
	bad := good
	bad.ID, bad.Prompt = 9, "the user wrote "+marker
	if err := j.Add(&bad); err == nil || strings.Contains(err.Error(), marker) || !strings.Contains(err.Error(), "request_id 9: has prompt text") {
		t.Errorf("Add with text: %v", err)
	}
	invalid := good
	invalid.ID, invalid.Params = 8, &trace.Params{N: -1}
	if err := j.Add(&invalid); err == nil || !strings.Contains(err.Error(), jp+": request_id 8: n: -1, must be >= 1") {
		t.Errorf("Add of an invalid row: %v", err)
	}
	if err := j.Add(&good); err != nil || j.Rows() != 1 {
		t.Fatalf("Add after a refusal: %v, %d rows", err, j.Rows())
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Add(&good); err == nil {
		t.Error("Add after Close succeeded")
	}
	if err := j.Close(); err != nil {
		t.Errorf("a second Close: %v, want the first's result", err)
	}
	if b, _ := os.ReadFile(jp); bytes.Contains(b, []byte(marker)) {
		t.Error("the journal holds the prompt text")
	}
	info, err := ConvertTraceJournal(jp, filepath.Join(dir, "p.parquet"))
	if err != nil || info.Rows != 1 {
		t.Errorf("convert: %+v, %v", info, err)
	}
}

// benchRows returns n rows of blocks prefix-block ids each, in the order a recorder adds
// them: by end (arrival, 1 ms apart, plus a duration of up to 30 s), not by arrival.
func benchRows(n, blocks int) []trace.Request {
	rng := rand.New(rand.NewPCG(7, 8))
	rows := make([]trace.Request, n)
	ends := make([]time.Duration, n)
	for i := range rows {
		r := trace.Request{ID: int64(i), Arrival: time.Duration(i) * time.Millisecond, PromptTokens: int32(16 * blocks), OutputTokens: 200,
			SessionID: int64(i / 4), HasSession: true, Model: "llama-3-8b",
			Params: &trace.Params{API: "chat", MaxTokens: 1024, Stream: true, HasStream: true}}
		r.PrefixBlocks = make([]int64, blocks)
		for k := range r.PrefixBlocks {
			r.PrefixBlocks[k] = int64(rng.Uint64())
		}
		rows[i], ends[i] = r, r.Arrival+time.Duration(rng.Int64N(int64(30*time.Second)))
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(ends[a], ends[b]) })
	out := make([]trace.Request, n)
	for i, k := range idx {
		out[i] = rows[k]
	}
	return out
}

// BenchmarkTraceJournalAdd measures Add of rows of 1,000 prefix blocks, with a Flush (and
// so an fsync) every 1,000 rows, a second of recording at 1,000 requests/s.
func BenchmarkTraceJournalAdd(b *testing.B) {
	rows := benchRows(1000, 1000)
	j, err := CreateTraceJournal(filepath.Join(b.TempDir(), "b.journal"), trace.Meta{Source: "record"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := j.Add(&rows[i%len(rows)]); err != nil {
			b.Fatal(err)
		}
		if i%1000 == 999 {
			if err := j.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkTraceJournalConvert converts a journal of 100,000 rows of 1,000 prefix blocks
// (LLMREPLAY_JOURNAL_ROWS overrides the count) added by end, not arrival, and reports
// rows/s and the peak resident memory of the conversion (Linux: VmHWM, reset through
// /proc/self/clear_refs before it; 0 elsewhere). The journal is some 800 MB on disk, and
// so is the trace:
//
//	go test ./record -run '^$' -bench BenchmarkTraceJournalConvert -benchtime=1x
func BenchmarkTraceJournalConvert(b *testing.B) {
	n := 100_000
	if s := os.Getenv("LLMREPLAY_JOURNAL_ROWS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	dir := b.TempDir()
	jp := filepath.Join(dir, "b.journal")
	rows := benchRows(n, 1000)
	writeJournal(b, jp, trace.Meta{Source: "record", BlockTokens: 16}, rows, 1000)
	rows = nil
	st, _ := os.Stat(jp)
	b.SetBytes(st.Size())
	var peak, base float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		runtime.GC()
		debug.FreeOSMemory()
		base = procStatusMB("VmRSS")
		os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM to the current RSS
		b.StartTimer()
		info, err := ConvertTraceJournal(jp, filepath.Join(dir, "b.parquet"))
		if err != nil || info.Rows != int64(n) {
			b.Fatalf("%+v, %v", info, err)
		}
		peak = max(peak, procStatusMB("VmHWM"))
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(peak, "peak-RSS-MB")
	b.ReportMetric(base, "base-RSS-MB")
}

// procStatusMB reads a memory line of /proc/self/status in MB (0 when there is none).
func procStatusMB(key string) float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// FuzzTraceJournalConvert: whatever bytes follow a journal's header, ConvertTraceJournal
// does not panic, and when it succeeds the trace it wrote reads back whole.
func FuzzTraceJournalConvert(f *testing.F) {
	dir := f.TempDir()
	rng := rand.New(rand.NewPCG(10, 11))
	rows := make([]trace.Request, 6)
	for i := range rows {
		rows[i] = randomRow(rng, int64(i), 4)
	}
	jp := filepath.Join(dir, "seed.journal")
	writeJournal(f, jp, trace.Meta{Source: "record"}, rows, 0)
	seed, _ := os.ReadFile(jp)
	empty := filepath.Join(dir, "empty.journal")
	writeJournal(f, empty, trace.Meta{Source: "record"}, nil, 0)
	head, _ := os.ReadFile(empty)
	f.Add(seed[len(head):])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, body []byte) {
		p := filepath.Join(t.TempDir(), "f.journal")
		if err := os.WriteFile(p, append(slices.Clone(head), body...), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "f.parquet")
		info, err := ConvertTraceJournal(p, out)
		if err != nil {
			return
		}
		if got, _ := readTrace(t, out); int64(len(got)) != info.Rows || info.TornBytes > int64(len(body)) {
			t.Fatalf("%+v, %d rows read", info, len(got))
		}
	})
}

// FuzzTracePayload: the payload decoder (behind the checksums, so the journal fuzz
// rarely reaches it) does not panic on any bytes, and a payload it decodes to a valid row
// encodes back to a payload that decodes to the same row.
func FuzzTracePayload(f *testing.F) {
	rng := rand.New(rand.NewPCG(12, 13))
	for i := range 20 {
		r := randomRow(rng, int64(i), 4)
		f.Add(appendPayload(nil, &r))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		d := decoder{models: map[string]string{}}
		r, err := d.decodePayload(p)
		if err != nil || r.Validate() != nil {
			return
		}
		again, err := d.decodePayload(appendPayload(nil, &r))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("re-encoded row decodes as %+v, %v; want %+v", again, err, r)
		}
	})
}
