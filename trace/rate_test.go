package trace

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"
)

func TestMeanRate(t *testing.T) {
	for _, c := range []struct {
		n    int64
		span time.Duration
		want float64
		ok   bool
	}{
		{0, time.Second, 0, false},
		{1, time.Second, 0, false},
		{5, 0, 0, false},
		{2, time.Second, 1, true},         // one gap of 1 s
		{11, 20 * time.Second, 0.5, true}, // ten gaps of 2 s
		{101, 10 * time.Second, 10, true}, // 100 gaps of 0.1 s, not 10.1 req/s
		{3, 1500 * time.Millisecond, 4.0 / 3, true},
	} {
		got, ok := MeanRate(c.n, c.span)
		if ok != c.ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("MeanRate(%d, %v) = %v, %v; want %v, %v", c.n, c.span, got, ok, c.want, c.ok)
		}
	}
}

func TestSpeedupForRate(t *testing.T) {
	for _, c := range []struct {
		n    int64
		span time.Duration
		rate float64
		want float64
	}{
		{11, 20 * time.Second, 5, 10}, // 0.5 req/s to 5
		{101, 10 * time.Second, 5, 0.5},
		{2, time.Second, 1, 1},
	} {
		got, err := SpeedupForRate(c.n, c.span, c.rate)
		if err != nil || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("SpeedupForRate(%d, %v, %v) = %v, %v; want %v", c.n, c.span, c.rate, got, err, c.want)
		}
		// Rescaled by it, the trace has MeanRate rate: its span is span/speedup.
		if r, _ := MeanRate(c.n, time.Duration(float64(c.span)/got)); math.Abs(r/c.rate-1) > 1e-9 {
			t.Errorf("n=%d span=%v: rescaled to rate %v, MeanRate is %v", c.n, c.span, c.rate, r)
		}
	}
	for _, bad := range []struct {
		n    int64
		span time.Duration
		rate float64
	}{{1, time.Second, 1}, {5, 0, 1}, {5, time.Second, 0}, {5, time.Second, -1}, {5, time.Second, math.Inf(1)}, {5, time.Second, math.NaN()}} {
		if _, err := SpeedupForRate(bad.n, bad.span, bad.rate); err == nil {
			t.Errorf("SpeedupForRate(%v) accepted", bad)
		}
	}
}

// TestSliceRateIsInfoRate: `trace slice --rate R` writes a trace whose `trace info` mean
// rate is R (one definition), and whose mean inter-arrival gap is 1/R.
func TestSliceRateIsInfoRate(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.parquet"), filepath.Join(dir, "out.parquet")
	var reqs []Request
	var a time.Duration
	for i := range 200 {
		a += time.Duration(1+(i*7919)%13) * 37 * time.Millisecond // irregular gaps
		reqs = append(reqs, Request{ID: int64(i), Arrival: a, PromptTokens: 1, OutputTokens: 1})
	}
	writeFile(t, in, Meta{Source: "synth"}, reqs)
	const rate = 7.0
	if _, err := SliceFile(context.Background(), in, out, SliceSpec{Rate: rate}); err != nil {
		t.Fatal(err)
	}
	info := infoOf(t, out)
	if math.Abs(info.MeanRatePerSecond/rate-1) > 1e-6 {
		t.Errorf("trace info mean rate %v after slice --rate %v", info.MeanRatePerSecond, rate)
	}
	if gap := info.Span.Seconds() / float64(info.Count-1); math.Abs(gap*rate-1) > 1e-6 {
		t.Errorf("mean gap %v s, want 1/%v", gap, rate)
	}
}
