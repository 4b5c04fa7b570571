package stats

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
)

// closedFake is a pure model of a continuous-batching engine under a closed loop of c
// users: min(c, batchCap) sequences decode together in steps of base + b*perSeq seconds,
// one token each, so it delivers b/step tok/s and stops growing at the batch cap. Its SLO
// holds up to sloMax users; probes above clientAbove (0: never) are client-limited.
type closedFake struct {
	base, perSeq     float64
	batchCap, sloMax float64
	clientAbove      float64
	failAt           float64 // a probe at this load returns an error (0: never)
	probes           []float64
}

func (f *closedFake) tput(c float64) float64 {
	b := math.Min(c, f.batchCap)
	return b / (f.base + b*f.perSeq)
}

func (f *closedFake) probe(_ context.Context, c float64) (SweepPoint, error) {
	f.probes = append(f.probes, c)
	if f.failAt > 0 && c == f.failAt {
		return SweepPoint{}, errors.New("endpoint unreachable")
	}
	p := SweepPoint{SustainedTokensPerSecond: f.tput(c), Attainment: 1, ClientLimited: f.clientAbove > 0 && c > f.clientAbove}
	if c > f.sloMax {
		p.Attainment = 0.5
	}
	return p, nil
}

func TestGainPerDoubling(t *testing.T) {
	for _, tc := range []struct{ c1, t1, c2, t2, want float64 }{
		{1, 100, 2, 150, 0.5},
		{16, 1000, 32, 1000, 0},
		{256, 1000, 1024, 1210, 0.1}, // two doublings of 10% each
		{1, 100, 8, 800, 1},          // linear scaling: 100% per doubling
		{1, 0, 2, 5, math.Inf(1)},
		{1, 0, 2, 0, 0},
	} {
		if got := GainPerDoubling(tc.c1, tc.t1, tc.c2, tc.t2); math.Abs(got-tc.want) > 1e-12 && got != tc.want {
			t.Errorf("GainPerDoubling(%g, %g, %g, %g) = %g, want %g", tc.c1, tc.t1, tc.c2, tc.t2, got, tc.want)
		}
	}
}

