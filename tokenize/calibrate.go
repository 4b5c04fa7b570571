package tokenize

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Default probe lengths in builder tokens. Fitting lengths span short to long prompts; the
// held-out lengths lie between them and are only used to measure the residual error.
var (
	DefaultFitLengths   = []int{128, 1024, 3072}
	DefaultCheckLengths = []int{400, 1500, 2500}
)

// probeRequestID is the first request id of probe prompts. Probes count down from it:
// trace request ids are non-negative, so a probe never shares a prefix with a replayed
// request (and so never warms the server's prefix cache for it).
const probeRequestID = -1 << 40

// CountFunc asks a server how many tokens text is, by method (a way of asking: a
// /tokenize endpoint, usage of a one-token request), and returns its count and the
// model's context length when the server said it (0 when not). The wire package's
// Prober.Count is one; tokenize itself sends nothing.
type CountFunc func(ctx context.Context, method, text string) (tokens, maxModelLen int, err error)

// CalibrateOptions says how to calibrate: how the server counts and what to send it.
type CalibrateOptions struct {
	API string // the API the counts are for, recorded in the Calibration
	// Methods are tried in order with Count; the first that measures every fit length
	// is the calibration's Method. One that fails leaves a warning; when every one fails,
	// Calibrate fails.
	Methods []string
	Count   CountFunc
	Builder *Builder
	// FitLengths and CheckLengths are probe lengths in builder tokens (defaults above): the
	// model is fitted on the first, its residual measured on the second.
	FitLengths   []int
	CheckLengths []int
	// Repeats is how many probes (with different text) to send at each fit length; their
	// average washes out the word mix of any one prompt. Zero means 3.
	Repeats int
}

// Validate checks the options without counting anything.
func (o CalibrateOptions) Validate() error {
	if len(o.Methods) == 0 {
		return errors.New("tokenize: calibrate: no counting method")
	}
	if o.Count == nil {
		return errors.New("tokenize: calibrate: no count function")
	}
	if o.Builder == nil {
		return errors.New("tokenize: calibrate: no builder")
	}
	fit, check := o.lengths()
	distinct := map[int]bool{}
	for _, n := range fit {
		distinct[n] = true
	}
	if len(distinct) < 2 {
		return fmt.Errorf("tokenize: calibrate: fit lengths %v: need at least two distinct lengths", fit)
	}
	if o.Repeats < 0 || o.Repeats > 100 {
		return fmt.Errorf("tokenize: calibrate: repeats %d out of range 0..100", o.Repeats)
	}
	if len(check) == 0 {
		return errors.New("tokenize: calibrate: no check lengths: the residual error would go unmeasured")
	}
	for _, n := range append(append([]int{}, fit...), check...) {
		if n < 1 || n > MaxPromptTokens {
			return fmt.Errorf("tokenize: calibrate: probe length %d out of range 1..%d", n, MaxPromptTokens)
		}
	}
	return nil
}

func (o CalibrateOptions) lengths() (fit, check []int) {
	fit, check = o.FitLengths, o.CheckLengths
	if fit == nil {
		fit = DefaultFitLengths
	}
	if check == nil {
		check = DefaultCheckLengths
	}
	return fit, check
}

// Probe is one measurement: a builder prompt of BuilderTokens tokens that the server counted
// as ServerTokens. For a held-out probe, Want is the count Target aimed at.
type Probe struct {
	BuilderTokens int `json:"builder_tokens"`
	ServerTokens  int `json:"server_tokens"`
	Want          int `json:"want,omitempty"`
}

// Calibration is the linear model the server's count follows:
//
//	server(k) = Overhead + Ratio*k
//
// for a builder prompt of k tokens sent through API. Overhead is what the server adds whatever
// the prompt (a chat template, a BOS token); Ratio is how many of its tokens one builder word
// makes (1 for a tiktoken-family tokenizer, a little more for one that splits rarer words).
// The zero Calibration is the identity (Target(n) = n).
type Calibration struct {
	API         string  `json:"api"`
	Method      string  `json:"method"`
	Overhead    float64 `json:"overhead"`
	Ratio       float64 `json:"ratio"`
	MaxModelLen int     `json:"max_model_len,omitempty"` // when /tokenize said
	Fit         []Probe `json:"fit"`
	Check       []Probe `json:"check"`
	// MaxAbsError and MaxRelError are the worst |server - want| and |server - want|/want over
	// the held-out probes, each sent at Target(want) builder tokens: the error a replayed
	// prompt of that length should expect.
	MaxAbsError int      `json:"max_abs_error"`
	MaxRelError float64  `json:"max_rel_error"`
	Warnings    []string `json:"warnings,omitempty"`
}

