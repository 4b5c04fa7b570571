package stats

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
)

// SweepPoint is what one load point of a sweep measured, as the knee search needs it.
// Load is the sweep's axis value (a speedup, a mean request rate, or a concurrency).
type SweepPoint struct {
	Load float64
	// OfferedTokensPerSecond is the output token rate the schedule asked for;
	// SustainedTokensPerSecond is what the endpoint delivered over the steady-state window.
	OfferedTokensPerSecond   float64
	SustainedTokensPerSecond float64
	Overloaded               bool
	ClientLimited            bool
	// Attainment is the share of due requests (0..1) that were ok and met every SLO;
	// NaN when the sweep has no SLO.
	Attainment float64
}

// Tracks reports whether the endpoint kept up at p: sustained throughput is at least
// minRatio of the offered throughput and the run was not overloaded.
func (p SweepPoint) Tracks(minRatio float64) bool {
	if p.Overloaded || p.OfferedTokensPerSecond <= 0 {
		return false
	}
	return p.SustainedTokensPerSecond >= minRatio*p.OfferedTokensPerSecond
}

// MeetsSLO reports whether p's SLO attainment is at least target.
func (p SweepPoint) MeetsSLO(target float64) bool {
	return !math.IsNaN(p.Attainment) && p.Attainment >= target
}

// KneeOptions configure SearchKnee. Zero values take the defaults noted.
type KneeOptions struct {
	Start      float64 // first load probed; > 0
	Max        float64 // highest load ever probed; > Start
	Resolution float64 // stop when (fail-pass)/pass <= Resolution; default 0.05
	MinRatio   float64 // Tracks threshold; default 0.95
	// MinGain is the concurrency axis's saturation threshold: a concurrency is saturated
	// when doubling it adds less than this share of sustained output throughput; default 0.10.
	MinGain    float64
	Attainment float64 // MeetsSLO threshold; default 0.99
	HasSLO     bool    // search for the SLO-limited load too
	MaxPoints  int     // upper bound on probes; default 40
}

// WithDefaults returns o with zero fields set to the defaults noted.
func (o KneeOptions) WithDefaults() KneeOptions {
	if o.Resolution == 0 {
		o.Resolution = 0.05
	}
	if o.MinRatio == 0 {
		o.MinRatio = 0.95
	}
	if o.MinGain == 0 {
		o.MinGain = 0.10
	}
	if o.Attainment == 0 {
		o.Attainment = 0.99
	}
	if o.MaxPoints == 0 {
		o.MaxPoints = 40
	}
	return o
}

// Validate checks the options (defaults applied to zero fields first).
func (o *KneeOptions) Validate() error {
	*o = o.WithDefaults()
	switch {
	case !(o.Start > 0):
		return fmt.Errorf("knee: start load %v must be > 0", o.Start)
	case !(o.Max > o.Start):
		return fmt.Errorf("knee: max load %v must be above the start %v", o.Max, o.Start)
	case !(o.Resolution > 0 && o.Resolution < 1):
		return fmt.Errorf("knee: resolution %v must be in (0, 1)", o.Resolution)
	case !(o.MinRatio > 0 && o.MinRatio <= 1):
		return fmt.Errorf("knee: min ratio %v must be in (0, 1]", o.MinRatio)
	case !(o.MinGain > 0 && o.MinGain < 1):
		return fmt.Errorf("knee: min gain %v must be in (0, 1)", o.MinGain)
	case !(o.Attainment > 0 && o.Attainment <= 1):
		return fmt.Errorf("knee: attainment %v must be in (0, 1]", o.Attainment)
	case o.MaxPoints < 2:
		return fmt.Errorf("knee: max points %d must be >= 2", o.MaxPoints)
	}
	return nil
}

