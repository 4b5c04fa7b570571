package results

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
)

// fullRecords returns records in which every column of the contract holds a value in some
// row and is null in another (for the nullable ones), every value distinct per row.
func fullRecords() []*Result {
	ok := NewResult(7, 3, 1_000, 11, 4)
	ok.Status, ok.HTTPStatus = StatusOK, 200
	ok.SentNS = 1_050
	ok.ChunkNS, ok.ChunkTokens = []int64{100, 250, 400}, []int32{1, 2, 1}
	ok.FirstTokenNS, ok.EndNS = ok.SentNS+100, ok.SentNS+400
	ok.PromptTokensServer, ok.OutputTokens, ok.OutputTokensSource = 12, 4, SourceUsage
	ok.SessionID, ok.Turn, ok.SessionWaitNS, ok.PromptTokensCached = 1<<40+5, 2, 37_000, 8
	ok.GapNS, ok.RecordedArrivalNS, ok.RecordedDurationNS, ok.RecordedCachedTokens = 19e9, 1<<41, 4e9, 6
	ok.FirstAnswerNS, ok.ReasoningTokens, ok.ReasoningTokensSource = ok.SentNS+250, 3, SourceUsage
	ok.Images, ok.ImageTokens = 2, 8 // two images that count for 8 of its 12 prompt tokens

	tok := NewResult(8, 3, 2_000, 13, 6)
	tok.Status, tok.HTTPStatus, tok.Error = StatusStreamError, 200, "stream broken after 2 output chunks"
	tok.SentNS = 2_010
	tok.ChunkNS = []int64{30, 90}
	tok.FirstTokenNS, tok.EndNS = tok.SentNS+30, tok.SentNS+90
	tok.OutputTokens, tok.OutputTokensSource = 2, SourceTokenizer
	tok.SessionID, tok.Turn, tok.PromptTokensCached = 0, 0, 0            // a first turn: no wait; nothing cached
	tok.RecordedArrivalNS, tok.RecordedCachedTokens = 0, 0               // a first call: no gap; no duration recorded
	tok.ReasoningTokens, tok.ReasoningTokensSource = 2, SourceChunkUsage // all reasoning: no answer yet

	drop := NewResult(9, 3, 3_000, 15, 8)
	drop.Inputs = 4 // an embeddings request of four inputs, never sent
	drop.Status, drop.Error = StatusDropped, "max-inflight reached"
	drop.ChunkNS = []int64{} // chunk_ns is never null: an empty list reads back as one
	return []*Result{ok, tok, drop}
}

// writeResultsFile journals recs and converts the journal to a results file.
func writeResultsFile(t *testing.T, recs []*Result) string {
	t.Helper()
	dir := t.TempDir()
	jp := filepath.Join(dir, "r.parquet.journal")
	j, err := CreateJournal(jp, &RunMeta{RunID: "c0ffee", Mode: ModeOpen, Flags: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := j.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "r.parquet")
	if _, err := ConvertJournal(jp, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameFields reports how got differs from the contract's schema, field by field.
func sameFields(got *arrow.Schema) string {
	var diffs []string
	want := Schema.Fields()
	if got.NumFields() != len(want) {
		diffs = append(diffs, "field count")
	}
	for i, w := range want {
		if i >= got.NumFields() {
			break
		}
		g := got.Field(i)
		if g.Name != w.Name || g.Nullable != w.Nullable || typeString(g.Type) != typeString(w.Type) {
			diffs = append(diffs, g.String()+" != "+w.String())
		}
	}
	return strings.Join(diffs, "; ")
}

// typeString names a type ignoring list element names and nullability, which Parquet
// round trips change.
func typeString(t arrow.DataType) string {
	if l, ok := t.(*arrow.ListType); ok {
		return "list<" + typeString(l.Elem()) + ">"
	}
	return t.String()
}

// TestWriterSchemaIsTheContract: the journal and the results file carry exactly the
// contract's columns, in its order, with its types and nullability, and every column is
// written: each holds a value in some row (and, when nullable, a null in another).
func TestWriterSchemaIsTheContract(t *testing.T) {
	out := writeResultsFile(t, fullRecords())
	jf, err := os.Open(out + JournalSuffix) // ConvertJournal leaves the journal; Run removes it
	if err != nil {
		t.Fatal(err)
	}
	defer jf.Close()
	rdr, err := ipc.NewReader(jf)
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Release()
	if d := sameFields(rdr.Schema()); d != "" {
		t.Errorf("journal schema differs from the contract: %s", d)
	}

	tbl, _ := readTable(t, out)
	defer tbl.Release()
	if d := sameFields(tbl.Schema()); d != "" {
		t.Errorf("results file schema differs from the contract: %s", d)
	}
	for i, c := range Columns() {
		col := tbl.Column(i)
		if col.Len()-col.NullN() == 0 {
			t.Errorf("column %s: no value written in any row", c.Name)
		}
		if c.Nullable && col.NullN() == 0 {
			t.Errorf("column %s: nullable, but no row wrote a null", c.Name)
		}
	}
}

// derivedColumns are written from other fields (Result.TTFT, TPOT, E2E) and not read back
// into a Result.
var derivedColumns = []string{ColTTFTMS, ColTPOTMS, ColE2EMS}

// TestEveryColumnReadBack: ReadFile gives back every field of every record, so every
// non-derived column is read; and the reader locates one array per such column.
func TestEveryColumnReadBack(t *testing.T) {
	recs := fullRecords()
	got, _, err := ReadFile(writeResultsFile(t, recs))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(recs) {
		t.Fatalf("%d rows, want %d", len(got), len(recs))
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], *recs[i]) {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], *recs[i])
		}
	}
	if n := reflect.TypeFor[resultArrays]().NumField(); n+len(derivedColumns) != len(Columns()) {
		t.Errorf("the reader locates %d arrays and %d columns are derived; the contract has %d columns", n, len(derivedColumns), len(Columns()))
	}
	if n := reflect.TypeFor[resultBuilders]().NumField(); n-2 != len(Columns()) { // + the two list value builders
		t.Errorf("the writer holds %d column builders; the contract has %d columns", n-2, len(Columns()))
	}
}

