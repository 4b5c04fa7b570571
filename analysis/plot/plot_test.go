package plot

import (
	"math"
	"slices"
	"testing"
)

// TestTicks: round ticks covering the range, 1-2-5 on a log axis.
func TestTicks(t *testing.T) {
	if got := niceTicks(0, 10, 5); !slices.Equal(got, []float64{0, 2, 4, 6, 8, 10}) {
		t.Errorf("niceTicks(0, 10) = %v", got)
	}
	if got := logTicks(1, 100); !slices.Equal(got, []float64{1, 2, 5, 10, 20, 50, 100}) {
		t.Errorf("logTicks(1, 100) = %v", got)
	}
	if got := fmtTick(25000); got != "25k" {
		t.Errorf("fmtTick(25000) = %q", got)
	}
}

// TestLineAndRange: a line through finite points only, clipped to the frame; an empty
// range widened so that nothing divides by zero; MaxOf skips NaN and Inf.
func TestLineAndRange(t *testing.T) {
	p := New("id", "title", "x", "y", 0, 0, false, 0, 10, false)
	if p.x.hi != 1 {
		t.Errorf("empty x range not widened: %+v", p.x)
	}
	n := len(p.Elems)
	p.Line([][2]float64{{0, 0}, {0.5, math.NaN()}, {1, 20}}, "s1")
	if len(p.Elems) != n+1 || p.Elems[n].Poly == nil {
		t.Fatalf("no polyline: %+v", p.Elems[n:])
	}
	if got, want := p.Elems[n].Poly.Points, d1(padL)+","+d1(plotH-padB)+" "+d1(plotW-padR)+","+d1(padT); got != want {
		t.Errorf("points %q, want %q (two points, the second clipped to the top)", got, want)
	}
	if m := MaxOf([][2]float64{{0, 3}, {0, math.NaN()}, {0, math.Inf(1)}, {0, 2}}, 1); m != 3 {
		t.Errorf("MaxOf = %v, want 3", m)
	}
}
