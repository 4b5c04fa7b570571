package trace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// Arrival processes.
const (
	ArrivalPoisson  = "poisson"
	ArrivalGamma    = "gamma"
	ArrivalConstant = "constant"
)

// ArrivalSpec describes an arrival process. Arrivals are made in "operational time" as a
// renewal process of mean gap 1 (constant: gaps of exactly 1; poisson: Exp(1) gaps;
// gamma: Gamma(k = 1/CV², θ = CV²) gaps, mean 1 and coefficient of variation CV), then
// mapped to real time through the inverse of the cumulative rate Λ(t) = ∫₀ᵗ rate. For a
// constant rate R, t = s/R. For a linear ramp from Rate to RateEnd over Ramp,
// rate(t) = R₀ + k·t with k = (R₁-R₀)/Ramp, so Λ(t) = R₀t + kt²/2 and
// t = 2s / (R₀ + √(R₀² + 2ks)); after Ramp the rate stays at RateEnd. This keeps the
// process's shape (CV) at every rate. The first request arrives at 0.
type ArrivalSpec struct {
	Process string        `json:"process"`
	Rate    float64       `json:"rate"`               // requests per second (at the start of a ramp)
	RateEnd float64       `json:"rate_end,omitempty"` // end of a linear ramp; 0 = no ramp
	Ramp    time.Duration `json:"ramp_ns,omitempty"`  // the ramp's length
	CV      float64       `json:"cv,omitempty"`       // gamma only
	Seed    uint64        `json:"seed"`
}

// Validate checks the spec.
func (a ArrivalSpec) Validate() error {
	switch a.Process {
	case ArrivalPoisson, ArrivalConstant:
	case ArrivalGamma:
		if !(a.CV > 0) || math.IsInf(a.CV, 0) {
			return fmt.Errorf("cv: %v, gamma arrivals need a coefficient of variation > 0", a.CV)
		}
	default:
		return fmt.Errorf("arrival process %q: want poisson, gamma or constant", a.Process)
	}
	if a.RateEnd == 0 {
		if !(a.Rate > 0) || math.IsInf(a.Rate, 0) {
			return fmt.Errorf("rate: %v, must be > 0", a.Rate)
		}
		return nil
	}
	if a.Rate < 0 || a.RateEnd < 0 || math.IsInf(a.Rate, 0) || math.IsInf(a.RateEnd, 0) {
		return fmt.Errorf("rate: %v:%v, ramp rates must be >= 0", a.Rate, a.RateEnd)
	}
	if a.Ramp <= 0 {
		return errors.New("rate ramp: needs a duration to ramp over")
	}
	return nil
}

// ParseRate parses --rate: "R" or a linear ramp "R0:R1".
func ParseRate(s string) (start, end float64, err error) {
	a, b, ramp := strings.Cut(s, ":")
	if start, err = strconv.ParseFloat(a, 64); err != nil {
		return 0, 0, fmt.Errorf("rate %q: want R or R0:R1 (requests per second)", s)
	}
	if ramp {
		if end, err = strconv.ParseFloat(b, 64); err != nil {
			return 0, 0, fmt.Errorf("rate %q: want R or R0:R1 (requests per second)", s)
		}
		if end == 0 && start == 0 {
			return 0, 0, fmt.Errorf("rate %q: both ends are 0", s)
		}
		if end == 0 {
			end = math.SmallestNonzeroFloat64 // ramp down to (almost) nothing
		}
	}
	return start, end, nil
}

type arrivalGen struct {
	spec ArrivalSpec
	rng  *rand.Rand
	s    float64 // operational time of the next arrival
	n    int64
	k    float64 // ramp slope, per second²
	lamD float64 // Λ(Ramp)
}

func newArrivalGen(spec ArrivalSpec) *arrivalGen {
	g := &arrivalGen{spec: spec, rng: rand.New(rand.NewPCG(spec.Seed, 1))}
	if spec.RateEnd != 0 {
		d := spec.Ramp.Seconds()
		g.k = (spec.RateEnd - spec.Rate) / d
		g.lamD = spec.Rate*d + g.k*d*d/2
	}
	return g
}

// gap draws the next operational-time gap, of mean 1.
func (g *arrivalGen) gap() float64 {
	switch g.spec.Process {
	case ArrivalConstant:
		return 1
	case ArrivalGamma:
		k := 1 / (g.spec.CV * g.spec.CV)
		return gammaRand(g.rng, k) / k
	}
	return g.rng.ExpFloat64()
}