func TestSaturationOf(t *testing.T) {
	pt := func(c, tput float64) SweepPoint { return SweepPoint{Load: c, SustainedTokensPerSecond: tput} }
	cl := func(p SweepPoint) SweepPoint { p.ClientLimited = true; return p }
	for _, tc := range []struct {
		name   string
		points []SweepPoint
		want   Bound
	}{
		{"doublings, saturating at 16", []SweepPoint{pt(1, 90), pt(2, 165), pt(4, 285), pt(8, 440), pt(16, 615), pt(32, 616), pt(64, 617)},
			Bound{Found: true, Bracketed: true, Pass: 16, Fail: 32, LimitedBy: "endpoint"}},
		// 16 -> 64 adds 15% in all, 7.2% per doubling: saturated at 16, though the raw gain is above 10%.
		{"non-doubling steps are normalised", []SweepPoint{pt(1, 100), pt(4, 380), pt(16, 1000), pt(64, 1150)},
			Bound{Found: true, Bracketed: true, Pass: 16, Fail: 64, LimitedBy: "endpoint"}},
		// 4 is client-limited: the gain is taken from 2 to 8, 92% per doubling.
		{"client-limited point skipped", []SweepPoint{pt(1, 100), pt(2, 190), cl(pt(4, 20)), pt(8, 700), pt(16, 720)},
			Bound{Found: true, Bracketed: true, Pass: 8, Fail: 16, LimitedBy: "endpoint"}},
		{"client-limited above the growth", []SweepPoint{pt(1, 100), pt(2, 190), cl(pt(4, 200))},
			Bound{LimitedBy: "client"}},
		{"still growing at the highest point", []SweepPoint{pt(1, 100), pt(2, 190), pt(4, 360)},
			Bound{LimitedBy: "max"}},
		{"one point says nothing", []SweepPoint{pt(1, 100)}, Bound{LimitedBy: "max"}},
		{"saturated from the first point", []SweepPoint{pt(4, 500), pt(8, 520)},
			Bound{Found: true, Bracketed: true, Pass: 4, Fail: 8, LimitedBy: "endpoint"}},
		{"growth after the plateau is flagged", []SweepPoint{pt(1, 100), pt(2, 105), pt(4, 300)},
			Bound{Found: true, Bracketed: true, Pass: 1, Fail: 2, LimitedBy: "endpoint", NonMonotonic: true}},
	} {
		if got := SaturationOf(tc.points, 0.10); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestSearchConcurrency(t *testing.T) {
	ctx := context.Background()
	engine := func() *closedFake { return &closedFake{base: 0.010, perSeq: 0.001, batchCap: 16, sloMax: 1e9} }
	t.Run("saturation at the batch cap, no SLO", func(t *testing.T) {
		f := engine()
		res, err := SearchConcurrency(ctx, f.probe, KneeOptions{Start: 1, Max: 1024})
		if err != nil {
			t.Fatal(err)
		}
		if want := (Bound{Found: true, Bracketed: true, Pass: 16, Fail: 32, LimitedBy: "endpoint"}); res.Saturation != want {
			t.Errorf("saturation %+v, want %+v", res.Saturation, want)
		}
		if want := []float64{1, 2, 4, 8, 16, 32}; !slices.Equal(f.probes, want) {
			t.Errorf("probes %v, want the doublings %v and no more", f.probes, want)
		}
		if res.SLO != (Bound{}) || len(res.Points) != 6 {
			t.Errorf("SLO %+v searched without HasSLO, or %d points", res.SLO, len(res.Points))
		}
	})
	t.Run("SLO below saturation, bisected on whole numbers", func(t *testing.T) {
		f := engine()
		f.sloMax = 11
		res, err := SearchConcurrency(ctx, f.probe, KneeOptions{Start: 1, Max: 1024, HasSLO: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Saturation.Pass != 16 || !res.Saturation.Found {
			t.Errorf("saturation %+v, want 16", res.Saturation)
		}
		if want := (Bound{Found: true, Bracketed: true, Pass: 11, Fail: 12, LimitedBy: "endpoint"}); res.SLO != want {
			t.Errorf("SLO %+v, want %+v", res.SLO, want)
		}
		// Doublings to 32 (saturation needs it), then round(sqrt(8*16)) = 11, sqrt(11*16) -> 13, sqrt(11*13) -> 12.
		if want := []float64{1, 2, 4, 8, 16, 32, 11, 13, 12}; !slices.Equal(f.probes, want) {
			t.Errorf("probes %v, want %v", f.probes, want)
		}
	})
	t.Run("SLO above saturation: the doubling goes on, bisection to the resolution", func(t *testing.T) {
		f := engine()
		f.sloMax = 100
		res, err := SearchConcurrency(ctx, f.probe, KneeOptions{Start: 1, Max: 1024, HasSLO: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Saturation.Pass != 16 {
			t.Errorf("saturation %+v, want 16", res.Saturation)
		}
		checkBracket(t, "SLO", res.SLO, 100.5, 0.05)
		for _, c := range f.probes {
			if c != math.Trunc(c) {
				t.Errorf("probed a fractional concurrency %g", c)
			}
		}
		if f.probes[7] != 128 || slices.Contains(f.probes, 256) {
			t.Errorf("probes %v: want doublings up to the first SLO failure (128), no further", f.probes)
		}
	})
	t.Run("never saturates up to a max that is no doubling", func(t *testing.T) {
		f := engine()
		f.batchCap, f.perSeq = 1e9, 0
		res, err := SearchConcurrency(ctx, f.probe, KneeOptions{Start: 1, Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		if want := (Bound{LimitedBy: "max"}); res.Saturation != want {
			t.Errorf("saturation %+v, want %+v", res.Saturation, want)
		}
		if want := []float64{1, 2, 4, 8, 16, 32, 64, 100}; !slices.Equal(f.probes, want) {
			t.Errorf("probes %v, want %v", f.probes, want)
		}
	})
	t.Run("a client-limited probe ends the search", func(t *testing.T) {
		f := engine()
		f.clientAbove = 4
		res, err := SearchConcurrency(ctx, f.probe, KneeOptions{Start: 1, Max: 1024, HasSLO: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Saturation.Found || res.Saturation.LimitedBy != "client" {
			t.Errorf("saturation %+v, want not found, limited by the client", res.Saturation)
		}
		if b := res.SLO; !b.Found || b.Bracketed || b.Pass != 4 || b.LimitedBy != "client" {
			t.Errorf("SLO %+v, want at least 4, limited by the client", b)
		}
		if want := []float64{1, 2, 4, 8}; !slices.Equal(f.probes, want) {
			t.Errorf("probes %v, want %v", f.probes, want)
		}
	})
	t.Run("client-limited during the bisection", func(t *testing.T) {
		f := engine()
		f.sloMax = 11
		res, err := SearchConcurrency(ctx, func(ctx context.Context, c float64) (SweepPoint, error) {
			p, err := f.probe(ctx, c)
			p.ClientLimited = c == 11
			return p, err
		}, KneeOptions{Start: 1, Max: 1024, HasSLO: true})
		if err != nil {
			t.Fatal(err)
		}
		if b := res.SLO; b.Pass != 8 || b.Fail != 16 || b.LimitedBy != "client" {
			t.Errorf("SLO %+v, want [8, 16) limited by the client", b)
		}
	})
	t.Run("start already saturated", func(t *testing.T) {
		f := engine()
		res, err := SearchConcurrency(ctx, f.probe, KneeOptions{Start: 16, Max: 1024})
		if err != nil {
			t.Fatal(err)
		}
		if res.Saturation.Pass != 16 || !slices.Equal(f.probes, []float64{16, 32}) {
			t.Errorf("saturation %+v after %v, want 16 after 16, 32", res.Saturation, f.probes)
		}
	})
	t.Run("out of points", func(t *testing.T) {
		f := engine()
		res, err := SearchConcurrency(ctx, f.probe, KneeOptions{Start: 1, Max: 1024, MaxPoints: 4, HasSLO: true})
		if err != nil {
			t.Fatal(err)
		}
		if res.Saturation.LimitedBy != "points" || res.SLO.LimitedBy != "points" || len(f.probes) != 4 {
			t.Errorf("saturation %+v, SLO %+v after %v, want both limited by points after 4", res.Saturation, res.SLO, f.probes)
		}
	})
	t.Run("probe error aborts", func(t *testing.T) {
		f := engine()
		f.failAt = 8
		res, err := SearchConcurrency(ctx, f.probe, KneeOptions{Start: 1, Max: 1024})
		if err == nil || res == nil || len(res.Points) != 3 {
			t.Errorf("got %v with %+v, want the probe error and the 3 points before it", err, res)
		}
	})
	t.Run("invalid options", func(t *testing.T) {
		for _, o := range []KneeOptions{{Start: 1.5, Max: 8}, {Start: 1, Max: 8.5}, {Start: 1, Max: 8, MinGain: 1}, {Start: 1, Max: 8, MinGain: -0.1}} {
			if _, err := SearchConcurrency(ctx, nil, o); err == nil {
				t.Errorf("options %+v accepted", o)
			}
		}
	})
}