// Bound is the result of one bracket-and-bisect search: the highest load that passed
// (Found false when even the start failed) and the lowest failing load above it
// (Bracketed false when no load up to the search's end failed, so Pass is only a lower bound).
type Bound struct {
	Found, Bracketed bool
	Pass, Fail       float64
	// LimitedBy says why the search stopped where it did: "endpoint" when it bracketed the
	// endpoint's limit to the resolution (or the start already failed); "client" when a probe
	// was client-limited, so the replayer, not the endpoint, was the limit and the endpoint's
	// limit lies above Pass; "max" when every load up to Max passed; "points" when MaxPoints
	// ran out first.
	LimitedBy string
	// NonMonotonic is set when some probe above Fail passed or some probe below Pass failed:
	// noise or a genuinely non-monotonic endpoint; the bound is less certain than it looks.
	NonMonotonic bool
}

// KneeResult is what SearchKnee found.
type KneeResult struct {
	Saturation Bound        // highest load whose throughput tracks the offered load
	SLO        Bound        // highest load meeting the SLOs at the target attainment (when HasSLO)
	Points     []SweepPoint // every probe, in load order
}

// ProbeFunc runs (or fakes) one load point.
type ProbeFunc func(ctx context.Context, load float64) (SweepPoint, error)

var (
	errClientLimited = errors.New("client-limited")
	errOutOfPoints   = errors.New("out of probe points")
)

// SearchKnee finds the saturation load and, with HasSLO, the highest load meeting the SLOs.
//
// Each search brackets, doubling the load from Start until a probe fails or Max is reached,
// then bisects geometrically (mid = sqrt(pass*fail): loads span orders of magnitude and the
// resolution is relative) until (fail-pass)/pass <= Resolution. Probes are cached by load,
// so the SLO search reuses the saturation search's points. A client-limited probe ends the
// search it belongs to with LimitedBy "client". SearchKnee knows nothing of clocks or
// networks beyond probe; a probe error aborts it, returning what was found so far.
func SearchKnee(ctx context.Context, probe ProbeFunc, o KneeOptions) (*KneeResult, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	pr := newProber(ctx, probe, o.MaxPoints)
	get := pr.get
	res := &KneeResult{}
	tracks := func(p SweepPoint) bool { return p.Tracks(o.MinRatio) }
	meets := func(p SweepPoint) bool { return p.MeetsSLO(o.Attainment) }
	var err error
	res.Saturation, err = bisect(o, get, tracks)
	if err == nil && o.HasSLO {
		res.SLO, err = bisect(o, get, meets)
	}
	res.Points = pr.points()
	res.Saturation.NonMonotonic = nonMonotonic(res.Saturation, res.Points, tracks)
	if o.HasSLO {
		res.SLO.NonMonotonic = nonMonotonic(res.SLO, res.Points, meets)
	}
	return res, err
}

// prober runs each load at most once and at most max loads in all.
type prober struct {
	ctx   context.Context
	probe ProbeFunc
	max   int
	seen  map[float64]SweepPoint
}

func newProber(ctx context.Context, probe ProbeFunc, max int) *prober {
	return &prober{ctx: ctx, probe: probe, max: max, seen: map[float64]SweepPoint{}}
}

// get returns the point at load, probing it unless it was probed before. A client-limited
// point comes back with errClientLimited; errOutOfPoints when the budget is spent.
func (pr *prober) get(load float64) (SweepPoint, error) {
	if p, ok := pr.seen[load]; ok {
		if p.ClientLimited {
			return p, errClientLimited
		}
		return p, nil
	}
	if len(pr.seen) >= pr.max {
		return SweepPoint{}, errOutOfPoints
	}
	if err := pr.ctx.Err(); err != nil {
		return SweepPoint{}, err
	}
	p, err := pr.probe(pr.ctx, load)
	if err != nil {
		return p, fmt.Errorf("knee: probe at load %g: %w", load, err)
	}
	p.Load = load
	pr.seen[load] = p
	if p.ClientLimited {
		return p, errClientLimited
	}
	return p, nil
}

// points returns every probe, in load order.
func (pr *prober) points() []SweepPoint {
	var ps []SweepPoint
	for _, p := range pr.seen {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Load < ps[j].Load })
	return ps
}

