package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

func sampleRequests(n int) []Request {
	reqs := make([]Request, n)
	for i := range reqs {
		r := Request{
			ID:           int64(1000 + i),
			Arrival:      time.Duration(i/3) * time.Millisecond, // ties every 3 rows
			PromptTokens: int32(1 + i%5000),
			OutputTokens: int32(1 + i%300),
		}
		if i%2 == 0 {
			r.SessionID, r.HasSession = int64(i/4), true
		}
		switch i % 3 {
		case 0:
			r.PrefixBlocks = []int64{int64(i), int64(i + 1), 7}
		case 1:
			r.PrefixBlocks = []int64{} // present but empty differs from absent
		}
		if i%4 == 1 {
			r.Model = "gpt-4"
		}
		if i%5 == 2 {
			r.Prompt = "hello, world " + strings.Repeat("x", i%7)
		}
		reqs[i] = r
	}
	return reqs
}

func writeFile(t testing.TB, path string, meta Meta, reqs []Request) {
	t.Helper()
	w, err := Create(path, meta)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func readAll(t testing.TB, path string) ([]Request, Meta) {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []Request
	for r.Next() {
		got = append(got, r.Request())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if int64(len(got)) != r.NumRows() {
		t.Errorf("NumRows %d, read %d", r.NumRows(), len(got))
	}
	return got, r.Meta()
}

func TestRoundTrip(t *testing.T) {
	meta := Meta{Source: "test", StartUnixNS: 1700000000123456789, BlockTokens: 16, Generator: `{"seed":1}`, Transforms: `[{"op":"slice"}]`}
	// More rows than one batch so batching and record boundaries are crossed.
	for _, n := range []int{0, 1, 7, batchRows + 3} {
		path := filepath.Join(t.TempDir(), "t.parquet")
		want := sampleRequests(n)
		writeFile(t, path, meta, want)
		got, gotMeta := readAll(t, path)
		if gotMeta != meta {
			t.Errorf("n=%d meta %+v, want %+v", n, gotMeta, meta)
		}
		if len(got) != len(want) {
			t.Fatalf("n=%d: read %d rows", n, len(got))
		}
		for i := range want {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("n=%d row %d:\n got %+v\nwant %+v", n, i, got[i], want[i])
			}
		}
		if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
			t.Errorf("n=%d: directory holds %d entries, want only the trace", n, len(ents))
		}
	}
}

func TestWriterRejects(t *testing.T) {
	cases := []struct {
		name string
		reqs []Request
		want string
	}{
		{"zero prompt", []Request{{ID: 1, PromptTokens: 0, OutputTokens: 1}}, "row 0 (request_id 1): prompt_tokens: 0"},
		{"negative output", []Request{{ID: 1, PromptTokens: 1, OutputTokens: 1}, {ID: 2, PromptTokens: 1, OutputTokens: -3}}, "row 1 (request_id 2): output_tokens: -3"},
		{"negative arrival", []Request{{ID: 1, Arrival: -1, PromptTokens: 1, OutputTokens: 1}}, "arrival_ns: -1 is negative"},
		{"out of order", []Request{{ID: 1, Arrival: 5, PromptTokens: 1, OutputTokens: 1}, {ID: 2, Arrival: 4, PromptTokens: 1, OutputTokens: 1}}, "row 1 (request_id 2): arrival_ns: 4 is before the previous row's 5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "bad.parquet")
			w, err := Create(path, Meta{})
			if err != nil {
				t.Fatal(err)
			}
			var werr error
			for _, r := range c.reqs {
				if werr = w.Write(r); werr != nil {
					break
				}
			}
			if werr == nil || !strings.Contains(werr.Error(), c.want) || !strings.Contains(werr.Error(), path) {
				t.Fatalf("error %v, want one containing %q and the file name", werr, c.want)
			}
			w.Abort()
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("Abort left %d files behind", len(ents))
			}
		})
	}
}

func TestWriterToIOWriter(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, Meta{Source: "buf"})
	want := sampleRequests(10)
	for _, r := range want {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(buf.Bytes()), "mem")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for r.Next() {
		if !reflect.DeepEqual(r.Request(), want[n]) {
			t.Fatalf("row %d differs", n)
		}
		n++
	}
	if r.Err() != nil || n != len(want) {
		t.Fatalf("read %d rows, err %v", n, r.Err())
	}
}

