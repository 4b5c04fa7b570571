package tokenize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Calibration methods, as reported in Calibration.Method.
const (
	MethodTokenize         = "tokenize"          // POST /tokenize, vLLM and SGLang shape
	MethodTokenizeLlamaCpp = "tokenize-llamacpp" // POST /tokenize {content}, llama.cpp shape
	MethodUsage            = "usage"             // usage.prompt_tokens of max_tokens=1 probes
)

// APIs a calibration is for.
const (
	APICompletions = "completions"
	APIChat        = "chat"
)

// Default probe lengths in builder tokens. Fitting lengths span short to long prompts; the
// held-out lengths lie between them and are only used to measure the residual error.
var (
	DefaultFitLengths   = []int{128, 1024, 3072}
	DefaultCheckLengths = []int{400, 1500, 2500}
)

// maxResponseBytes bounds what a probe reads from the server: a /tokenize reply for a
// 4,000-token prompt is about 30 KB.
const maxResponseBytes = 8 << 20

// probeRequestID is the first request id of probe prompts. Probes count down from it:
// trace request ids are non-negative, so a probe never shares a prefix with a replayed
// request (and so never warms the server's prefix cache for it).
const probeRequestID = -1 << 40

// CalibrateOptions says which endpoint to calibrate against and how.
type CalibrateOptions struct {
	// BaseURL is the API base as OpenAI clients take it, e.g. http://127.0.0.1:8000/v1,
	// already normalised by the caller (replay.BaseURL; a URL with no path still gets /v1
	// here). /tokenize is looked for at the server root: the base with a trailing /v1
	// removed. Errors never quote the URL: the caller wraps them with the endpoint it may show.
	BaseURL string
	API     string // "completions" or "chat"
	Model   string
	// HTTPClient sends the probes; nil means a client with a 60 s timeout.
	HTTPClient *http.Client
	// Header is added to every probe (it may carry an API key: it is never logged or
	// put in an error).
	Header  http.Header
	Builder *Builder
	// Method forces MethodTokenize, MethodTokenizeLlamaCpp or MethodUsage; empty tries
	// /tokenize in both shapes, then usage probes.
	Method string
	// FitLengths and CheckLengths are probe lengths in builder tokens (defaults above): the
	// model is fitted on the first, its residual measured on the second.
	FitLengths   []int
	CheckLengths []int
	// Repeats is how many probes (with different text) to send at each fit length; their
	// average washes out the word mix of any one prompt. Zero means 3.
	Repeats int
}