func bisect(o KneeOptions, get func(float64) (SweepPoint, error), pass func(SweepPoint) bool) (Bound, error) {
	var b Bound
	stop := func(err error) (Bound, error) {
		switch {
		case errors.Is(err, errClientLimited):
			b.LimitedBy = "client"
			return b, nil
		case errors.Is(err, errOutOfPoints):
			b.LimitedBy = "points"
			return b, nil
		}
		return b, err
	}
	for load := o.Start; ; load = math.Min(load*2, o.Max) {
		p, err := get(load)
		if err != nil {
			return stop(err)
		}
		if !pass(p) {
			b.Fail, b.Bracketed = load, true
			break
		}
		b.Pass, b.Found = load, true
		if load >= o.Max {
			b.LimitedBy = "max"
			return b, nil
		}
	}
	for b.Found && (b.Fail-b.Pass)/b.Pass > o.Resolution {
		mid := math.Sqrt(b.Pass * b.Fail)
		p, err := get(mid)
		if err != nil {
			return stop(err)
		}
		if pass(p) {
			b.Pass = mid
		} else {
			b.Fail = mid
		}
	}
	b.LimitedBy = "endpoint"
	return b, nil
}

func nonMonotonic(b Bound, points []SweepPoint, pass func(SweepPoint) bool) bool {
	for _, p := range points {
		if p.ClientLimited {
			continue
		}
		if b.Bracketed && p.Load > b.Fail && pass(p) {
			return true
		}
		if b.Found && p.Load < b.Pass && !pass(p) {
			return true
		}
	}
	return false
}

// BoundsOf finds, among points in load order, the highest load below which every point
// passes and the first failing load above it. Client-limited points are skipped: the
// replayer, not the endpoint, limited them, so they neither pass nor fail it. When the scan
// ends with every trustworthy point passing and client-limited points above them,
// LimitedBy is "client".
func BoundsOf(points []SweepPoint, pass func(SweepPoint) bool) Bound {
	var b Bound
	clientAbove := false
	for _, p := range points {
		if p.ClientLimited {
			clientAbove = true
			continue
		}
		if !pass(p) {
			b.Fail, b.Bracketed, b.LimitedBy = p.Load, true, "endpoint"
			break
		}
		b.Pass, b.Found = p.Load, true
		clientAbove = false
	}
	switch {
	case b.LimitedBy != "":
	case clientAbove:
		b.LimitedBy = "client"
	default:
		b.LimitedBy = "max"
	}
	b.NonMonotonic = nonMonotonic(b, points, pass)
	return b
}

// GainPerDoubling is the throughput gain from concurrency c1 to c2 > c1, normalised to one
// doubling: (t2/t1)^(1/log2(c2/c1)) − 1. From c to 2c it is t2/t1 − 1; from 256 to 1024 it
// is the gain of the average doubling of the two. A step from no throughput to some is an
// infinite gain, from none to none no gain.
func GainPerDoubling(c1, t1, c2, t2 float64) float64 {
	if !(t1 > 0) {
		if t2 > 0 {
			return math.Inf(1)
		}
		return 0
	}
	return math.Pow(t2/t1, 1/math.Log2(c2/c1)) - 1
}

// SaturationOf finds, among points on the concurrency axis in load order, the saturation
// concurrency: the smallest one after which doubling adds less than minGain sustained output
// throughput (GainPerDoubling from it to the next point). Found and Bracketed, Pass is that
// concurrency and Fail the next point, whose throughput shows the missing gain.
// Client-limited points neither pass nor fail: the gain is taken between the trustworthy
// points around them. Not found, LimitedBy says why: "client" when the points above the
// last trustworthy one were client-limited, "max" when throughput still grew at the
// highest point (or there were fewer than two trustworthy points). NonMonotonic is set
// when a later doubling gained minGain or more again.
func SaturationOf(points []SweepPoint, minGain float64) Bound {
	return SaturationBy(points, minGain, func(i, j int) float64 {
		return GainPerDoubling(points[i].Load, points[i].SustainedTokensPerSecond, points[j].Load, points[j].SustainedTokensPerSecond)
	})
}