// Target returns how many builder tokens to ask for so the server counts n:
// round((n - Overhead)/Ratio), at least 1. When n is below what the server adds on its own,
// no prompt can reach it and Target returns 1.
func (c Calibration) Target(n int) int {
	if c.Ratio <= 0 {
		return max(n, 1)
	}
	k := math.Round((float64(n) - c.Overhead) / c.Ratio)
	if k < 1 || math.IsNaN(k) {
		return 1
	}
	if k > MaxPromptTokens {
		return MaxPromptTokens
	}
	return int(k)
}

// Predict returns the server count the model expects for a builder prompt of k tokens.
func (c Calibration) Predict(k int) float64 {
	if c.Ratio <= 0 {
		return float64(k)
	}
	return c.Overhead + c.Ratio*float64(k)
}

// String summarises the calibration on one line.
func (c Calibration) String() string {
	return fmt.Sprintf("%s via %s: server = %.2f + %.5f x builder tokens; held-out error max %d tokens (%.3f%%)",
		c.API, c.Method, c.Overhead, c.Ratio, c.MaxAbsError, 100*c.MaxRelError)
}

// Calibrate measures how a server counts the builder's prompts, through opts.Count, and
// returns the linear model that corrects for it. Probe prompts use negative request ids,
// so they share no prefix with a replay's requests.
func Calibrate(ctx context.Context, opts CalibrateOptions) (Calibration, error) {
	if err := opts.Validate(); err != nil {
		return Calibration{}, err
	}
	p := &prober{opts: opts}
	cal := Calibration{API: opts.API}
	fit, check := opts.lengths()

	methods := opts.Methods
	var fails []string
	for _, m := range methods {
		p.method = m
		points, err := p.measure(ctx, repeatLengths(fit, opts.Repeats), nil)
		if err != nil {
			if ctx.Err() != nil || len(methods) == 1 {
				return Calibration{}, err
			}
			fails = append(fails, err.Error())
			continue
		}
		cal.Method, cal.Fit = m, points
		break
	}
	if cal.Method == "" {
		return Calibration{}, fmt.Errorf("tokenize: calibrate: every method failed: %s", strings.Join(fails, "; "))
	}
	for _, f := range fails {
		cal.Warnings = append(cal.Warnings, "fell back: "+f)
	}
	cal.MaxModelLen = p.maxModelLen

	a, r, err := fitLine(cal.Fit)
	if err != nil {
		return Calibration{}, fmt.Errorf("tokenize: calibrate %s via %s: %w", opts.API, cal.Method, err)
	}
	cal.Overhead, cal.Ratio = a, r
	if r < 0.5 || r > 4 {
		cal.Warnings = append(cal.Warnings, fmt.Sprintf("ratio %.3f is far from 1: is this server's tokenizer counting the same text?", r))
	}

	checkPoints, err := p.measure(ctx, check, &cal)
	if err != nil {
		return Calibration{}, err
	}
	cal.Check = checkPoints
	for _, pt := range checkPoints {
		d := pt.ServerTokens - pt.Want
		if d < 0 {
			d = -d
		}
		cal.MaxAbsError = max(cal.MaxAbsError, d)
		cal.MaxRelError = max(cal.MaxRelError, float64(d)/float64(pt.Want))
	}
	if cal.MaxRelError > 0.005 {
		cal.Warnings = append(cal.Warnings, fmt.Sprintf("held-out error %.2f%% exceeds 0.5%%: the server's tokenizer is not linear in the builder's tokens", 100*cal.MaxRelError))
	}
	return cal, nil
}

func repeatLengths(ns []int, r int) []int {
	if r <= 0 {
		r = 3
	}
	out := make([]int, 0, len(ns)*r)
	for _, n := range ns {
		for range r {
			out = append(out, n)
		}
	}
	return out
}

