package results

import (
	"fmt"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
)

// Builders binds the column builders of a RecordBuilder by contract column name, once, so
// that a writer appends to typed builders without knowing the column order.
type Builders struct {
	rb    *array.RecordBuilder
	l     *Layout
	bound []bool // per field of rb's schema
	err   error
}

// NewBuilders checks rb's schema against the contract and returns a binder for it.
func NewBuilders(rb *array.RecordBuilder) (*Builders, error) {
	l, err := Check(rb.Schema())
	if err != nil {
		return nil, err
	}
	return &Builders{rb: rb, l: l, bound: make([]bool, rb.Schema().NumFields())}, nil
}

// Builder returns the builder of the named column as a B (*array.Int64Builder,
// *array.ListBuilder, ...). On a column the schema lacks, one already bound or a builder
// of another type it returns the zero B and records the error for Done.
func Builder[B array.Builder](b *Builders, name string) B {
	var zero B
	i := b.l.Index(name)
	switch {
	case b.err != nil:
		return zero
	case i < 0:
		b.err = &Error{name, "not in the record's schema"}
		return zero
	case b.bound[i]:
		b.err = &Error{name, "bound twice"}
		return zero
	}
	x, ok := b.rb.Field(i).(B)
	if !ok {
		b.err = &Error{name, fmt.Sprintf("builder is %T, want %T", b.rb.Field(i), zero)}
		return zero
	}
	b.bound[i] = true
	return x
}

// Done returns the first error of Builder, or an error naming a column of the schema that
// no builder was bound to: a column the writer would leave unwritten.
func (b *Builders) Done() error {
	if b.err != nil {
		return b.err
	}
	for i, ok := range b.bound {
		if !ok {
			return &Error{b.rb.Schema().Field(i).Name, "no builder bound: the writer does not write it"}
		}
	}
	return nil
}

// Arrays locates the columns of records by contract column name, records having the
// schema a Layout was checked from.
type Arrays struct {
	rec arrow.Record
	l   *Layout
	err error
}

// NewArrays returns a locator of rec's columns; l is the Layout of rec's schema.
func NewArrays(rec arrow.Record, l *Layout) *Arrays { return &Arrays{rec: rec, l: l} }

// Array returns the named column as an A (*array.Int64, *array.List, ...). An optional
// column the file lacks gives the zero A: a nil array, which Int64At, Int32At and StringAt
// read as null. A required column missing, a name the contract lacks or an array of
// another type gives the zero A and records the error for Err.
func Array[A arrow.Array](x *Arrays, name string) A {
	var zero A
	if x.err != nil {
		return zero
	}
	i := x.l.Index(name)
	if i < 0 {
		if c, ok := Lookup(name); !ok || c.Required() {
			x.err = &Error{name, "missing"}
		}
		return zero
	}
	a, ok := x.rec.Column(i).(A)
	if !ok {
		x.err = &Error{name, fmt.Sprintf("array is %T, want %T", x.rec.Column(i), zero)}
		return zero
	}
	return a
}

// Err returns the first error of Array.
func (x *Arrays) Err() error { return x.err }

// AppendInt64 appends v, or a null when v is Null.
func AppendInt64(b *array.Int64Builder, v int64) {
	if v == Null {
		b.AppendNull()
	} else {
		b.Append(v)
	}
}

// AppendInt32 appends v, or a null when v is Null.
func AppendInt32(b *array.Int32Builder, v int32) {
	if v == Null {
		b.AppendNull()
	} else {
		b.Append(v)
	}
}

// AppendString appends v, or a null when v is "" (a nullable string column's null).
func AppendString(b *array.StringBuilder, v string) {
	if v == "" {
		b.AppendNull()
	} else {
		b.Append(v)
	}
}

// Int64At returns a's value at i, or Null when it is null or a is nil (a column the file
// lacks).
func Int64At(a *array.Int64, i int) int64 {
	if a == nil || a.IsNull(i) {
		return Null
	}
	return a.Value(i)
}

// Int32At returns a's value at i, or Null when it is null or a is nil (a column the file
// lacks).
func Int32At(a *array.Int32, i int) int32 {
	if a == nil || a.IsNull(i) {
		return Null
	}
	return a.Value(i)
}

// StringAt returns a's value at i, or "" when it is null or a is nil.
func StringAt(a *array.String, i int) string {
	if a == nil || a.IsNull(i) {
		return ""
	}
	return a.Value(i)
}