// Validate checks the options without touching the network.
func (o CalibrateOptions) Validate() error {
	if _, _, err := endpointURLs(o.BaseURL); err != nil {
		return err
	}
	switch o.API {
	case APICompletions, APIChat:
	default:
		return fmt.Errorf("tokenize: calibrate: api %q: want %s or %s", o.API, APICompletions, APIChat)
	}
	switch o.Method {
	case "", MethodTokenize, MethodTokenizeLlamaCpp, MethodUsage:
	default:
		return fmt.Errorf("tokenize: calibrate: method %q: want %s, %s or %s", o.Method, MethodTokenize, MethodTokenizeLlamaCpp, MethodUsage)
	}
	if o.Method == MethodTokenizeLlamaCpp && o.API == APIChat {
		return errors.New("tokenize: calibrate: llama.cpp's /tokenize does not apply the chat template; use usage probes for the chat api")
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

// Calibrate measures how the server at opts.BaseURL counts the builder's prompts and returns
// the linear model that corrects for it. With /tokenize (vLLM, SGLang: POST {model, prompt}
// or {model, messages}; llama.cpp: POST {content}) nothing is generated; otherwise each probe
// is a non-streaming request with max_tokens=1 whose usage.prompt_tokens is read. Probe
// prompts use negative request ids, so they share no prefix with a replay's requests.
func Calibrate(ctx context.Context, opts CalibrateOptions) (Calibration, error) {
	if err := opts.Validate(); err != nil {
		return Calibration{}, err
	}
	apiBase, root, _ := endpointURLs(opts.BaseURL)
	p := &prober{opts: opts, apiBase: apiBase, root: root, client: opts.HTTPClient}
	if p.client == nil {
		p.client = &http.Client{Timeout: 60 * time.Second}
	}
	cal := Calibration{API: opts.API}
	fit, check := opts.lengths()

	methods := []string{opts.Method}
	if opts.Method == "" {
		methods = []string{MethodTokenize, MethodTokenizeLlamaCpp, MethodUsage}
		if opts.API == APIChat {
			methods = []string{MethodTokenize, MethodUsage}
		}
	}
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

// endpointURLs returns the API base (with /v1 added to a URL with no path) and the server
// root where /tokenize lives.
func endpointURLs(base string) (apiBase, root string, err error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// Never echo the URL: it may carry credentials.
		return "", "", errors.New("tokenize: calibrate: base url must be http(s)://host[:port][/path]")
	}
	u.RawQuery, u.Fragment = "", ""
	path := strings.TrimRight(u.Path, "/")
	if path == "" {
		path = "/v1"
	}
	u.Path = path
	apiBase = u.String()
	u.Path = strings.TrimSuffix(path, "/v1")
	root = u.String()
	return apiBase, root, nil
}

// urlPath is the path of a probe's target, for error messages: tokenize's errors carry no
// URL (its host part and any userinfo or query are the caller's to show, redacted).
func urlPath(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(url)"
	}
	return u.Path
}

type prober struct {
	opts          CalibrateOptions
	apiBase, root string
	client        *http.Client
	method        string
	maxModelLen   int
	nextID        int64
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
		c, err := p.count(ctx, string(text))
		if err != nil {
			return nil, fmt.Errorf("tokenize: calibrate %s via %s, probe of %d tokens: %w", p.opts.API, p.method, k, p.scrub(err))
		}
		if c < k/2 {
			// A /tokenize that ignored our field (llama.cpp answers {"tokens":[]} to a body
			// without "content") must not pass for a measurement.
			return nil, fmt.Errorf("tokenize: calibrate %s via %s, probe of %d tokens: server counted %d: not a count of this prompt", p.opts.API, p.method, k, c)
		}
		pt := Probe{BuilderTokens: k, ServerTokens: c}
		if cal != nil {
			pt.Want = n
		}
		out = append(out, pt)
	}
	return out, nil
}

// scrub removes the values of the caller's headers (an API key, say) from an error whose
// text quotes a server's reply: a server or proxy may echo the request back. An error that
// quotes nothing of them keeps its identity (context.Canceled stays testable).
func (p *prober) scrub(err error) error {
	msg := err.Error()
	clean := msg
	for _, vs := range p.opts.Header {
		for _, v := range vs {
			for _, part := range append([]string{v}, strings.Fields(v)...) {
				if len(part) >= 4 {
					clean = strings.ReplaceAll(clean, part, "[redacted]")
				}
			}
		}
	}
	if clean == msg {
		return err
	}
	return errors.New(clean)
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (p *prober) count(ctx context.Context, text string) (int, error) {
	model := p.opts.Model
	var msgs []chatMessage
	if p.opts.API == APIChat {
		msgs = []chatMessage{{Role: "user", Content: text}}
	}
	switch p.method {
	case MethodTokenize:
		body := map[string]any{"model": model}
		if msgs != nil {
			body["messages"] = msgs
		} else {
			body["prompt"] = text
		}
		resp, err := p.post(ctx, p.root+"/tokenize", body)
		if err != nil {
			return 0, err
		}
		tr, err := ParseTokenizeResponse(resp)
		if err != nil {
			return 0, err
		}
		if tr.MaxModelLen > 0 {
			p.maxModelLen = tr.MaxModelLen
		}
		return tr.Count, nil
	case MethodTokenizeLlamaCpp:
		// add_special: count the BOS that /completions adds too.
		resp, err := p.post(ctx, p.root+"/tokenize", map[string]any{"content": text, "add_special": true})
		if err != nil {
			return 0, err
		}
		tr, err := ParseTokenizeResponse(resp)
		if err != nil {
			return 0, err
		}
		return tr.Count, nil
	default:
		body := map[string]any{"model": model, "max_tokens": 1, "temperature": 0, "stream": false}
		path := "/completions"
		if msgs != nil {
			body["messages"] = msgs
			path = "/chat/completions"
		} else {
			body["prompt"] = text
		}
		resp, err := p.post(ctx, p.apiBase+path, body)
		if err != nil {
			return 0, err
		}
		return ParseUsagePromptTokens(resp)
	}
}

func (p *prober) post(ctx context.Context, target string, body any) ([]byte, error) {
	buf, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(buf))
	if err != nil {
		return nil, fmt.Errorf("POST %s: bad request", urlPath(target))
	}
	for k, vs := range p.opts.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		// *url.Error repeats the URL, which may hold credentials: keep only the cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("POST %s: %w", urlPath(target), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("POST %s: read response: %w", urlPath(target), err)
	}
	if len(data) > maxResponseBytes {
		return nil, fmt.Errorf("POST %s: response larger than %d bytes", urlPath(target), maxResponseBytes)
	}
	if resp.StatusCode/100 != 2 {
		hint := ""
		if resp.StatusCode == http.StatusBadRequest && p.method == MethodUsage {
			hint = " (a probe longer than the model's context? set shorter FitLengths and CheckLengths)"
		}
		return nil, fmt.Errorf("POST %s: HTTP %d: %s%s", urlPath(target), resp.StatusCode, snippet(data), hint)
	}
	return data, nil
}