// readTable reads a whole Parquet file and its schema metadata.
func readTable(t *testing.T, path string) (arrow.Table, arrow.Metadata) {
	t.Helper()
	pr, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 64}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := fr.Schema()
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tbl, sc.Metadata()
}

// rewrite writes the records of the results file at in to a new file with the columns
// edit returns (by name), keeping the metadata.
func rewrite(t *testing.T, in string, edit func([]arrow.Field) []arrow.Field) string {
	t.Helper()
	tbl, md := readTable(t, in)
	defer tbl.Release()
	fields := edit(append([]arrow.Field(nil), tbl.Schema().Fields()...))
	sc := arrow.NewSchema(fields, &md)
	var cols []arrow.Column
	for _, f := range fields {
		cols = append(cols, *tbl.Column(tbl.Schema().FieldIndices(f.Name)[0]))
	}
	nt := array.NewTable(sc, cols, tbl.NumRows())
	defer nt.Release()
	out := filepath.Join(t.TempDir(), "edited.parquet")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := pqarrow.WriteTable(nt, f, 64, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReadFileByName: ReadFile finds columns by name, whatever their order, and refuses a
// file that lacks a column, naming the column and the file.
func TestReadFileByName(t *testing.T) {
	recs := fullRecords()
	in := writeResultsFile(t, recs)
	reversed := rewrite(t, in, func(fs []arrow.Field) []arrow.Field {
		for i, j := 0, len(fs)-1; i < j; i, j = i+1, j-1 {
			fs[i], fs[j] = fs[j], fs[i]
		}
		return fs
	})
	got, meta, err := ReadFile(reversed)
	if err != nil {
		t.Fatalf("reordered columns: %v", err)
	}
	if meta.RunID != "c0ffee" || len(got) != len(recs) {
		t.Fatalf("reordered columns: %d rows, run %q", len(got), meta.RunID)
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], *recs[i]) {
			t.Errorf("reordered, row %d:\n got %+v\nwant %+v", i, got[i], *recs[i])
		}
	}

	noStatus := rewrite(t, in, func(fs []arrow.Field) []arrow.Field {
		var out []arrow.Field
		for _, f := range fs {
			if f.Name != ColStatus {
				out = append(out, f)
			}
		}
		return out
	})
	_, _, err = ReadFile(noStatus)
	var ce *Error
	if !errors.As(err, &ce) || ce.Column != ColStatus || !strings.Contains(err.Error(), noStatus) {
		t.Errorf("missing status column: %v; want an error naming the column and the file", err)
	}
}

