package trace

import (
	"context"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"

	"github.com/llmreplay/llmreplay/wire"
)

// paramsRequests are rows of every recording shape: no Params, each column alone, all
// of them, a stream field sent false.
func paramsRequests() []Request {
	return []Request{
		{ID: 0, PromptTokens: 100, OutputTokens: 5},
		{ID: 1, Arrival: 1, PromptTokens: 100, OutputTokens: 5, Params: &Params{API: "chat"}},
		{ID: 2, Arrival: 2, PromptTokens: 100, OutputTokens: 5, Params: &Params{MaxTokens: 1}},
		{ID: 3, Arrival: 3, PromptTokens: 100, OutputTokens: 5, Params: &Params{N: 4}},
		{ID: 4, Arrival: 4, PromptTokens: 100, OutputTokens: 5, Params: &Params{HasStream: true}},
		{ID: 5, Arrival: 5, PromptTokens: 100, OutputTokens: 5, Params: &Params{API: "responses", MaxTokens: 4096, N: 1, Stream: true, HasStream: true}},
		{ID: 6, Arrival: 6, PromptTokens: 100, OutputTokens: 5, Params: &Params{API: "messages", MaxTokens: 200, Stream: true, HasStream: true}},
	}
}

// TestAPIsAreWires: the api column's names are the API kinds wire registers, so a
// recording of any API llmreplay speaks is a valid trace, and no other name is.
func TestAPIsAreWires(t *testing.T) {
	var names []string
	for _, a := range wire.APIs() {
		names = append(names, string(a))
	}
	if !slices.Equal(slices.Sorted(slices.Values(names)), slices.Sorted(slices.Values(APIs))) {
		t.Errorf("trace.APIs %v, wire.APIs %v", APIs, names)
	}
}

// TestParamsRoundTrip: the recording columns are written and read back as they were,
// slice and shard keep them, and a file written before they existed reads as rows
// without Params.
func TestParamsRoundTrip(t *testing.T) {
	reqs := paramsRequests()
	dir := t.TempDir()
	path := filepath.Join(dir, "p.parquet")
	writeFile(t, path, Meta{Source: "record"}, reqs)
	got, _ := readAll(t, path)
	if !reflect.DeepEqual(got, reqs) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, reqs)
	}
	out := filepath.Join(dir, "s.parquet")
	if _, err := SliceFile(context.Background(), path, out, SliceSpec{Start: 1, Speedup: 2}); err != nil {
		t.Fatal(err)
	}
	sliced, _ := readAll(t, out)
	for i, g := range sliced {
		if !reflect.DeepEqual(g.Params, reqs[i+1].Params) {
			t.Errorf("slice row %d: %+v, want the params of %+v", i, g.Params, reqs[i+1].Params)
		}
	}
	var n int
	for i := range 3 {
		src := NewShardSource(NewSliceSource(got), Shard{Index: i, Count: 3})
		for src.Next() {
			if g := src.Request(); !reflect.DeepEqual(g, reqs[g.ID]) {
				t.Errorf("shard %d: %+v, want %+v", i, g, reqs[g.ID])
			}
			n++
		}
	}
	if len(sliced) != len(reqs)-1 || n != len(reqs) {
		t.Errorf("slice kept %d rows, shards %d", len(sliced), n)
	}
	// A file written before the columns existed: the trace/v1 core only.
	old := filepath.Join(dir, "old.parquet")
	writeForeign(t, old, foreignSchema(nil), appendCore)
	rows, _ := readAll(t, old)
	if len(rows) != 2 || rows[0].Params != nil || rows[1].Params != nil {
		t.Errorf("a file without recording columns reads as %+v", rows)
	}
}

// TestParamsWriterRejects: the writer refuses bad recording fields, naming the file, the
// row, the request_id and the column.
func TestParamsWriterRejects(t *testing.T) {
	cases := []struct {
		p    Params
		want string
	}{
		{Params{API: "chat/completions"}, `api: "chat/completions", want one of`},
		{Params{API: "Chat"}, `api: "Chat", want one of`},
		{Params{MaxTokens: -1}, "max_tokens: -1, must be >= 1"},
		{Params{N: -2}, "n: -2, must be >= 1"},
		{Params{Stream: true}, "stream: Stream set without HasStream"},
	}
	for _, c := range cases {
		path, err := writeOne(t, Request{ID: 7, PromptTokens: 10, OutputTokens: 1, Params: &c.p})
		if err == nil || !strings.Contains(err.Error(), path+": row 0 (request_id 7): "+c.want) {
			t.Errorf("Write: %v, want an error naming the file, row and %q", err, c.want)
		}
	}
}

