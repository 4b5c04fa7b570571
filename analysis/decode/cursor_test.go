package decode

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// levels encodes rows of a nullable list<int64> (nil is a null list) as a Parquet column
// chunk's values, definition and repetition levels: null list 0, empty list 1, value 2.
func levels(rows [][]int64) (vals []int64, def, rep []int16) {
	for _, r := range rows {
		switch {
		case r == nil:
			def, rep = append(def, 0), append(rep, 0)
		case len(r) == 0:
			def, rep = append(def, 1), append(rep, 0)
		default:
			for k, v := range r {
				vals, def, rep = append(vals, v), append(def, 2), append(rep, int16(min(k, 1)))
			}
		}
	}
	return vals, def, rep
}

// Rows whose lists straddle the cursor's refills (of 1, 3 and 7 levels, and of whole
// batches) read back as written, null and empty lists included, and the column's end is an
// error, not an empty row.
func TestListCursorRefills(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var rows [][]int64
	for i := range 300 {
		switch {
		case i%13 == 4:
			rows = append(rows, nil)
		case i%11 == 2:
			rows = append(rows, []int64{})
		default:
			r := make([]int64, 1+rng.IntN(20))
			for k := range r {
				r[k] = rng.Int64N(1e9)
			}
			rows = append(rows, r)
		}
	}
	vals, def, rep := levels(rows)
	defer func(n int) { cursorLevels = n }(cursorLevels)
	for _, n := range []int{1, 3, 7, 1 << 16} {
		cursorLevels = n
		pos, vpos := 0, 0
		read := func(want int64, v []int64, d, r []int16) (int64, int, error) {
			got := min(int(want), len(def)-pos)
			nv := 0
			for k := range got {
				d[k], r[k] = def[pos+k], rep[pos+k]
				if d[k] == 2 {
					v[nv] = vals[vpos+nv]
					nv++
				}
			}
			pos, vpos = pos+got, vpos+nv
			return int64(got), nv, nil
		}
		c, err := newListCursor(read, true, false, 2)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range rows {
			got, null, err := c.next()
			if err != nil {
				t.Fatalf("refills of %d levels: row %d: %v", n, i, err)
			}
			if null != (want == nil) || !slices.Equal(got, want) {
				t.Fatalf("refills of %d levels: row %d = %v (null %v), want %v", n, i, got, null, want)
			}
		}
		if _, _, err := c.next(); err == nil {
			t.Errorf("refills of %d levels: a row past the column's end read without error", n)
		}
	}
}
