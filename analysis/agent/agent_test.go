package agent

import (
	"math"
	"slices"
	"testing"
)

// TestUnion: overlapping and touching intervals count once, disjoint ones add up.
func TestUnion(t *testing.T) {
	for _, c := range []struct {
		spans [][2]int64
		want  int64
	}{
		{[][2]int64{{0, 10}}, 10},
		{[][2]int64{{0, 10}, {5, 8}, {7, 15}}, 15},
		{[][2]int64{{0, 10}, {10, 20}}, 20},
		{[][2]int64{{0, 10}, {12, 20}, {12, 14}}, 18},
	} {
		if got := union(c.spans); got != c.want {
			t.Errorf("union(%v) = %d, want %d", c.spans, got, c.want)
		}
	}
}

// TestPeak: spans are half-open, so one ending when another starts does not make two;
// the peak's time is when it was first reached; zero-length spans never count.
func TestPeak(t *testing.T) {
	for _, c := range []struct {
		spans [][2]int64
		n     int64
		at    float64
	}{
		{[][2]int64{{0, 1e9}, {1e9, 2e9}}, 1, 0},
		{[][2]int64{{0, 3e9}, {1e9, 2e9}, {2e9, 4e9}, {2e9, 5e9}}, 3, 2},
		{[][2]int64{{5e9, 5e9}}, 0, math.NaN()},
	} {
		n, at := peak(c.spans)
		if n != c.n || !(at == c.at || math.IsNaN(at) && math.IsNaN(c.at)) {
			t.Errorf("peak(%v) = %d at %v, want %d at %v", c.spans, n, at, c.n, c.at)
		}
	}
}

// TestTimeAverage: each interval holds the spans' overlap with it over its length.
func TestTimeAverage(t *testing.T) {
	got := timeAverage([][2]int64{{500, 2500}, {0, 1000}, {3000, 3000}}, 1000, 3)
	if want := []float64{1.5, 1, 0.5}; !slices.Equal(got, want) {
		t.Errorf("timeAverage = %v, want %v", got, want)
	}
}