// fitLine is ordinary least squares of ServerTokens on BuilderTokens.
func fitLine(pts []Probe) (a, r float64, err error) {
	var n, sx, sy, sxx, sxy float64
	for _, p := range pts {
		x, y := float64(p.BuilderTokens), float64(p.ServerTokens)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	den := n*sxx - sx*sx
	if n < 2 || den == 0 {
		return 0, 0, errors.New("need probes at two distinct lengths to fit")
	}
	r = (n*sxy - sx*sy) / den
	a = (sy - r*sx) / n
	if r <= 0 {
		return 0, 0, fmt.Errorf("server counts do not grow with the prompt (slope %.4f): %v", r, pts)
	}
	return a, r, nil
}

// prober sends the probes of one calibration through its CountFunc.
type prober struct {
	opts        CalibrateOptions
	method      string
	maxModelLen int
	nextID      int64
}

// measure sends one probe per length. With cal non-nil the lengths are targets: each probe
// is built at cal.Target(n) tokens and Want records n.
func (p *prober) measure(ctx context.Context, lengths []int, cal *Calibration) ([]Probe, error) {
	out := make([]Probe, 0, len(lengths))
	for _, n := range lengths {
		k := n
		if cal != nil {
			k = cal.Target(n)
		}
		p.nextID--
		text, err := p.opts.Builder.AppendPrompt(nil, PromptSpec{RequestID: probeRequestID + p.nextID, Tokens: k})
		if err != nil {
			return nil, err
		}
		c, maxLen, err := p.opts.Count(ctx, p.method, string(text))
		if err != nil {
			return nil, fmt.Errorf("tokenize: calibrate %s via %s, probe of %d tokens: %w", p.opts.API, p.method, k, err)
		}
		if maxLen > 0 {
			p.maxModelLen = maxLen
		}
		if c < k/2 {
			// A /tokenize that ignored our field (llama.cpp answers {"tokens":[]} to a body
			// without "content") must not pass for a measurement; nor a count of what was
			// left of the prompt after a server cut it to its context.
			return nil, fmt.Errorf("tokenize: calibrate %s via %s, probe of %d tokens: server counted %d: not a count of this prompt (a /tokenize that ignored the text, or a server that cut the prompt to a context of about %d tokens)", p.opts.API, p.method, k, c, c)
		}
		pt := Probe{BuilderTokens: k, ServerTokens: c}
		if cal != nil {
			pt.Want = n
		}
		out = append(out, pt)
	}
	return out, nil
}

// bendRatio: when the server's count grows by less than this share of its growth per
// builder token between the shorter fit lengths, between the longer ones, the longer
// probes were cut short. A tokenizer's word mix moves a window's count by a few tokens
// whatever its length (builder.go), well under 1% of the slope over the default lengths'
// gaps of 896 and 2,048 tokens; a cut at the context bends it by the share cut off.
const bendRatio = 0.9

// Truncation says in one sentence what the probes show of a server that cuts prompts
// short (a server that truncates a prompt longer than its context to the context, as
// Ollama does, and counts what it kept), or returns "" when they show nothing of it:
//
//   - a longer probe counted no more than a shorter one: the count stopped growing;
//   - a probe counted at least MaxModelLen, when the server said it;
//   - the count per builder token between the two longest fit lengths is below
//     bendRatio times that between the two shortest.
//
// It reads only the probes: Calibrate does not act on it, a caller that refuses a fit
// says it as the likely reason.
func (c Calibration) Truncation() string {
	type level struct {
		builder int
		server  float64 // mean over the probes of this length
	}
	sums := map[int][2]float64{}
	maxServer := 0
	for _, pt := range append(append([]Probe(nil), c.Fit...), c.Check...) {
		s := sums[pt.BuilderTokens]
		sums[pt.BuilderTokens] = [2]float64{s[0] + float64(pt.ServerTokens), s[1] + 1}
		maxServer = max(maxServer, pt.ServerTokens)
	}
	levels := make([]level, 0, len(sums))
	for k, s := range sums {
		levels = append(levels, level{k, s[0] / s[1]})
	}
	slices.SortFunc(levels, func(a, b level) int { return a.builder - b.builder })
	var says []string
	for j := 1; j < len(levels); j++ {
		if i := slices.IndexFunc(levels[:j], func(l level) bool { return l.server >= levels[j].server }); i >= 0 {
			says = append(says, fmt.Sprintf("a probe of %d builder tokens counted %.0f, no more than one of %d (%.0f): the count stopped growing at about %d tokens",
				levels[j].builder, levels[j].server, levels[i].builder, levels[i].server, maxServer))
			break
		}
	}
	if c.MaxModelLen > 0 && maxServer >= c.MaxModelLen {
		says = append(says, fmt.Sprintf("a probe counted %d tokens, the model's context of %d", maxServer, c.MaxModelLen))
	}
	var fit []level
	for _, l := range levels {
		if slices.ContainsFunc(c.Fit, func(p Probe) bool { return p.BuilderTokens == l.builder }) {
			fit = append(fit, l)
		}
	}
	if n := len(fit); n >= 3 && len(says) == 0 {
		slope := func(a, b level) float64 { return (b.server - a.server) / float64(b.builder-a.builder) }
		first, last := slope(fit[0], fit[1]), slope(fit[n-2], fit[n-1])
		if first > 0 && last < bendRatio*first {
			says = append(says, fmt.Sprintf("the count grew %.2f tokens per builder token from %d to %d builder tokens but %.2f from %d to %d: the longer probes were cut short at about %d tokens",
				first, fit[0].builder, fit[1].builder, last, fit[n-2].builder, fit[n-1].builder, maxServer))
		}
	}
	return strings.Join(says, "; ")
}