// next returns the next arrival in nanoseconds (math.MaxInt64 when a ramp to zero ends).
func (g *arrivalGen) next() int64 {
	s := g.s
	g.s += g.gap()
	g.n++
	var t float64
	switch {
	case g.spec.RateEnd == 0:
		t = s / g.spec.Rate
	case s <= g.lamD:
		den := g.spec.Rate + math.Sqrt(math.Max(0, g.spec.Rate*g.spec.Rate+2*g.k*s))
		if den == 0 {
			t = 0
		} else {
			t = 2 * s / den
		}
	default:
		t = g.spec.Ramp.Seconds() + (s-g.lamD)/g.spec.RateEnd
	}
	ns := t * 1e9
	if ns >= math.MaxInt64/2 || math.IsNaN(ns) {
		return math.MaxInt64
	}
	return int64(math.Round(ns))
}

// gammaRand draws Gamma(k, 1) by Marsaglia and Tsang (2000); for k < 1 it draws
// Gamma(k+1) and scales by U^(1/k).
func gammaRand(r *rand.Rand, k float64) float64 {
	if k < 1 {
		u := r.Float64()
		for u == 0 {
			u = r.Float64()
		}
		return gammaRand(r, k+1) * math.Pow(u, 1/k)
	}
	d := k - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if u < 1-0.0331*x*x*x*x || math.Log(u) < 0.5*x*x+d*(1-v+math.Log(v)) {
			return d * v
		}
	}
}

// Dist is a length distribution in the DIST syntax of docs/trace-format.md (`trace synth`):
//
//	fixed:N           always N
//	uniform:A,B       integers A..B inclusive, equally likely
//	normal:MEAN,SD    round(N(MEAN, SD²))
//	lognormal:MEAN,SD round(X), X lognormal whose own mean and SD are MEAN and SD:
//	                  σ² = ln(1 + SD²/MEAN²), μ = ln MEAN − σ²/2
//	zipf:S,MAX        P(k) ∝ k^−S for k in 1..MAX (S > 1)
//	empirical:FILE    a uniformly drawn row's value of the same column (prompt_tokens or
//	                  output_tokens) of trace FILE: the source's marginal distribution
//
// Samples are clamped to the generator's [min, max] afterwards.
type Dist struct {
	Kind string  `json:"kind"`
	A    float64 `json:"a,omitempty"`
	B    float64 `json:"b,omitempty"`
	Path string  `json:"path,omitempty"`

	text   string
	values []int32 // empirical, once loaded
}

// String returns the DIST text it was parsed from.
func (d Dist) String() string { return d.text }

// ParseDist parses a DIST. It does not read an empirical file (see Synth).
func ParseDist(s string) (Dist, error) {
	kind, args, ok := strings.Cut(strings.TrimSpace(s), ":")
	d := Dist{Kind: kind, text: strings.TrimSpace(s)}
	if !ok || args == "" {
		return d, fmt.Errorf("dist %q: want KIND:ARGS, e.g. fixed:512, uniform:1,4096, lognormal:1000,600, zipf:1.2,8192, empirical:trace.parquet", s)
	}
	if kind == "empirical" {
		d.Path = args
		return d, nil
	}
	parts := strings.Split(args, ",")
	vals := make([]float64, len(parts))
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return d, fmt.Errorf("dist %q: %q is not a number", s, p)
		}
		vals[i] = v
	}
	want := 2
	if kind == "fixed" {
		want = 1
	}
	switch kind {
	case "fixed", "uniform", "normal", "lognormal", "zipf":
	default:
		return d, fmt.Errorf("dist %q: unknown kind %q (want fixed, uniform, normal, lognormal, zipf or empirical)", s, kind)
	}
	if len(vals) != want {
		return d, fmt.Errorf("dist %q: %s takes %d number(s)", s, kind, want)
	}
	d.A = vals[0]
	if want == 2 {
		d.B = vals[1]
	}
	switch kind {
	case "fixed":
		if d.A < 1 || d.A != math.Trunc(d.A) || d.A > math.MaxInt32 {
			return d, fmt.Errorf("dist %q: N must be an integer >= 1", s)
		}
	case "uniform":
		if d.A < 0 || d.B < d.A || d.A != math.Trunc(d.A) || d.B != math.Trunc(d.B) || d.B > math.MaxInt32 {
			return d, fmt.Errorf("dist %q: want integers 0 <= A <= B", s)
		}
	case "normal":
		if d.B < 0 {
			return d, fmt.Errorf("dist %q: SD must be >= 0", s)
		}
	case "lognormal":
		if d.A <= 0 || d.B < 0 {
			return d, fmt.Errorf("dist %q: want MEAN > 0 and SD >= 0", s)
		}
	case "zipf":
		if d.A <= 1 || d.B < 1 || d.B != math.Trunc(d.B) || d.B > math.MaxInt32 {
			return d, fmt.Errorf("dist %q: want S > 1 and an integer MAX >= 1", s)
		}
	}
	return d, nil
}

