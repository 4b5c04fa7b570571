package stats

import (
	"context"
	"errors"
	"math"
	"testing"
)

// fakeEndpoint is a pure model of an endpoint with a hard capacity: every request's output
// tokens are offered at load*perLoad tok/s; it delivers min(offered, capacity) and is
// overloaded above capacity. SLO attainment is 1 up to sloLoad and falls linearly after.
type fakeEndpoint struct {
	perLoad, capacity, sloLoad float64
	clientLimitAbove           float64 // 0: never
	probes                     []float64
}

func (f *fakeEndpoint) probe(_ context.Context, load float64) (SweepPoint, error) {
	f.probes = append(f.probes, load)
	offered := load * f.perLoad
	p := SweepPoint{
		OfferedTokensPerSecond:   offered,
		SustainedTokensPerSecond: math.Min(offered, f.capacity),
		Overloaded:               offered > f.capacity,
		Attainment:               1,
		ClientLimited:            f.clientLimitAbove > 0 && load > f.clientLimitAbove,
	}
	if load > f.sloLoad {
		p.Attainment = math.Max(0, 1-(load-f.sloLoad)/f.sloLoad)
	}
	return p, nil
}

func checkBracket(t *testing.T, name string, b Bound, truth, resolution float64) {
	t.Helper()
	if !b.Found || !b.Bracketed || b.LimitedBy != "endpoint" {
		t.Fatalf("%s: bound %+v, want found and bracketed by the endpoint", name, b)
	}
	if !(b.Pass <= truth && truth < b.Fail) {
		t.Errorf("%s: [%g, %g) does not contain the true limit %g", name, b.Pass, b.Fail, truth)
	}
	if (b.Fail-b.Pass)/b.Pass > resolution {
		t.Errorf("%s: [%g, %g) is wider than the resolution %g", name, b.Pass, b.Fail, resolution)
	}
}