func TestSetMetaAfterWrite(t *testing.T) {
	w := NewWriter(&bytes.Buffer{}, Meta{})
	if err := w.SetMeta(Meta{Source: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(Request{PromptTokens: 1, OutputTokens: 1}); err != nil {
		t.Fatal(err)
	}
	if err := w.SetMeta(Meta{Source: "b"}); err == nil {
		t.Fatal("SetMeta after Write succeeded")
	}
}

// writeForeign writes a Parquet file with pqarrow directly, as another tool would.
func writeForeign(t *testing.T, path string, sc *arrow.Schema, fill func(b *array.RecordBuilder)) {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	fill(b)
	rec := b.NewRecord()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fw, err := pqarrow.NewFileWriter(sc, f, nil, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestReaderRejects(t *testing.T) {
	dir := t.TempDir()
	i64 := arrow.PrimitiveTypes.Int64
	i32 := arrow.PrimitiveTypes.Int32
	md := func(format string) *arrow.Metadata {
		m := arrow.NewMetadata([]string{MetaFormat}, []string{format})
		return &m
	}
	core := []arrow.Field{{Name: ColArrivalNS, Type: i64}, {Name: ColRequestID, Type: i64}, {Name: ColPromptTokens, Type: i32}, {Name: ColOutputTokens, Type: i32}}
	fill := func(arr []int64, prompt []int32) func(b *array.RecordBuilder) {
		return func(b *array.RecordBuilder) {
			b.Field(0).(*array.Int64Builder).AppendValues(arr, nil)
			for i := range arr {
				b.Field(1).(*array.Int64Builder).Append(int64(i))
				b.Field(3).(*array.Int32Builder).Append(1)
			}
			b.Field(2).(*array.Int32Builder).AppendValues(prompt, nil)
		}
	}

	// A file with the columns in another order and no optional columns reads fine.
	ok := filepath.Join(dir, "ok.parquet")
	writeForeign(t, ok, arrow.NewSchema(core, md(Format)), fill([]int64{0, 5, 5}, []int32{3, 4, 5}))
	got, _ := readAll(t, ok)
	if len(got) != 3 || got[1].Arrival != 5 || got[2].PromptTokens != 5 || got[2].HasSession || got[0].PrefixBlocks != nil {
		t.Errorf("foreign file read as %+v", got)
	}

	cases := []struct {
		name, want string
		sc         *arrow.Schema
		fill       func(*array.RecordBuilder)
		atOpen     bool
	}{
		{"v2", `llmreplay.format is "trace/v2"`, arrow.NewSchema(core, md("trace/v2")), fill([]int64{0}, []int32{1}), true},
		{"nometa", "not an llmreplay trace", arrow.NewSchema(core, nil), fill([]int64{0}, []int32{1}), true},
		{"missing", "column prompt_tokens: missing", arrow.NewSchema([]arrow.Field{core[0], core[1], core[3], {Name: "x", Type: i32}}, md(Format)), fill([]int64{0}, []int32{1}), true},
		{"badtype", "column prompt_tokens: type int64", arrow.NewSchema([]arrow.Field{core[0], core[1], {Name: ColPromptTokens, Type: i64}, core[3]}, md(Format)), func(b *array.RecordBuilder) {
			b.Field(0).(*array.Int64Builder).Append(0)
			b.Field(1).(*array.Int64Builder).Append(0)
			b.Field(2).(*array.Int64Builder).Append(1)
			b.Field(3).(*array.Int32Builder).Append(1)
		}, true},
		{"order", "row 2: request_id 2: arrival_ns: 3 is before the previous row's 5", arrow.NewSchema(core, md(Format)), fill([]int64{0, 5, 3}, []int32{1, 1, 1}), false},
		{"zero", "row 1: request_id 1: prompt_tokens: 0", arrow.NewSchema(core, md(Format)), fill([]int64{0, 5}, []int32{1, 0}), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name+".parquet")
			writeForeign(t, path, c.sc, c.fill)
			r, err := Open(path)
			if c.atOpen {
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
					t.Fatalf("Open: %v, want an error naming the file and containing %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for r.Next() {
			}
			if err := r.Err(); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Err: %v, want an error naming the file and containing %q", err, c.want)
			}
		})
	}

	notParquet := filepath.Join(dir, "x.parquet")
	os.WriteFile(notParquet, []byte("TIMESTAMP,ContextTokens\n"), 0o644)
	if _, err := Open(notParquet); err == nil || !strings.Contains(err.Error(), notParquet) {
		t.Errorf("Open of a CSV: %v", err)
	}
}

func TestReaderIsSource(t *testing.T) {
	var _ Source = (*Reader)(nil)
}
