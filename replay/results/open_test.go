package results

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// TestOpen: Open reads and validates the run of a results file, and refuses what is not
// one, saying what it is instead; the analysis and ReadFile both open files this way.
func TestOpen(t *testing.T) {
	path := writeResultsFile(t, fullRecords())
	f, err := Open(path, OpenOptions{BatchSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A run written without shard fields is one whole run: shard 0 of 1.
	if f.Run.RunID != "c0ffee" || f.Run.ShardCount != 1 || f.Run.ShardIndex != 0 {
		t.Errorf("run %+v, want run c0ffee, shard 0/1", f.Run)
	}
	if _, err := f.Check(); err != nil {
		t.Errorf("Check: %v", err)
	}
	if _, err := Open(path, OpenOptions{}); err == nil {
		t.Error("Open with batch size 0 succeeded: pqarrow would return no rows")
	}

	dir := t.TempDir()
	csv := filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(csv, []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(csv, OpenOptions{BatchSize: 1}); err == nil || !strings.Contains(err.Error(), "open "+csv) || !strings.Contains(err.Error(), "CSV") {
		t.Errorf("Open of a CSV: %v, want the file named and its kind said", err)
	}

	// A Parquet file of another format: the run metadata is refused, a trace with a hint.
	for format, want := range map[string]string{"trace/v1": "this is a trace", "other/v9": `want "results/v1"`} {
		other := rewriteMeta(t, path, format)
		_, err := Open(other, OpenOptions{BatchSize: 1})
		if err == nil || !strings.Contains(err.Error(), "read "+other) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open of a %s file: %v, want %q", format, err, want)
		}
	}
}

// rewriteMeta copies the results file at in with its format key set to format.
func rewriteMeta(t *testing.T, in, format string) string {
	t.Helper()
	tbl, md := readTable(t, in)
	defer tbl.Release()
	keys, vals := md.Keys(), append([]string(nil), md.Values()...)
	for i, k := range keys {
		if k == MetaFormat {
			vals[i] = format
		}
	}
	m := arrow.NewMetadata(keys, vals)
	out := filepath.Join(t.TempDir(), strings.ReplaceAll(format, "/", "-")+".parquet")
	var cols []arrow.Column
	for i := range tbl.Schema().Fields() {
		cols = append(cols, *tbl.Column(i))
	}
	nt := array.NewTable(arrow.NewSchema(tbl.Schema().Fields(), &m), cols, tbl.NumRows())
	defer nt.Release()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := pqarrow.WriteTable(nt, f, 64, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLeavesAndLocate: Leaves counts a map's two leaves and a list's one; Locate finds the
// contract's columns of a partial schema by name and leaves the others absent.
func TestLeavesAndLocate(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{
		{Name: ColStatus, Type: arrow.BinaryTypes.String},
		{Name: "labels", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.BinaryTypes.String)},
		{Name: ColChunkNS, Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
		{Name: ColSentNS, Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	want := map[string][]int{ColStatus: {0}, "labels": {1, 2}, ColChunkNS: {3}, ColSentNS: {4}}
	if got := Leaves(s); !reflect.DeepEqual(got, want) {
		t.Errorf("Leaves = %v, want %v", got, want)
	}
	l, err := Locate(s)
	if err != nil {
		t.Fatal(err)
	}
	if l.Index(ColSentNS) != 3 || l.Index(ColStatus) != 0 || l.Index(ColEndNS) != -1 {
		t.Errorf("Locate: sent_ns at %d, status at %d, end_ns at %d; want 3, 0, -1", l.Index(ColSentNS), l.Index(ColStatus), l.Index(ColEndNS))
	}
	twice := arrow.NewSchema([]arrow.Field{{Name: ColSentNS, Type: arrow.PrimitiveTypes.Int64}, {Name: ColSentNS, Type: arrow.PrimitiveTypes.Int64}}, nil)
	if _, err := Locate(twice); err == nil {
		t.Error("Locate accepted a column given twice")
	}
}
