package decode

import (
	"errors"
	"fmt"
)

// listCursor reads a Parquet list column (list<int64> or list<int32>) row by row straight
// from the column chunk's levels into reused buffers: no Arrow list arrays are built, which
// for chunk_ns (10^8 entries a million requests) saves most of the decoding time and memory.
//
// Levels: rep == 0 starts a row; def == maxDef is a value; def == emptyDef is an empty list;
// def < emptyDef a null list (only when the list is nullable); anything between emptyDef and
// maxDef a null element, which the results format does not allow.
type listCursor[T int32 | int64] struct {
	read     func(n int64, vals []T, def, rep []int16) (int64, int, error)
	emptyDef int16
	maxDef   int16
	vals     []T
	def, rep []int16
	n, pos   int // levels buffered, next level
	vpos     int // next value
	row      []T // a row straddling a refill is gathered here
	eof      bool
	allNull  bool // every row is a null list: next need not decode
}

// cursorLevels is how many levels a cursor decodes at a time (a variable so tests can make
// rows straddle refills).
var cursorLevels = 1 << 16

func newListCursor[T int32 | int64](read func(int64, []T, []int16, []int16) (int64, int, error), listNullable, elemNullable bool, maxDef int16) (*listCursor[T], error) {
	c := &listCursor[T]{read: read, vals: make([]T, cursorLevels), def: make([]int16, cursorLevels), rep: make([]int16, cursorLevels)}
	if listNullable {
		c.emptyDef = 1
	}
	want := c.emptyDef + 1
	if elemNullable {
		want++
	}
	if maxDef != want {
		return nil, fmt.Errorf("list column has max definition level %d, want %d for a flat list", maxDef, want)
	}
	c.maxDef = maxDef
	return c, nil
}

func (c *listCursor[T]) fill() error {
	n, _, err := c.read(int64(len(c.def)), c.vals, c.def, c.rep)
	if err != nil {
		return err
	}
	c.n, c.pos, c.vpos = int(n), 0, 0
	if n == 0 {
		c.eof = true
	}
	return nil
}

var errNullElement = errors.New("null list element")

// next returns the next row's values (valid until the next call) and whether the list is
// null. It fails at the end of the column.
func (c *listCursor[T]) next() (vals []T, null bool, err error) {
	if c.allNull {
		return nil, true, nil
	}
	if c.pos == c.n {
		if err := c.fill(); err != nil {
			return nil, false, err
		}
		if c.eof {
			return nil, false, errors.New("list column ended before the other columns")
		}
	}
	null = c.def[c.pos] < c.emptyDef
	gathered := false
	for {
		start, vstart := c.pos, c.vpos
		for c.pos < c.n && (c.pos == start && !gathered || c.rep[c.pos] != 0) {
			switch d := c.def[c.pos]; {
			case d == c.maxDef:
				c.vpos++
			case d > c.emptyDef:
				return nil, false, errNullElement
			}
			c.pos++
		}
		if c.pos < c.n || c.eof {
			if !gathered {
				return c.vals[vstart:c.vpos], null, nil
			}
			c.row = append(c.row, c.vals[vstart:c.vpos]...)
			return c.row, null, nil
		}
		// The row may go on in the next batch of levels.
		if !gathered {
			c.row = c.row[:0]
			gathered = true
		}
		c.row = append(c.row, c.vals[vstart:c.vpos]...)
		if err := c.fill(); err != nil {
			return nil, false, err
		}
		if c.eof {
			return c.row, null, nil
		}
		if c.rep[0] == 0 { // the row ended exactly at the batch boundary
			return c.row, null, nil
		}
	}
}
