// Package parquettest reads the flat Parquet files the reports write (summary.parquet,
// timeseries.parquet, sweep.parquet) back for tests, one row as a map.
package parquettest

import (
	"context"
	"testing"

	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// Row returns row k of the file at path: each column's value by name (float64, int64, bool
// or string; nil for a null). A column named twice fails the test.
func Row(t *testing.T, path string, k int) map[string]any {
	t.Helper()
	f, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fr, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{BatchSize: 16}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	out := map[string]any{}
	for i := range int(tbl.NumCols()) {
		name := tbl.Schema().Field(i).Name
		if _, dup := out[name]; dup {
			t.Errorf("%s: column %s twice", path, name)
		}
		a := tbl.Column(i).Data().Chunk(0)
		if a.IsNull(k) {
			out[name] = nil
			continue
		}
		switch v := a.(type) {
		case *array.Float64:
			out[name] = v.Value(k)
		case *array.Int64:
			out[name] = v.Value(k)
		case *array.Boolean:
			out[name] = v.Value(k)
		case *array.String:
			out[name] = v.Value(k)
		}
	}
	return out
}