// snippet is the start of a response body for an error message, on one line.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// TokenizeResponse is what a /tokenize endpoint said.
type TokenizeResponse struct {
	Count       int // tokens in the prompt
	MaxModelLen int // 0 when not given
}

// ParseTokenizeResponse parses a /tokenize reply: vLLM and SGLang's
// {"count": N, "tokens": [...], "max_model_len": M} or llama.cpp's {"tokens": [...]} (whose
// tokens may be ids or {"id", "piece"} objects). When both count and tokens are present they
// must agree.
func ParseTokenizeResponse(data []byte) (TokenizeResponse, error) {
	var raw struct {
		Count       *int64            `json:"count"`
		Tokens      []json.RawMessage `json:"tokens"`
		MaxModelLen *int64            `json:"max_model_len"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return TokenizeResponse{}, fmt.Errorf("tokenize response: %w", err)
	}
	if raw.Count == nil && raw.Tokens == nil {
		return TokenizeResponse{}, fmt.Errorf("tokenize response: neither count nor tokens: %s", snippet(data))
	}
	var r TokenizeResponse
	if raw.Count != nil {
		if *raw.Count < 0 || *raw.Count > math.MaxInt32 {
			return TokenizeResponse{}, fmt.Errorf("tokenize response: count %d out of range", *raw.Count)
		}
		r.Count = int(*raw.Count)
		if raw.Tokens != nil && len(raw.Tokens) != r.Count {
			return TokenizeResponse{}, fmt.Errorf("tokenize response: count %d but %d tokens", r.Count, len(raw.Tokens))
		}
	} else {
		r.Count = len(raw.Tokens)
	}
	if raw.MaxModelLen != nil {
		if *raw.MaxModelLen < 0 || *raw.MaxModelLen > math.MaxInt32 {
			return TokenizeResponse{}, fmt.Errorf("tokenize response: max_model_len %d out of range", *raw.MaxModelLen)
		}
		r.MaxModelLen = int(*raw.MaxModelLen)
	}
	return r, nil
}

// ParseUsagePromptTokens returns usage.prompt_tokens from a non-streaming completions or chat
// completions response.
func ParseUsagePromptTokens(data []byte) (int, error) {
	var raw struct {
		Usage *struct {
			PromptTokens *int64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return 0, fmt.Errorf("completion response: %w", err)
	}
	if raw.Usage == nil || raw.Usage.PromptTokens == nil {
		return 0, fmt.Errorf("completion response: no usage.prompt_tokens: %s", snippet(data))
	}
	n := *raw.Usage.PromptTokens
	if n < 0 || n > math.MaxInt32 {
		return 0, fmt.Errorf("completion response: usage.prompt_tokens %d out of range", n)
	}
	return int(n), nil
}
