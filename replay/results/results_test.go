package results

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
)

// typeName spells a contract type as docs/results-format.md does.
func typeName(t arrow.DataType) string {
	if l, ok := t.(*arrow.ListType); ok {
		return "list<" + typeName(l.Elem()) + ">"
	}
	if t.ID() == arrow.STRING {
		return "string"
	}
	return t.Name()
}

// TestColumnTable: names are unique, Schema is the table, a later revision's column is
// nullable (an older file lacks it and reads as null), and docs/results-format.md lists
// exactly these columns with these types and nullability.
func TestColumnTable(t *testing.T) {
	seen := map[string]bool{}
	for i, c := range columns {
		if seen[c.Name] {
			t.Errorf("column %s listed twice", c.Name)
		}
		seen[c.Name] = true
		f := Schema.Field(i)
		if f.Name != c.Name || !arrow.TypeEqual(f.Type, c.Type) || f.Nullable != c.Nullable {
			t.Errorf("Schema field %d is %v, want %+v", i, f, c)
		}
		if !c.Required() && !c.Nullable {
			t.Errorf("column %s came in revision 1.%d but is not nullable: an older file could not read it as null", c.Name, c.Since)
		}
	}
	if Schema.NumFields() != len(columns) {
		t.Errorf("Schema has %d fields, the table %d", Schema.NumFields(), len(columns))
	}

	doc, err := os.ReadFile("../../docs/results-format.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(doc)
	sec = sec[strings.Index(sec, "## Columns"):]
	sec = sec[:strings.Index(sec[3:], "\n## ")+3]
	var rows [][]string
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 5 || strings.TrimSpace(cells[1]) == "column" || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		rows = append(rows, []string{strings.TrimSpace(cells[1]), strings.ReplaceAll(strings.TrimSpace(cells[2]), `\`, ""), strings.TrimSpace(cells[3])})
	}
	if len(rows) != len(columns) {
		t.Fatalf("docs/results-format.md lists %d columns, the contract %d", len(rows), len(columns))
	}
	for i, c := range columns {
		null := map[bool]string{true: "yes", false: "no"}[c.Nullable]
		if want := []string{c.Name, typeName(c.Type), null}; strings.Join(rows[i], " ") != strings.Join(want, " ") {
			t.Errorf("docs row %d is %q, the contract says %q", i, rows[i], want)
		}
	}
}

func TestStatuses(t *testing.T) {
	want := []Status{"ok", "http_error", "timeout", "transport_error", "stream_error", "dropped", "canceled"}
	got := Statuses()
	if strings.Join(toStrings(got), ",") != strings.Join(toStrings(want), ",") {
		t.Errorf("Statuses() = %v, want %v", got, want)
	}
	got[0] = "changed"
	if Statuses()[0] != StatusOK {
		t.Error("Statuses returns the contract's own slice")
	}
}

func toStrings(s []Status) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = string(v)
	}
	return out
}

// withFields returns Schema's fields changed by edit.
func withFields(edit func([]arrow.Field) []arrow.Field) *arrow.Schema {
	return arrow.NewSchema(edit(append([]arrow.Field(nil), Schema.Fields()...)), nil)
}

func TestCheck(t *testing.T) {
	idx := func(name string) int { return Schema.FieldIndices(name)[0] }
	cases := []struct {
		name    string
		schema  *arrow.Schema
		column  string // the column the error names; "" = accepted
		errHas  string
		checkAt func(*testing.T, *Layout)
	}{
		{name: "contract", schema: Schema},
		{name: "reordered", schema: withFields(func(fs []arrow.Field) []arrow.Field {
			for i, j := 0, len(fs)-1; i < j; i, j = i+1, j-1 {
				fs[i], fs[j] = fs[j], fs[i]
			}
			return fs
		}), checkAt: func(t *testing.T, l *Layout) {
			last := columns[len(columns)-1].Name
			if l.Index(ColRequestID) != len(columns)-1 || l.Index(last) != 0 {
				t.Errorf("reversed columns located at %d and %d", l.Index(ColRequestID), l.Index(last))
			}
		}},
		{name: "unknown extra column", schema: withFields(func(fs []arrow.Field) []arrow.Field {
			return append([]arrow.Field{{Name: "from_the_future", Type: arrow.BinaryTypes.String}}, fs...)
		}), checkAt: func(t *testing.T, l *Layout) {
			if l.Index(ColRequestID) != 1 || l.Index("from_the_future") != -1 {
				t.Errorf("request_id at %d, unknown column at %d", l.Index(ColRequestID), l.Index("from_the_future"))
			}
		}},
		{name: "missing required", schema: withFields(func(fs []arrow.Field) []arrow.Field {
			return append(fs[:idx(ColSentNS)], fs[idx(ColSentNS)+1:]...)
		}), column: ColSentNS, errHas: "missing"},
		{name: "wrong type", schema: withFields(func(fs []arrow.Field) []arrow.Field {
			fs[idx(ColShard)].Type = arrow.PrimitiveTypes.Int64
			return fs
		}), column: ColShard, errHas: "type int64, want int32"},
		{name: "wrong list element", schema: withFields(func(fs []arrow.Field) []arrow.Field {
			fs[idx(ColChunkTokens)].Type = arrow.ListOf(arrow.PrimitiveTypes.Int64)
			return fs
		}), column: ColChunkTokens, errHas: "want list"},
		{name: "not a list", schema: withFields(func(fs []arrow.Field) []arrow.Field {
			fs[idx(ColChunkNS)].Type = arrow.PrimitiveTypes.Int64
			return fs
		}), column: ColChunkNS, errHas: "type int64"},
		{name: "nullable where the contract is not", schema: withFields(func(fs []arrow.Field) []arrow.Field {
			fs[idx(ColStatus)].Nullable = true
			return fs
		}), column: ColStatus, errHas: "nullable true, want nullable false"},
		{name: "not nullable where the contract is", schema: withFields(func(fs []arrow.Field) []arrow.Field {
			fs[idx(ColError)].Nullable = false
			return fs
		}), column: ColError, errHas: "nullable false, want nullable true"},
		{name: "list elements nullable (other writers)", schema: withFields(func(fs []arrow.Field) []arrow.Field {
			fs[idx(ColChunkNS)].Type = arrow.ListOf(arrow.PrimitiveTypes.Int64)
			return fs
		})},
		{name: "twice", schema: withFields(func(fs []arrow.Field) []arrow.Field {
			return append(fs, fs[idx(ColEndNS)])
		}), column: ColEndNS, errHas: "appears 2 times"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Check(tc.schema)
			if tc.column == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if tc.checkAt != nil {
					tc.checkAt(t, l)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.Column != tc.column || !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), "column "+tc.column) {
				t.Fatalf("error %v, want one naming column %s with %q", err, tc.column, tc.errHas)
			}
		})
	}
}

// TestLaterOptionalColumnReadsAsNull: a file written before a column was added (revision
// 1.0) passes the check, and the column reads as null; a file that has it reads it.
func TestLaterOptionalColumnReadsAsNull(t *testing.T) {
	var v10 []Column // revision 1.0: the schema of a file written before session_id came
	for _, c := range columns {
		if c.Since == 0 {
			v10 = append(v10, c)
		}
	}
	older := schemaOf(v10)
	if older.NumFields() == Schema.NumFields() {
		t.Fatal("no column of a later revision in the contract")
	}

	l, err := Check(older)
	if err != nil {
		t.Fatalf("older file refused: %v", err)
	}
	if l.Index("session_id") != -1 {
		t.Fatalf("absent column located at %d", l.Index("session_id"))
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, older)
	defer b.Release()
	rec := b.NewRecord()
	defer rec.Release()
	x := NewArrays(rec, l)
	a := Array[*array.Int64](x, "session_id")
	if x.Err() != nil || a != nil {
		t.Fatalf("absent optional column: %v, %v; want a nil array and no error", a, x.Err())
	}
	if v := Int64At(a, 0); v != Null {
		t.Errorf("absent column reads %d, want Null", v)
	}
	if Array[*array.Int64](x, "no_such_column"); x.Err() == nil {
		t.Error("a name the contract does not have gave no error")
	}
	x = NewArrays(rec, l)
	if Array[*array.String](x, ColSentNS); x.Err() == nil || !strings.Contains(x.Err().Error(), "column "+ColSentNS) {
		t.Errorf("an array of the wrong type: %v", x.Err())
	}

	// A newer file has the column: it is located and read.
	b2 := array.NewRecordBuilder(memory.DefaultAllocator, Schema)
	defer b2.Release()
	bs, err := NewBuilders(b2)
	if err != nil {
		t.Fatal(err)
	}
	sid := Builder[*array.Int64Builder](bs, "session_id")
	if err := bs.Done(); err == nil {
		t.Error("Done accepted a record with unbound columns")
	}
	for i := range b2.Fields() {
		if i != Schema.FieldIndices("session_id")[0] {
			b2.Field(i).AppendEmptyValue()
		}
	}
	AppendInt64(sid, 42)
	rec2 := b2.NewRecord()
	defer rec2.Release()
	l2, err := Check(Schema)
	if err != nil {
		t.Fatal(err)
	}
	x2 := NewArrays(rec2, l2)
	if a2 := Array[*array.Int64](x2, "session_id"); x2.Err() != nil || Int64At(a2, 0) != 42 {
		t.Errorf("present column reads %v (%v), want 42", a2, x2.Err())
	}

	// A later column is never required: a file of the later revision without it is an
	// older file, not a broken one; a missing 1.0 column still is.
	drop := withFields(func(fs []arrow.Field) []arrow.Field { return fs[1:] })
	if _, err := Check(drop); err == nil || !strings.Contains(err.Error(), ColRequestID) {
		t.Errorf("missing request_id: %v", err)
	}
}

func TestBuilders(t *testing.T) {
	b := array.NewRecordBuilder(memory.DefaultAllocator, Schema)
	defer b.Release()
	bs, err := NewBuilders(b)
	if err != nil {
		t.Fatal(err)
	}
	if x := Builder[*array.StringBuilder](bs, ColSentNS); x != nil || bs.Done() == nil || !strings.Contains(bs.Done().Error(), ColSentNS) {
		t.Errorf("a builder of the wrong type: %v, %v", x, bs.Done())
	}
	bs, _ = NewBuilders(b)
	Builder[*array.Int64Builder](bs, ColSentNS)
	Builder[*array.Int64Builder](bs, ColSentNS)
	if err := bs.Done(); err == nil || !strings.Contains(err.Error(), "bound twice") {
		t.Errorf("bound twice: %v", err)
	}
	bs, _ = NewBuilders(b)
	Builder[*array.Int64Builder](bs, ColRequestID)
	if err := bs.Done(); err == nil || !strings.Contains(err.Error(), "column "+ColShard) {
		t.Errorf("unbound columns: %v, want one naming %s", err, ColShard)
	}
	bad := array.NewRecordBuilder(memory.DefaultAllocator, withFields(func(fs []arrow.Field) []arrow.Field { return fs[1:] }))
	defer bad.Release()
	if _, err := NewBuilders(bad); err == nil {
		t.Error("NewBuilders accepted a schema without request_id")
	}
}

func TestNullConvention(t *testing.T) {
	b := array.NewInt32Builder(memory.DefaultAllocator)
	defer b.Release()
	AppendInt32(b, Null)
	AppendInt32(b, 0)
	AppendInt32(b, 7)
	a := b.NewInt32Array()
	defer a.Release()
	if a.NullN() != 1 || Int32At(a, 0) != Null || Int32At(a, 1) != 0 || Int32At(a, 2) != 7 || Int32At(nil, 0) != Null {
		t.Errorf("round trip of Null, 0, 7: %v", a)
	}
}
