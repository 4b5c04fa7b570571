package replay

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/wire"
)

// Endpoint is the server a calibration probes, with the run's credentials; the API and
// the backend the replay speaks choose the probes' shape, their headers and how a usage
// is read (a Messages API usage differs by server).
type Endpoint struct {
	Base     *url.URL
	API      wire.API
	Backend  wire.Backend
	Model    string
	APIKey   string
	Header   http.Header
	Insecure bool
}

// Calibrate fits how the server at e counts the builder's prompts (tokenize.Calibrate),
// counting through the wire's probes with the client's credentials. The probes see the
// base URL without userinfo (its password goes as a basic Authorization header, whose
// value the prober scrubs from its errors); the errors returned are wrapped with the
// endpoint's safe form.
func Calibrate(ctx context.Context, e Endpoint, b *tokenize.Builder) (tokenize.Calibration, error) {
	methods, err := wire.ProbeMethods(e.API, "")
	if err != nil {
		return tokenize.Calibration{}, fmt.Errorf("%s: %w", wire.SafeEndpoint(e.Base), err)
	}
	p := newProber(e)
	c, err := tokenize.Calibrate(ctx, tokenize.CalibrateOptions{API: string(e.API), Methods: methods, Count: p.Count, Builder: b})
	if err != nil {
		return c, fmt.Errorf("%s: %w", wire.SafeEndpoint(e.Base), err)
	}
	return c, nil
}

// newProber returns the prober of e with the client's credentials, as the client sends
// them (transport.NewClient): the base URL without userinfo (its password goes as a basic
// Authorization header, whose value the prober scrubs from its errors), the key where the
// run's requests carry it (transport.SetAPIKey).
func newProber(e Endpoint) *wire.Prober {
	h := e.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	if auth := transport.BasicAuth(e.Base); auth != "" {
		h.Set("Authorization", auth)
	}
	k, _ := wire.Lookup(e.API)
	transport.SetAPIKey(h, k, e.Backend, e.APIKey)
	clean := *e.Base
	clean.User = nil
	return &wire.Prober{Base: &clean, API: e.API, Backend: e.Backend, Model: e.Model, Header: h,
		Client: &http.Client{Transport: transport.NewTransport(8, e.Insecure), Timeout: time.Minute}}
}

// The tool probes: a prompt of toolProbePrompt builder tokens alone, then with one tool
// whose description is each of toolProbeDescs builder tokens long.
var (
	toolProbePrompt = 256
	toolProbeDescs  = [2]int{32, 512}
)

// CalibrateTools measures what one tool costs the server at base in prompt tokens
// (ToolOverhead): the usage of a request with a tool of a known description against the
// same request without it, at two description lengths: the difference grows by Ratio per
// builder token of the description, and what it adds beyond that is Tokens (the tool's
// name, its schema and the chat template's markers). Usage probes (max_tokens 1) count
// exactly what the replay's requests are counted.
func CalibrateTools(ctx context.Context, e Endpoint, b *tokenize.Builder) (ToolOverhead, error) {
	fail := func(format string, a ...any) (ToolOverhead, error) {
		return ToolOverhead{}, fmt.Errorf("%s: tool overhead: %s", wire.SafeEndpoint(e.Base), fmt.Sprintf(format, a...))
	}
	p := newProber(e)
	text, err := b.AppendPrompt(nil, tokenize.PromptSpec{RequestID: toolRequestID + 1, Tokens: toolProbePrompt})
	if err != nil {
		return ToolOverhead{}, err
	}
	without, _, err := p.Count(ctx, wire.MethodUsage, string(text))
	if err != nil {
		return fail("the probe without tools: %v", err)
	}
	var with [2]int
	for i, k := range toolProbeDescs {
		desc, err := b.AppendPrompt(nil, tokenize.PromptSpec{RequestID: toolRequestID, Tokens: k})
		if err != nil {
			return ToolOverhead{}, err
		}
		p.Tools = wire.AppendJSONContent(nil, desc)
		if with[i], _, err = p.Count(ctx, wire.MethodUsage, string(text)); err != nil {
			return fail("the probe with a tool of %d description tokens: %v", k, err)
		}
	}
	d0, d1 := float64(with[0]-without), float64(with[1]-without)
	ratio := (d1 - d0) / float64(toolProbeDescs[1]-toolProbeDescs[0])
	if d0 <= 0 || !(ratio > 0) {
		return fail("prompt tokens %d without a tool, %d and %d with one of %d and %d description tokens: the server does not count the tools it is sent (does the model's template render tools?)",
			without, with[0], with[1], toolProbeDescs[0], toolProbeDescs[1])
	}
	return ToolOverhead{Tokens: d0 - ratio*float64(toolProbeDescs[0]), Ratio: ratio, Measured: true}, nil
}

