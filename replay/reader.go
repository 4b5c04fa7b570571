package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// ReadFile reads a whole results file into memory: for tests, benchmarks and small runs
// (the analysis package streams).
func ReadFile(path string) ([]Result, *RunMeta, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: %w", err)
	}
	defer f.Close()
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: read %s: %w", path, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 8192}, memory.DefaultAllocator)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: read %s: %w", path, err)
	}
	schema, err := fr.Schema()
	if err != nil {
		return nil, nil, fmt.Errorf("replay: read %s: schema: %w", path, err)
	}
	meta, err := ParseRunMeta(schema)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: read %s: %w", path, err)
	}
	if err := checkColumns(schema); err != nil {
		return nil, nil, fmt.Errorf("replay: read %s: %w", path, err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("replay: read %s: %w", path, err)
	}
	defer rr.Release()
	var out []Result
	for rr.Next() {
		out = appendRecord(out, rr.Record())
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("replay: read %s: %w", path, err)
	}
	return out, meta, nil
}

func appendRecord(out []Result, rec arrow.Record) []Result {
	c := rec.Columns()
	i64 := func(j, i int) int64 {
		a := c[j].(*array.Int64)
		if a.IsNull(i) {
			return Null
		}
		return a.Value(i)
	}
	i32 := func(j, i int) int32 {
		a := c[j].(*array.Int32)
		if a.IsNull(i) {
			return Null
		}
		return a.Value(i)
	}
	str := func(j, i int) string {
		a := c[j].(*array.String)
		if a.IsNull(i) {
			return ""
		}
		return a.Value(i)
	}
	chunkNS := c[6].(*array.List)
	chunkNSv := chunkNS.ListValues().(*array.Int64)
	chunkTok := c[7].(*array.List)
	chunkTokv := chunkTok.ListValues().(*array.Int32)
	for i := 0; i < int(rec.NumRows()); i++ {
		r := Result{
			RequestID: i64(0, i), Shard: i32(1, i), ScheduledNS: i64(2, i),
			SentNS: i64(3, i), FirstTokenNS: i64(4, i), EndNS: i64(5, i),
			PromptTokens: i32(8, i), PromptTokensServer: i32(9, i), OutputTokensTarget: i32(10, i),
			OutputTokens: i32(11, i), OutputTokensSource: str(12, i), Status: Status(str(13, i)),
			Error: str(15, i),
		}
		if h := i32(14, i); h != Null {
			r.HTTPStatus = h
		}
		lo, hi := chunkNS.ValueOffsets(i)
		r.ChunkNS = append([]int64{}, chunkNSv.Int64Values()[lo:hi]...)
		if !chunkTok.IsNull(i) {
			lo, hi := chunkTok.ValueOffsets(i)
			r.ChunkTokens = append([]int32{}, chunkTokv.Int32Values()[lo:hi]...)
		}
		out = append(out, r)
	}
	return out
}

// checkColumns checks that s has results format v1's columns, in order, with their types
// and nullability. List element names and nullability are not compared: Parquet round
// trips rename them.
func checkColumns(s *arrow.Schema) error {
	want := Schema.Fields()
	got := s.Fields()
	if len(got) != len(want) {
		return fmt.Errorf("%d columns, want %d (results format v1)", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name || g.Nullable != w.Nullable || g.Type.ID() != w.Type.ID() {
			return fmt.Errorf("column %d is %s %s (nullable %v), want %s %s (nullable %v)", i, g.Name, g.Type, g.Nullable, w.Name, w.Type, w.Nullable)
		}
		if wl, ok := w.Type.(*arrow.ListType); ok {
			if gl := g.Type.(*arrow.ListType); gl.Elem().ID() != wl.Elem().ID() {
				return fmt.Errorf("column %s holds %s, want %s", g.Name, gl.Elem(), wl.Elem())
			}
		}
	}
	return nil
}