func TestSearchKneeFindsCapacityAndSLO(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		perLoad, capacity, sloLoad float64
		start, max, res            float64
	}{
		{"speedup axis", 350, 4000, 6.5, 1, 64, 0.05},
		{"rate axis, fine resolution", 12.5, 4000, 100, 0.5, 4096, 0.01},
		{"knee right above start", 100, 105, 1.02, 1, 10, 0.05},
	} {
		f := &fakeEndpoint{perLoad: tc.perLoad, capacity: tc.capacity, sloLoad: tc.sloLoad}
		res, err := SearchKnee(context.Background(), f.probe, KneeOptions{
			Start: tc.start, Max: tc.max, Resolution: tc.res, HasSLO: true, MinRatio: 1, Attainment: 0.99,
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		checkBracket(t, tc.name+" saturation", res.Saturation, tc.capacity/tc.perLoad, tc.res)
		// Attainment falls below 0.99 just above sloLoad*1.01.
		checkBracket(t, tc.name+" SLO", res.SLO, tc.sloLoad*1.01, tc.res)
		// Probes are cached: no load probed twice, and they are all reported in order.
		seen := map[float64]bool{}
		for _, l := range f.probes {
			if seen[l] {
				t.Errorf("%s: load %g probed twice", tc.name, l)
			}
			seen[l] = true
		}
		if len(res.Points) != len(f.probes) {
			t.Errorf("%s: %d points reported, %d probed", tc.name, len(res.Points), len(f.probes))
		}
		for i := 1; i < len(res.Points); i++ {
			if res.Points[i-1].Load >= res.Points[i].Load {
				t.Errorf("%s: points not in load order", tc.name)
			}
		}
		if res.Saturation.NonMonotonic || res.SLO.NonMonotonic {
			t.Errorf("%s: monotonic endpoint flagged non-monotonic", tc.name)
		}
	}
}

func TestSearchKneeMinRatio(t *testing.T) {
	// With the default 95% tracking ratio the overloaded flag decides, not the ratio: the
	// fake delivers everything it is offered up to capacity.
	f := &fakeEndpoint{perLoad: 10, capacity: 1000, sloLoad: 1e9}
	res, err := SearchKnee(context.Background(), f.probe, KneeOptions{Start: 1, Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	checkBracket(t, "saturation", res.Saturation, 100, 0.05)
	if res.SLO != (Bound{}) {
		t.Errorf("SLO searched without HasSLO: %+v", res.SLO)
	}
}

func TestSearchKneeEdges(t *testing.T) {
	ctx := context.Background()
	t.Run("start already fails", func(t *testing.T) {
		f := &fakeEndpoint{perLoad: 100, capacity: 50, sloLoad: 1e9}
		res, err := SearchKnee(ctx, f.probe, KneeOptions{Start: 1, Max: 8})
		if err != nil {
			t.Fatal(err)
		}
		if b := res.Saturation; b.Found || !b.Bracketed || b.Fail != 1 || len(f.probes) != 1 {
			t.Errorf("bound %+v after %v, want not found, failing at the start", b, f.probes)
		}
	})
	t.Run("everything passes up to max", func(t *testing.T) {
		f := &fakeEndpoint{perLoad: 1, capacity: 1e9, sloLoad: 1e9}
		res, err := SearchKnee(ctx, f.probe, KneeOptions{Start: 1, Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		if b := res.Saturation; !b.Found || b.Bracketed || b.Pass != 10 || b.LimitedBy != "max" {
			t.Errorf("bound %+v, want a lower bound of 10 limited by max", b)
		}
		want := []float64{1, 2, 4, 8, 10}
		if len(f.probes) != len(want) {
			t.Fatalf("probes %v, want %v", f.probes, want)
		}
		for i := range want {
			if f.probes[i] != want[i] {
				t.Fatalf("probes %v, want %v", f.probes, want)
			}
		}
	})
	t.Run("client-limited is never the endpoint's limit", func(t *testing.T) {
		f := &fakeEndpoint{perLoad: 100, capacity: 4000, sloLoad: 1e9, clientLimitAbove: 5}
		res, err := SearchKnee(ctx, f.probe, KneeOptions{Start: 1, Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		b := res.Saturation
		if b.LimitedBy != "client" || b.Bracketed || b.Pass != 4 {
			t.Errorf("bound %+v, want limited by the client above a pass at 4", b)
		}
	})
	t.Run("out of points", func(t *testing.T) {
		f := &fakeEndpoint{perLoad: 1, capacity: 37, sloLoad: 1e9}
		res, err := SearchKnee(ctx, f.probe, KneeOptions{Start: 1, Max: 1000, MaxPoints: 7, Resolution: 0.001})
		if err != nil {
			t.Fatal(err)
		}
		if res.Saturation.LimitedBy != "points" || len(f.probes) != 7 {
			t.Errorf("bound %+v after %d probes, want limited by points after 7", res.Saturation, len(f.probes))
		}
		if !(res.Saturation.Pass <= 37 && 37 < res.Saturation.Fail) {
			t.Errorf("partial bound [%g, %g) lost the limit 37", res.Saturation.Pass, res.Saturation.Fail)
		}
	})
	t.Run("non-monotonic endpoint is flagged", func(t *testing.T) {
		// Fails at 2 only (a noisy point); passes at 1 and at 4 and above up to 6.
		probe := func(_ context.Context, load float64) (SweepPoint, error) {
			ok := load < 1.5 || (load >= 3.5 && load <= 6)
			p := SweepPoint{OfferedTokensPerSecond: 1, SustainedTokensPerSecond: 1, Attainment: 1}
			if !ok {
				p.Overloaded = true
			}
			if load >= 3.5 {
				p.Attainment = 0
			}
			return p, nil
		}
		res, err := SearchKnee(ctx, probe, KneeOptions{Start: 1, Max: 8, HasSLO: true})
		if err != nil {
			t.Fatal(err)
		}
		// The SLO search probes 4, which tracks, above the saturation search's fail at 2.
		if !res.Saturation.NonMonotonic {
			t.Errorf("saturation %+v over %+v not flagged non-monotonic", res.Saturation, res.Points)
		}
	})
	t.Run("probe error aborts with context", func(t *testing.T) {
		boom := errors.New("endpoint unreachable")
		probe := func(_ context.Context, load float64) (SweepPoint, error) {
			if load > 3 {
				return SweepPoint{}, boom
			}
			return SweepPoint{OfferedTokensPerSecond: 1, SustainedTokensPerSecond: 1}, nil
		}
		res, err := SearchKnee(ctx, probe, KneeOptions{Start: 1, Max: 8})
		if !errors.Is(err, boom) || res == nil || len(res.Points) != 2 {
			t.Errorf("got %v with %+v, want the probe error and the 2 points before it", err, res)
		}
	})
	t.Run("invalid options", func(t *testing.T) {
		for _, o := range []KneeOptions{
			{Start: 0, Max: 1}, {Start: 2, Max: 1}, {Start: 1, Max: 2, Resolution: 1},
			{Start: 1, Max: 2, MinRatio: 1.5}, {Start: 1, Max: 2, Attainment: -1}, {Start: 1, Max: 2, MaxPoints: 1},
		} {
			if _, err := SearchKnee(ctx, nil, o); err == nil {
				t.Errorf("options %+v accepted", o)
			}
		}
	})
}

func TestBoundsOfSkipsClientLimitedPoints(t *testing.T) {
	tracks := func(p SweepPoint) bool { return p.Tracks(0.95) }
	pt := func(load, offered, sustained float64, client bool) SweepPoint {
		return SweepPoint{Load: load, OfferedTokensPerSecond: offered, SustainedTokensPerSecond: sustained, ClientLimited: client}
	}
	// A client-limited point in the middle says nothing of the endpoint: the scan goes on.
	b := BoundsOf([]SweepPoint{pt(5, 500, 500, false), pt(10, 1000, 800, true), pt(20, 2000, 2000, false), pt(30, 3000, 2000, false)}, tracks)
	if !b.Found || !b.Bracketed || b.Pass != 20 || b.Fail != 30 || b.LimitedBy != "endpoint" {
		t.Errorf("bound %+v, want [20, 30) by the endpoint", b)
	}
	// Every trustworthy point passes and the ones above are client-limited.
	b = BoundsOf([]SweepPoint{pt(5, 500, 500, false), pt(10, 1000, 700, true)}, tracks)
	if !b.Found || b.Bracketed || b.Pass != 5 || b.LimitedBy != "client" {
		t.Errorf("bound %+v, want at least 5, limited by the client", b)
	}
	// Everything passes.
	b = BoundsOf([]SweepPoint{pt(5, 500, 500, false), pt(10, 1000, 1000, false)}, tracks)
	if b.Pass != 10 || b.LimitedBy != "max" {
		t.Errorf("bound %+v, want at least 10, limited by the list", b)
	}
}