// DefaultCalibrateMaxError is --calibrate-max-error's default: 5% held-out error. A
// server whose count is linear in the builder's words keeps well under it: the
// tokenizers measured (docs/prompts.md) leave at most 2.6 tokens, 0.65% at the shortest
// held-out length (400 tokens); one that splits a share of the builder's words miscounts
// a prompt by its word mix, a few tokens whatever its length (tokenize/builder.go), which
// with the fit's own share of it came to 8 tokens (2%) at 400 for a server splitting one
// word in ten. A fit that misses by more is not a tokenizer's residual: a server that cut
// the probes to its context (a context at 85% of the longest probe gave 14%; a run that
// calibrated to 96.75% so built every prompt empty), or one that counts something else. Its prompts would not have the trace's lengths, and every figure per prompt token
// would be wrong; the bound says so before any request is sent.
const DefaultCalibrateMaxError = 0.05

// checkCalibration returns the error that stops a run whose calibration c has a held-out
// relative error above bound (--calibrate-max-error): the error found, the bound, what
// the probes show (tokenize.Calibration.Truncation), the likely reasons and what to do.
func checkCalibration(c tokenize.Calibration, bound float64) error {
	if !(c.MaxRelError > bound) {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "replay: --calibrate: the calibration's held-out error is %.3f%% (%d tokens), above --calibrate-max-error %g (%g%%): prompts built from it would not have the trace's lengths, so no request of the trace was sent.\n",
		100*c.MaxRelError, c.MaxAbsError, bound, 100*bound)
	fmt.Fprintf(&b, "  fit via %s: server = %.2f + %.5f x builder tokens; probes (builder -> server tokens): %s; held-out (wanted <- builder -> server): %s\n",
		c.Method, c.Overhead, c.Ratio, probeList(c.Fit), checkList(c.Check))
	// longest is what was sent; need what a context must hold for the probes to fit:
	// the longest fit probe or held-out target, an eighth more for a template and a
	// tokenizer that counts more than the builder.
	longest, need := 0, 0
	for _, pt := range c.Fit {
		longest, need = max(longest, pt.BuilderTokens), max(need, pt.BuilderTokens)
	}
	for _, pt := range c.Check {
		longest, need = max(longest, pt.BuilderTokens), max(need, pt.Want)
	}
	need += need / 8
	said := "the server did not say its context length"
	if c.MaxModelLen > 0 {
		said = fmt.Sprintf("the server says the model's context is %d tokens", c.MaxModelLen)
	}
	if t := c.Truncation(); t != "" {
		fmt.Fprintf(&b, "  the server cuts prompts short: %s. The probes were up to %d builder tokens long (%s).\n", t, longest, said)
	} else {
		fmt.Fprintf(&b, "  likely reasons: the server cuts prompts longer than its context to it (the probes were up to %d builder tokens long; %s); or its count is not linear in the builder's words (a tokenizer that splits many of them, a template that depends on the text).\n", longest, said)
	}
	fmt.Fprintf(&b, "  what to do: give the model a context of at least %d tokens, and more if the trace's prompts are longer (the server's max model length: vLLM --max-model-len, Ollama OLLAMA_CONTEXT_LENGTH, llama.cpp --ctx-size per slot); or, knowing the prompts will miss by up to this much, raise --calibrate-max-error to %.3f; or run without --calibrate.",
		need, math.Ceil(1000*c.MaxRelError)/1000)
	return errors.New(b.String())
}

// probeList is the fit probes as "128 -> 129,129,130; 1024 -> ...", one entry a length.
func probeList(ps []tokenize.Probe) string {
	var parts []string
	for i := 0; i < len(ps); {
		j := i
		var counts []string
		for ; j < len(ps) && ps[j].BuilderTokens == ps[i].BuilderTokens; j++ {
			counts = append(counts, strconv.Itoa(ps[j].ServerTokens))
		}
		parts = append(parts, fmt.Sprintf("%d -> %s", ps[i].BuilderTokens, strings.Join(counts, ",")))
		i = j
	}
	return strings.Join(parts, "; ")
}

// checkList is the held-out probes as "400 <- 399 -> 400, ...".
func checkList(ps []tokenize.Probe) string {
	parts := make([]string, len(ps))
	for i, pt := range ps {
		parts[i] = fmt.Sprintf("%d <- %d -> %d", pt.Want, pt.BuilderTokens, pt.ServerTokens)
	}
	return strings.Join(parts, ", ")
}