// TestConvertJournalChecksByName: a journal whose schema breaks the contract is refused
// with the column named.
func TestConvertJournalChecksByName(t *testing.T) {
	dir := t.TempDir()
	jp := filepath.Join(dir, "bad.journal")
	f, err := os.Create(jp)
	if err != nil {
		t.Fatal(err)
	}
	fs := append([]arrow.Field(nil), Schema.Fields()...)
	fs[1].Type = arrow.PrimitiveTypes.Int64 // shard
	md := arrow.NewMetadata([]string{MetaFormat, MetaRun}, []string{Format, "{}"})
	w := ipc.NewWriter(f, ipc.WithSchema(arrow.NewSchema(fs, &md)))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = ConvertJournal(jp, filepath.Join(dir, "out.parquet"))
	if err == nil || !strings.Contains(err.Error(), "column shard") || !strings.Contains(err.Error(), jp) {
		t.Errorf("ConvertJournal: %v; want an error naming column shard and the journal", err)
	}
}

// readWithout writes recs, drops the columns of revision 1.since from the file (an older
// writer's file) and reads it back.
func readWithout(t *testing.T, recs []*Result, since, want int) []Result {
	t.Helper()
	rev := map[string]bool{}
	for _, c := range Columns() {
		if c.Since == since {
			rev[c.Name] = true
		}
	}
	if len(rev) != want {
		t.Fatalf("revision 1.%d has %d columns, want %d", since, len(rev), want)
	}
	older := rewrite(t, writeResultsFile(t, recs), func(fs []arrow.Field) []arrow.Field {
		var out []arrow.Field
		for _, f := range fs {
			if !rev[f.Name] {
				out = append(out, f)
			}
		}
		return out
	})
	got, _, err := ReadFile(older)
	if err != nil {
		t.Fatalf("file without revision 1.%d: %v", since, err)
	}
	if len(got) != len(recs) {
		t.Fatalf("%d rows, want %d", len(got), len(recs))
	}
	return got
}

// TestOlderFileReadsNewColumnsAsNull: a results file of revision 1.0 (without session_id,
// turn, session_wait_ns and prompt_tokens_cached) still reads, every other field as
// written and the four as null.
func TestOlderFileReadsNewColumnsAsNull(t *testing.T) {
	recs := fullRecords()
	got := readWithout(t, recs, 1, 4)
	for i := range got {
		want := *recs[i]
		want.SessionID, want.Turn, want.SessionWaitNS, want.PromptTokensCached = Null, Null, Null, Null
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
}

// nullsOf sets to null what each revision added, by revision: a file written before it
// reads so.
var nullsOf = map[int]func(*Result){
	3: func(r *Result) { r.FirstAnswerNS, r.ReasoningTokens, r.ReasoningTokensSource = Null, Null, "" },
	4: func(r *Result) { r.Images, r.ImageTokens, r.Inputs = Null, Null, Null },
}

// TestRevision12FileReadsReasoningAsNull: a file of revision 1.2, without first_answer_ns,
// reasoning_tokens and reasoning_tokens_source (nor what came later), reads them as null
// and the rest as written.
func TestRevision12FileReadsReasoningAsNull(t *testing.T) { readsAsNullBefore(t, 3, 3) }

// TestRevision13FileReadsImagesAndInputsAsNull: a file of revision 1.3, without images,
// image_tokens and inputs, reads them as null and the rest as written.
func TestRevision13FileReadsImagesAndInputsAsNull(t *testing.T) { readsAsNullBefore(t, 4, 3) }

// readsAsNullBefore writes fullRecords, drops the columns of revision 1.since and later
// (of which 1.since has n) and reads the file back: each record must be as written with
// those revisions' columns null (nullsOf).
func readsAsNullBefore(t *testing.T, since, n int) {
	t.Helper()
	recs := fullRecords()
	drop, at := map[string]bool{}, 0
	for _, c := range Columns() {
		if c.Since < since {
			continue
		}
		if nullsOf[c.Since] == nil {
			t.Fatalf("revision 1.%d (%s) has no entry in nullsOf", c.Since, c.Name)
		}
		drop[c.Name] = true
		if c.Since == since {
			at++
		}
	}
	if at != n {
		t.Fatalf("revision 1.%d has %d columns, want %d", since, at, n)
	}
	older := rewrite(t, writeResultsFile(t, recs), func(fs []arrow.Field) []arrow.Field {
		var out []arrow.Field
		for _, f := range fs {
			if !drop[f.Name] {
				out = append(out, f)
			}
		}
		return out
	})
	got, _, err := ReadFile(older)
	if err != nil {
		t.Fatalf("revision 1.%d file: %v", since-1, err)
	}
	if len(got) != len(recs) {
		t.Fatalf("%d rows, want %d", len(got), len(recs))
	}
	for i := range got {
		want := *recs[i]
		for rev, clear := range nullsOf {
			if rev >= since {
				clear(&want)
			}
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want)
		}
	}
}