// SaturationBy is SaturationOf with the gain per doubling from point i to point j given by
// gain: a sweep with an interval on each point's throughput brackets the saturation by
// taking the gains between the intervals' ends.
func SaturationBy(points []SweepPoint, minGain float64, gain func(i, j int) float64) Bound {
	var b Bound
	var prev *SweepPoint
	prevI := -1
	clientAbove := false
	for i := range points {
		p := &points[i]
		if p.ClientLimited {
			clientAbove = true
			continue
		}
		clientAbove = false
		if prev != nil {
			g := gain(prevI, i)
			switch {
			case !b.Found && g < minGain:
				b.Found, b.Bracketed, b.Pass, b.Fail, b.LimitedBy = true, true, prev.Load, p.Load, "endpoint"
			case b.Found && g >= minGain:
				b.NonMonotonic = true
			}
		}
		prev, prevI = p, i
	}
	switch {
	case b.Found:
	case clientAbove:
		b.LimitedBy = "client"
	default:
		b.LimitedBy = "max"
	}
	return b
}

// SearchConcurrency searches the concurrency axis: it doubles the concurrency from Start
// (a whole number) up to Max until SaturationOf finds the saturation concurrency among the
// doublings and, with HasSLO, a concurrency fails the SLO (or Max is reached); then it
// bisects the SLO bound on whole concurrencies (mid = round(sqrt(pass*fail))) until
// (fail-pass)/pass <= Resolution or the two are adjacent. The saturation is not bisected:
// it is defined by doublings. A client-limited probe ends the search, the bounds not yet
// found having LimitedBy "client"; MaxPoints spent, "points". A probe error aborts it,
// returning what was found so far.
func SearchConcurrency(ctx context.Context, probe ProbeFunc, o KneeOptions) (*KneeResult, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Start != math.Trunc(o.Start) || o.Max != math.Trunc(o.Max) {
		return nil, fmt.Errorf("knee: concurrency start %v and max %v must be whole numbers", o.Start, o.Max)
	}
	pr := newProber(ctx, probe, o.MaxPoints)
	meets := func(p SweepPoint) bool { return p.MeetsSLO(o.Attainment) }
	res := &KneeResult{}
	var ladder []SweepPoint
	var err error
	for c := o.Start; ; c = math.Min(2*c, o.Max) {
		p, perr := pr.get(c)
		if perr != nil && !errors.Is(perr, errClientLimited) {
			if !errors.Is(perr, errOutOfPoints) {
				err = perr
				break
			}
			if !res.Saturation.Found {
				res.Saturation.LimitedBy = "points"
			}
			if o.HasSLO && !res.SLO.Bracketed {
				res.SLO.LimitedBy = "points"
			}
			break
		}
		ladder = append(ladder, p)
		res.Saturation = SaturationOf(ladder, o.MinGain)
		if o.HasSLO {
			res.SLO = BoundsOf(ladder, meets)
		}
		if p.ClientLimited || c >= o.Max || (res.Saturation.Found && (!o.HasSLO || res.SLO.Bracketed)) {
			break
		}
	}
	if b := &res.SLO; err == nil && o.HasSLO && b.Found && b.Bracketed && b.LimitedBy == "endpoint" {
		for (b.Fail-b.Pass)/b.Pass > o.Resolution && b.Fail-b.Pass > 1 {
			mid := math.Min(math.Max(math.Round(math.Sqrt(b.Pass*b.Fail)), b.Pass+1), b.Fail-1)
			p, perr := pr.get(mid)
			if errors.Is(perr, errClientLimited) {
				b.LimitedBy = "client"
				break
			}
			if errors.Is(perr, errOutOfPoints) {
				b.LimitedBy = "points"
				break
			}
			if perr != nil {
				err = perr
				break
			}
			if meets(p) {
				b.Pass = mid
			} else {
				b.Fail = mid
			}
		}
	}
	res.Points = pr.points()
	if o.HasSLO {
		res.SLO.NonMonotonic = nonMonotonic(res.SLO, res.Points, meets)
	}
	return res, err
}