// load reads an empirical distribution's values from column col of its trace.
func (d *Dist) load(col string) error {
	if d.Kind != "empirical" || d.values != nil {
		return nil
	}
	r, err := Open(d.Path)
	if err != nil {
		return err
	}
	defer r.Close()
	d.values = make([]int32, 0, r.NumRows())
	for r.Next() {
		q := r.Request()
		if col == ColOutputTokens {
			d.values = append(d.values, q.OutputTokens)
		} else {
			d.values = append(d.values, q.PromptTokens)
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	if len(d.values) == 0 {
		return fmt.Errorf("dist empirical:%s: the trace has no rows", d.Path)
	}
	return nil
}

// sampler draws from d with r.
type sampler struct {
	d    *Dist
	r    *rand.Rand
	zipf *rand.Zipf
	mu   float64
	sg   float64
}

func newSampler(d *Dist, r *rand.Rand) *sampler {
	s := &sampler{d: d, r: r}
	switch d.Kind {
	case "zipf":
		s.zipf = rand.NewZipf(r, d.A, 1, uint64(d.B)-1)
	case "lognormal":
		s2 := math.Log(1 + d.B*d.B/(d.A*d.A))
		s.mu, s.sg = math.Log(d.A)-s2/2, math.Sqrt(s2)
	}
	return s
}

func (s *sampler) draw() int64 {
	d := s.d
	var v float64
	switch d.Kind {
	case "fixed":
		return int64(d.A)
	case "uniform":
		return int64(d.A) + s.r.Int64N(int64(d.B-d.A)+1)
	case "normal":
		v = d.A + d.B*s.r.NormFloat64()
	case "lognormal":
		v = math.Exp(s.mu + s.sg*s.r.NormFloat64())
	case "zipf":
		return int64(s.zipf.Uint64()) + 1
	case "empirical":
		return int64(d.values[s.r.IntN(len(d.values))])
	}
	return int64(math.Max(-1, math.Min(math.Round(v), math.MaxInt32)))
}

// SynthSpec describes a synthetic trace. Count or Duration (or both: whichever ends
// first) bound it.
type SynthSpec struct {
	Arrivals  ArrivalSpec   `json:"arrivals"`
	Count     int64         `json:"count,omitempty"`
	Duration  time.Duration `json:"duration_ns,omitempty"`
	Prompt    Dist          `json:"prompt_tokens,omitzero"` // unused by Agent
	Output    Dist          `json:"output_tokens"`
	PromptMin int32         `json:"prompt_min"`
	PromptMax int32         `json:"prompt_max"`
	OutputMin int32         `json:"output_min"`
	OutputMax int32         `json:"output_max"`
	// Turns, when set, makes multi-turn sessions: each conversation has Turns turns; a
	// turn's prompt is the whole conversation so far (earlier prompts and outputs) plus
	// new user tokens drawn from Prompt, so later turns share their conversation's prefix.
	Turns *Dist `json:"turns,omitempty"`
	// Sessions is how many conversations are open at once: each arrival continues one
	// of them, chosen uniformly (an empty slot starts a new conversation).
	Sessions    int    `json:"sessions,omitempty"`
	BlockTokens int    `json:"block_tokens,omitempty"` // prefix block size for sessions
	Model       string `json:"model,omitempty"`
	// Agent, when set, makes agent sessions instead (synth_agent.go); Prompt is unused.
	Agent *AgentSpec `json:"agent,omitempty"`
	// ToolTokens, when > 0, is the tokens of tool definitions every request sends
	// (tool_tokens), counted in its prompt_tokens: each prompt is ToolTokens plus the
	// messages' tokens, the draw clamped to [PromptMin, PromptMax − ToolTokens]; a
	// session's later turns and calls carry the tools once, before their history.
	ToolTokens int32 `json:"tool_tokens,omitempty"`
	// Images, when set, makes every request draw images (synth_images.go). The Prompt draw
	// is the text; a request's prompt_tokens is the text, the tools and the images' tokens
	// (when Images.Tokens is set), the text clamped to [PromptMin, PromptMax − tools −
	// image tokens] so the whole prompt stays within PromptMax.
	Images *SynthImages `json:"images,omitempty"`
}

// Validate checks the spec; it fills no defaults.
func (s *SynthSpec) Validate() error {
	if err := s.Arrivals.Validate(); err != nil {
		return err
	}
	if s.Agent != nil {
		// Agent sessions are bounded by their number; a duration only stops their starts.
		if err := s.Agent.validate(s); err != nil {
			return err
		}
		if s.Duration < 0 {
			return errors.New("synth: the duration must be >= 0")
		}
	} else if s.Count < 0 || s.Duration < 0 || (s.Count == 0 && s.Duration == 0) {
		return errors.New("synth: give a count or a duration (> 0)")
	}
	if s.Arrivals.RateEnd != 0 && s.Duration == 0 {
		return errors.New("synth: a rate ramp needs --duration")
	}
	if s.PromptMin < 1 || s.OutputMin < 1 || s.PromptMax < s.PromptMin || s.OutputMax < s.OutputMin {
		return fmt.Errorf("synth: clamps want 1 <= min <= max (prompt %d..%d, output %d..%d)", s.PromptMin, s.PromptMax, s.OutputMin, s.OutputMax)
	}
	if s.ToolTokens < 0 || int64(s.ToolTokens)+int64(s.PromptMin) > int64(s.PromptMax) {
		return fmt.Errorf("synth: tool tokens %d: want >= 0, and room beside them for a prompt of at least %d tokens within the prompt clamp %d", s.ToolTokens, s.PromptMin, s.PromptMax)
	}
	if s.Images != nil {
		if err := s.Images.validate(s); err != nil {
			return err
		}
	}
	if (s.Prompt.Kind == "" && s.Agent == nil) || s.Output.Kind == "" {
		return errors.New("synth: prompt and output distributions are required")
	}
	if s.Turns != nil {
		if s.Sessions < 1 {
			return errors.New("synth: sessions must be >= 1")
		}
		if s.BlockTokens < 1 {
			return errors.New("synth: block tokens must be >= 1")
		}
	}
	return nil
}

type conversation struct {
	id      int64
	turns   int64 // total
	turn    int64 // done
	history int64 // tokens so far: prompts' new tokens and outputs
	blocks  []int64
}

// Synth generates the trace described by spec into w and returns the number of rows.
// The same spec gives the same rows, and, through the same Writer settings, the same
// bytes. Arrivals, prompt lengths, output lengths and session choices draw from separate
// PCG streams seeded by Arrivals.Seed, so changing one distribution leaves the others' draws
// unchanged.
func Synth(ctx context.Context, spec SynthSpec, w *Writer) (int64, error) {
	if err := spec.Validate(); err != nil {
		return 0, err
	}
	if err := spec.Prompt.load(ColPromptTokens); err != nil {
		return 0, fmt.Errorf("synth: prompt tokens: %w", err)
	}
	if a := spec.Agent; a != nil {
		if err := a.First.load(ColPromptTokens); err != nil {
			return 0, fmt.Errorf("synth: agent first prompt: %w", err)
		}
		if err := a.Append.load(ColPromptTokens); err != nil {
			return 0, fmt.Errorf("synth: agent append: %w", err)
		}
	}
	if err := spec.Output.load(ColOutputTokens); err != nil {
		return 0, fmt.Errorf("synth: output tokens: %w", err)
	}
	seed := spec.Arrivals.Seed
	arr := newArrivalGen(spec.Arrivals)
	ps := newSampler(&spec.Prompt, rand.New(rand.NewPCG(seed, 2)))
	outs := newSampler(&spec.Output, rand.New(rand.NewPCG(seed, 3)))
	srng := rand.New(rand.NewPCG(seed, 4))
	images := newImageGen(spec.Images, seed)
	var ts *sampler
	if spec.Turns != nil {
		ts = newSampler(spec.Turns, rand.New(rand.NewPCG(seed, 5)))
	}
	gen, err := json.Marshal(struct {
		Tool string    `json:"tool"`
		Spec SynthSpec `json:"spec"`
	}{"llmreplay trace synth", spec})
	if err != nil {
		return 0, err
	}
	meta := Meta{Source: "synth", Generator: string(gen)}
	if spec.Turns != nil {
		meta.BlockTokens = spec.BlockTokens
	}
	if err := w.SetMeta(meta); err != nil {
		return 0, err
	}
	if spec.Agent != nil {
		return synthAgent(ctx, spec, w)
	}
	clamp := func(v int64, lo, hi int32) int32 {
		return int32(max(int64(lo), min(int64(hi), v)))
	}
	var (
		slots    = make([]*conversation, max(spec.Sessions, 1))
		nextSess int64
		nextBlk  int64
		n        int64
	)
	for spec.Count == 0 || n < spec.Count {
		t := arr.next()
		if spec.Duration > 0 && t >= int64(spec.Duration) {
			break
		}
		if n%65536 == 0 {
			if err := ctx.Err(); err != nil {
				return n, err
			}
		}
		req := Request{ID: n, Arrival: time.Duration(t), Model: spec.Model}
		tools := spec.ToolTokens
		if tools > 0 {
			req.ToolTokens, req.HasToolTokens = tools, true
		}
		room := spec.PromptMax - tools
		if images != nil {
			img, err := images.draw(&req)
			if err != nil {
				return n, fmt.Errorf("synth: request %d: %w", n, err)
			}
			if img > int64(room-spec.PromptMin) {
				return n, fmt.Errorf("synth: request %d: %d images of %d tokens leave no room for a text of %d tokens within the prompt clamp %d (tools %d): draw fewer or smaller images, or raise --prompt-max",
					n, len(req.Images), img, spec.PromptMin, spec.PromptMax, tools)
			}
			room -= int32(img)
		}
		user := clamp(ps.draw(), spec.PromptMin, room)
		req.OutputTokens = clamp(outs.draw(), spec.OutputMin, spec.OutputMax)
		if ts == nil {
			req.PromptTokens = tools + req.ImageTokens + user
		} else {
			i := srng.IntN(len(slots))
			c := slots[i]
			// A conversation ends after its turns, or when its context would pass the
			// prompt clamp (as a real one ends at the model's context window).
			if c == nil || int64(tools)+c.history+int64(user) > int64(spec.PromptMax) {
				c = &conversation{id: nextSess, turns: max(1, ts.draw())}
				nextSess++
				slots[i] = c
			}
			req.SessionID, req.HasSession = c.id, true
			// The tools come first in every turn, so block ids stay positional.
			prompt := int64(tools) + c.history + int64(user)
			req.PromptTokens = int32(prompt)
			full := prompt / int64(spec.BlockTokens)
			for int64(len(c.blocks)) < full {
				c.blocks = append(c.blocks, nextBlk)
				nextBlk++
			}
			req.PrefixBlocks = make([]int64, full, full+1)
			copy(req.PrefixBlocks, c.blocks[:full])
			if prompt%int64(spec.BlockTokens) != 0 {
				// The last, partial block's content changes as the conversation grows:
				// it is never shared.
				req.PrefixBlocks = append(req.PrefixBlocks, nextBlk)
				nextBlk++
			}
			c.history = prompt - int64(tools) + int64(req.OutputTokens)
			c.turn++
			if c.turn >= c.turns {
				slots[i] = nil
			}
		}
		if err := w.Write(req); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Sampler draws integers from a Dist with a source of its own: the same seed gives the
// same draws in the same order. replay draws think times with it.
type Sampler struct{ s *sampler }

// NewSampler returns a Sampler of d seeded with seed. An empirical Dist is loaded from
// column col of its trace (prompt_tokens or output_tokens).
func NewSampler(d Dist, col string, seed uint64) (*Sampler, error) {
	if err := d.load(col); err != nil {
		return nil, err
	}
	return &Sampler{newSampler(&d, rand.New(rand.NewPCG(seed, 7)))}, nil
}

// Draw returns the next draw (normal and lognormal draws are rounded; they may be < 1).
func (s *Sampler) Draw() int64 { return s.s.draw() }