// TestParamsReaderRejects: a file another tool wrote with a bad recording value is
// refused at the bad row, naming the file, the row, the request_id and the column.
func TestParamsReaderRejects(t *testing.T) {
	sc := foreignSchema([]arrow.Field{
		{Name: ColAPI, Type: arrow.BinaryTypes.String, Nullable: true}, {Name: ColMaxTokens, Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: ColN, Type: arrow.PrimitiveTypes.Int32, Nullable: true}, {Name: ColStream, Type: arrow.FixedWidthTypes.Boolean, Nullable: true}})
	cases := []struct {
		api    string
		max, n int32 // -100: null
		want   string
	}{
		{api: "grpc", max: -100, n: -100, want: `api: "grpc", want one of`},
		{max: 0, n: -100, want: "max_tokens: 0, must be >= 1"},
		{max: -100, n: -3, want: "n: -3, must be >= 1"},
	}
	for _, c := range cases {
		foreign := filepath.Join(t.TempDir(), "f.parquet")
		writeForeign(t, foreign, sc, func(b *array.RecordBuilder) {
			appendCore(b)
			// Row 0 is a good one.
			b.Field(4).(*array.StringBuilder).Append("completions")
			b.Field(5).(*array.Int32Builder).Append(16)
			b.Field(6).(*array.Int32Builder).Append(2)
			b.Field(7).(*array.BooleanBuilder).Append(false)
			appendStr(b.Field(4).(*array.StringBuilder), c.api)
			for k, v := range []int32{c.max, c.n} {
				if v == -100 {
					b.Field(5 + k).AppendNull()
				} else {
					b.Field(5 + k).(*array.Int32Builder).Append(v)
				}
			}
			b.Field(7).AppendNull()
		})
		rows, err := readRows(t, foreign)
		if want := (&Params{API: "completions", MaxTokens: 16, N: 2, HasStream: true}); len(rows) != 1 || !reflect.DeepEqual(rows[0].Params, want) {
			t.Errorf("%q: the good row read as %+v", c.want, rows)
		}
		if err == nil || !strings.Contains(err.Error(), foreign+" row 1: request_id 7: "+c.want) {
			t.Errorf("read: %v, want %q", err, c.want)
		}
	}
}

// TestInfoParams: trace info's recording figures, worked by hand over 200 rows: every
// 4th row has no Params (50); of the other 150 the api cycles chat, responses, "" by
// i%3; stream true on the even ones (the rows i%4 == 2: 50), n = 2 on i%5 == 0;
// max_tokens 100 on rows i%10 == 1, else 1000.
func TestInfoParams(t *testing.T) {
	reqs := make([]Request, 200)
	var streamed, multi, maxT int64
	apis := map[string]int64{}
	for i := range reqs {
		reqs[i] = Request{ID: int64(i), Arrival: 1000 * time.Duration(i), PromptTokens: 10, OutputTokens: 1}
		if i%4 == 0 {
			apis[""]++
			continue
		}
		p := &Params{API: []string{"chat", "responses", ""}[i%3], MaxTokens: 1000, N: 1, Stream: i%2 == 0, HasStream: true}
		if i%5 == 0 {
			p.N = 2
			multi++
		}
		if i%10 == 1 {
			p.MaxTokens = 100
		}
		if p.Stream {
			streamed++
		}
		maxT++
		apis[p.API]++
		reqs[i].Params = p
	}
	info, err := ComputeInfo(context.Background(), NewSliceSource(reqs), Meta{Source: "record"})
	if err != nil {
		t.Fatal(err)
	}
	pi := info.Params
	if pi == nil || pi.Recorded != 150 || !maps.Equal(pi.APIs, apis) || pi.Streamed != streamed || pi.Streamed != 50 ||
		pi.Multi != multi || pi.MultiShare != float64(multi)/200 || pi.StreamShare != 0.25 {
		t.Fatalf("params info %+v, want 150 recorded, apis %v, %d streamed, %d with n > 1", pi, apis, streamed, multi)
	}
	// 20 rows at 100 (i%10 == 1, never i%4 == 0) and 130 at 1000: p50 1000, min 100.
	if m := pi.MaxTokens; m == nil || m.Min != 100 || m.Max != 1000 || m.P50 != 1000 || m.Sum != 20*100+130*1000 || int64(maxT) != 150 {
		t.Errorf("max_tokens %+v", pi.MaxTokens)
	}
	checkInfoGolden(t, info, "params")
	// A trace without recording columns has no params section.
	plain, err := ComputeInfo(context.Background(), NewSliceSource(reqs[:1]), Meta{})
	if err != nil || plain.Params != nil {
		t.Errorf("info of a trace without params: %+v, %v", plain.Params, err)
	}
}

// writeOne writes r alone to a new file, abandoned, and returns its path and Write's error.
func writeOne(t *testing.T, r Request) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "w.parquet")
	w, err := Create(path, Meta{})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Write(r)
	w.Abort()
	return path, err
}

// readRows reads the file at path to its end or first error: the rows before it, and it.
func readRows(t *testing.T, path string) ([]Request, error) {
	t.Helper()
	rd, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var rows []Request
	for rd.Next() {
		rows = append(rows, rd.Request())
	}
	return rows, rd.Err()
}

// foreignSchema is the schema of a file another tool wrote: the four columns trace/v1
// requires, then more.
func foreignSchema(more []arrow.Field) *arrow.Schema {
	md := arrow.NewMetadata([]string{MetaFormat}, []string{Format})
	return arrow.NewSchema(append([]arrow.Field{{Name: ColRequestID, Type: arrow.PrimitiveTypes.Int64}, {Name: ColArrivalNS, Type: arrow.PrimitiveTypes.Int64},
		{Name: ColPromptTokens, Type: arrow.PrimitiveTypes.Int32}, {Name: ColOutputTokens, Type: arrow.PrimitiveTypes.Int32}}, more...), &md)
}

// appendCore appends the required columns of two rows to a foreignSchema's builder:
// request_id 6 and 7, at 0 and 1, of 100 prompt tokens and 1 output token.
func appendCore(b *array.RecordBuilder) {
	b.Field(0).(*array.Int64Builder).AppendValues([]int64{6, 7}, nil)
	b.Field(1).(*array.Int64Builder).AppendValues([]int64{0, 1}, nil)
	b.Field(2).(*array.Int32Builder).AppendValues([]int32{100, 100}, nil)
	b.Field(3).(*array.Int32Builder).AppendValues([]int32{1, 1}, nil)
}
