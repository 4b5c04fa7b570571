package replay

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/media"
	"github.com/llmreplay/llmreplay/replay/images"
	"github.com/llmreplay/llmreplay/replay/scrape"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// Config is what a user asks of one replay: the flags of `llmreplay replay`, typed. cmd
// parses the command line into it, sweep copies it per point with the load set, and
// bench/replaybench builds one; Prepare turns it into a ready run. Each field names its
// flag; zero values that mean "not given" say so.
type Config struct {
	Trace      string // --trace: trace/v1 Parquet file; "" = the bundled sample
	Endpoint   string // --endpoint: base URL as typed; "" = the simulated engine in-process
	SimProfile string // --sim-profile: the in-process engine's profile
	// SimReasoningShare (--sim-reasoning-share, 0..1) and SimReasoningUsage
	// (--sim-reasoning-usage) set the in-process engine's sim.Config ReasoningShare and
	// ReasoningUsage: a thinking model without a separate `llmreplay sim`. An endpoint's
	// engine reasons as it does, so they are refused with Endpoint.
	SimReasoningShare float64
	SimReasoningUsage bool
	API               string // --api: completions, chat, messages, responses, embeddings or rerank
	Backend           string // --backend
	Model             string // --model; "" = the first of GET /v1/models
	Headers           []string
	// APIKey is sent as a bearer token. It is never serialised, stored or printed.
	APIKey     string `json:"-"`
	Insecure   bool
	HTTPClient string        // --http-client: auto, raw or net/http
	ReadBatch  time.Duration // --read-batch: ClientOptions.ReadBatch
	// SessionHeader (--session-header) names the session-affinity header; "" sends none.
	SessionHeader string
	ModelMap      string // --model-map: TRACE=SERVED,...; "" = the trace's models as served, else --model
	// Inputs (--inputs) is how many inputs an embeddings request sends, documents a rerank
	// request (unary.go); QueryTokens (--query-tokens) a rerank query's length. Generation
	// APIs take neither (their defaults: 1 and DefaultQueryTokens).
	Inputs      int
	QueryTokens int

	// The load: at most one of Speedup, Rate and Concurrency is given (the *Set fields say
	// which; a given zero is an error, an absent one a default).
	Speedup        float64 // --speedup; default 1 (the bundled sample: its own)
	SpeedupSet     bool
	Rate           float64 // --rate, requests/s
	RateSet        bool
	Concurrency    int // --concurrency: closed loop
	ConcurrencySet bool
	RampUp         time.Duration // --ramp-up: closed loop, worker i starts at i*RampUp/Concurrency; 0 = all at once

	// Conversations (docs/replay.md, "Conversations"). Sessions (--sessions): independent,
	// sequential, or "" = sequential when the trace has session_id, else
	// independent. History (--history): actual, synthetic, or "" = actual in sequential
	// mode (synthetic with --prompt-format token-ids). ThinkTime (--think-time): "0", a
	// duration or a DIST of milliseconds. OnTurnError (--on-turn-error): continue or
	// end-session.
	Sessions    string
	History     string
	ThinkTime   string
	OnTurnError string
	// Gaps (--gaps), agent sessions: recorded ("" too), scaled or none.
	Gaps string
	// AgentSessions (--agent-sessions N): replay the trace's first N agent sessions only,
	// all started at once (the sweep's agents axis); 0: every row at its trace time.
	AgentSessions int

	MaxInflight int
	Prewarm     int
	Timeout     time.Duration // per request; 0 = none
	Duration    time.Duration // 0 = the whole trace
	Limit       int64
	Warmup      int64
	Grace       time.Duration
	SLO         string // --slo, stored with the results (checked by cmd: analysis parses it)
	MaxLateness time.Duration
	Strict      bool

	// Output is the results file; "" = DefaultOutputName at the run's start (Prepare
	// resolves it into Session.Output). Force lets a run replace an existing results file
	// (and discard an earlier run's journal there).
	Output      string
	Force       bool
	KeepJournal bool
	Shard       string // --shard i/N
	StartAt     string // --start-at: RFC 3339 or unix seconds; "" = now

	PromptFormat string // auto, text or token-ids
	VocabSize    int
	Calibrate    bool
	// CalibrateMaxError (--calibrate-max-error) is the largest held-out relative error a
	// calibration may have (0.05 = 5%); a larger one stops the run before any request of
	// the trace (DefaultCalibrateMaxError says why its default is what it is).
	CalibrateMaxError float64
	Encoding          string
	Seed              uint64

	// Images (docs/replay.md, "Images"): ImageRule (--image-rule) counts one image's
	// prompt tokens (media.LookupRule; "" = media.DefaultRule); ImageFormat
	// (--image-format): jpeg or png ("" = jpeg); ImageSize (--image-size WxH): the size of
	// an image the trace gives no size for ("" = images.DefaultSize); ImageReuse
	// (--image-reuse, 0..1): the share of images that repeat one already sent; DropImages
	// (--drop-images): send none, every prompt token as text.
	ImageRule   string
	ImageFormat string
	ImageSize   string
	ImageReuse  float64
	DropImages  bool

	// Scrape (--scrape, repeatable): Prometheus endpoints sampled during the run; empty =
	// the endpoint's server root /metrics when it answers there (Prepare probes it);
	// ["none"] = none. ScrapeInterval (--scrape-interval): their sampling period.
	Scrape         []string
	ScrapeInterval time.Duration

	Quiet            bool
	ProgressInterval time.Duration
}

// DefaultConfig returns the flag defaults of `llmreplay replay`.
func DefaultConfig() Config {
	return Config{
		SimProfile: "tiny", API: string(wire.APICompletions), Backend: string(wire.BackendVLLM), HTTPClient: "auto", ReadBatch: DefaultReadBatch,
		MaxInflight: transport.DefaultMaxInflight, Prewarm: 64, Timeout: 10 * time.Minute, Grace: DefaultGrace,
		MaxLateness: DefaultMaxLateness, Shard: "0/1",
		PromptFormat: "auto", VocabSize: 100256, CalibrateMaxError: DefaultCalibrateMaxError, Encoding: tokenize.CL100kBase, SessionHeader: DefaultSessionHeader,
		ProgressInterval: 5 * time.Second, ThinkTime: "0", OnTurnError: TurnErrorContinue,
		ScrapeInterval: scrape.DefaultInterval, Inputs: 1, QueryTokens: DefaultQueryTokens,
	}
}

// ConfigError is a Config that cannot run: a bad flag value or combination. Its text names
// the flag (`--speedup 0: must be positive`); the CLI reports it as a usage error.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

func configErrorf(format string, a ...any) error {
	return &ConfigError{fmt.Sprintf(format, a...)}
}

// Validate checks the configuration without touching a file, the network or the clock.
func (c *Config) Validate() error {
	modes := 0
	for _, set := range []bool{c.SpeedupSet, c.RateSet, c.ConcurrencySet} {
		if set {
			modes++
		}
	}
	if modes > 1 {
		return configErrorf("give at most one of --speedup, --rate and --concurrency")
	}
	if _, err := transport.ParseHTTPClient(c.HTTPClient); err != nil {
		return configErrorf("--http-client: %v", err)
	}
	if err := c.validateSim(); err != nil {
		return err
	}
	if c.ReadBatch < 0 || c.ReadBatch > transport.MaxReadBatch {
		return configErrorf("--read-batch %v: must be between 0 (read every chunk as it arrives) and %v", c.ReadBatch, transport.MaxReadBatch)
	}
	if c.SpeedupSet && !(c.Speedup > 0) {
		return configErrorf("--speedup %v: must be positive", c.Speedup)
	}
	if c.RateSet && (!(c.Rate > 0) || math.IsInf(c.Rate, 0)) {
		return configErrorf("--rate %v: must be a positive number of requests per second", c.Rate)
	}
	if c.ConcurrencySet && c.Concurrency < 1 {
		return configErrorf("--concurrency %d: must be at least 1", c.Concurrency)
	}
	if c.RampUp < 0 {
		return configErrorf("--ramp-up %v: must not be negative", c.RampUp)
	}
	if c.RampUp > 0 && c.Concurrency <= 0 {
		return configErrorf("--ramp-up %v: only with --concurrency (it spreads the closed loop's workers' start)", c.RampUp)
	}
	if c.MaxInflight < 1 {
		return configErrorf("--max-inflight %d: must be at least 1", c.MaxInflight)
	}
	api, err := wire.ParseAPI(c.API)
	if err != nil {
		return configErrorf("--api: %v", err)
	}
	if _, err := wire.ParseBackend(c.Backend); err != nil {
		return configErrorf("--backend: %v", err)
	}
	tokenIDs, err := c.tokenIDPrompts(api)
	if err != nil {
		return err
	}
	if err := c.validateUnary(api); err != nil {
		return err
	}
	if _, _, err := tokenize.TokenIDRange(c.VocabSize); tokenIDs && err != nil {
		return configErrorf("--vocab-size: %v", err)
	}
	if e := c.CalibrateMaxError; !(e >= 0) || math.IsInf(e, 0) {
		return configErrorf("--calibrate-max-error %v: want a relative error >= 0, e.g. 0.05 for 5%%", e)
	}
	if _, err := trace.ParseShard(c.Shard); err != nil {
		return configErrorf("--shard: %v", err)
	}
	if c.StartAt != "" {
		if _, err := ParseStartAt(c.StartAt); err != nil {
			return configErrorf("--start-at: %v", err)
		}
	}
	if err := c.validateRoutes(); err != nil {
		return err
	}
	if err := c.validateSessions(); err != nil {
		return err
	}
	return c.validateScrape()
}

// MinScrapeInterval is the shortest --scrape-interval.
const MinScrapeInterval = 100 * time.Millisecond

// validateScrape checks --scrape and --scrape-interval (any host: the user names it).
func (c *Config) validateScrape() error {
	for _, s := range c.Scrape {
		if s == scrape.None {
			if len(c.Scrape) > 1 {
				return configErrorf("--scrape none: turns scraping off, so it cannot be given with a URL")
			}
			continue
		}
		if _, err := scrape.ParseURL(s); err != nil {
			return configErrorf("--scrape %v", err)
		}
	}
	if c.ScrapeInterval < MinScrapeInterval {
		return configErrorf("--scrape-interval %v: must be at least %v", c.ScrapeInterval, MinScrapeInterval)
	}
	return nil
}

// tokenIDPrompts decides --prompt-format.
func (c *Config) tokenIDPrompts(api wire.API) (bool, error) {
	var tokenIDs bool
	switch c.PromptFormat {
	case "text":
	case "token-ids":
		tokenIDs = true
	case "auto":
		// The in-process engine counts token ids by length: no tokenizer on its side of the
		// process, so the replayer's CPU is not shared with prompt tokenization.
		tokenIDs = c.Endpoint == "" && api == wire.APICompletions
	default:
		return false, configErrorf("--prompt-format %q: want auto, text or token-ids", c.PromptFormat)
	}
	if tokenIDs && api != wire.APICompletions {
		return false, configErrorf("--prompt-format token-ids needs --api completions")
	}
	return tokenIDs, nil
}

// ParseHeaders reads --header values ('Name: value'). Its errors name the header, never
// its value.
func ParseHeaders(hs []string) (http.Header, error) {
	header := http.Header{}
	for _, h := range hs {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, configErrorf("--header %q: want 'Name: value'", HeaderName(h))
		}
		header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return header, nil
}

// ParseStartAt reads an instant as RFC 3339 (2026-12-02T15:00:00Z) or unix seconds
// (1796223600, with up to nine fraction digits, read exactly).
func ParseStartAt(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	bad := fmt.Errorf("%q: want RFC 3339 (2026-12-02T15:00:00Z) or unix seconds", s)
	whole, frac, _ := strings.Cut(s, ".")
	secs, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || secs <= 0 || secs > 1e11 || len(frac) > 9 {
		return time.Time{}, bad
	}
	var ns int64
	if frac != "" {
		if ns, err = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64); err != nil || frac[0] == '-' || frac[0] == '+' {
			return time.Time{}, bad
		}
	}
	return time.Unix(secs, ns), nil
}

// IsConfigError reports whether err is (or wraps) a ConfigError.
func IsConfigError(err error) bool {
	var ce *ConfigError
	return errors.As(err, &ce)
}

// scanRows is how many trace rows a pass before the run reads: the --limit requests and
// their --warmup, or every row (0) without --limit.
func (c *Config) scanRows() int64 {
	if c.Limit > 0 {
		return c.Limit + c.Warmup
	}
	return 0
}

// validateSessions checks the conversation flags (their defaults depend on the trace:
// Prepare decides them).
func (c *Config) validateSessions() error {
	switch c.Sessions {
	case "", SessionsIndependent, SessionsSequential, SessionsDAG:
	default:
		return configErrorf("--sessions %q: want independent, sequential or dag", c.Sessions)
	}
	switch c.Gaps {
	case "", GapsRecorded, GapsScaled, GapsNone:
	default:
		return configErrorf("--gaps %q: want recorded, scaled or none", c.Gaps)
	}
	if c.AgentSessions < 0 {
		return configErrorf("--agent-sessions %d: must not be negative", c.AgentSessions)
	}
	if c.AgentSessions > 0 {
		switch {
		case c.Sessions != "" && c.Sessions != SessionsDAG:
			return configErrorf("--agent-sessions: replays agent sessions (--sessions dag), not --sessions %s", c.Sessions)
		case c.Limit > 0 || c.Duration > 0 || c.Warmup > 0 || c.RateSet:
			return configErrorf("--agent-sessions %d: the run is those sessions, started at once; drop --limit, --duration, --warmup and --rate", c.AgentSessions)
		}
	}
	if c.Sessions == SessionsDAG || c.AgentSessions > 0 {
		switch {
		case c.Concurrency > 0:
			return configErrorf("--sessions dag: runs in the open loop (a call is due when its parents end); drop --concurrency, and set the session rate with --rate or --speedup")
		case c.History == HistorySynthetic:
			return configErrorf("--sessions dag: a call's prompt is its parent's context with the actual answer; --history synthetic does not apply")
		case c.PromptFormat == "token-ids":
			return configErrorf("--sessions dag: needs text prompts, not --prompt-format token-ids (a context holds the answers, which are text)")
		case c.ThinkTime != "" && c.ThinkTime != "0":
			return configErrorf("--sessions dag: the trace's gaps say how long each call waits (--gaps); --think-time is for sequential sessions")
		}
	}
	switch c.History {
	case "", HistoryActual, HistorySynthetic:
	default:
		return configErrorf("--history %q: want actual or synthetic", c.History)
	}
	switch c.OnTurnError {
	case "", TurnErrorContinue, TurnErrorEndSession:
	default:
		return configErrorf("--on-turn-error %q: want continue or end-session", c.OnTurnError)
	}
	if _, err := ParseThinkTime(c.ThinkTime); err != nil {
		return configErrorf("--think-time %v", err)
	}
	if c.History == HistoryActual && c.Sessions == SessionsIndependent {
		return configErrorf("--history actual: needs --sessions sequential (an independent turn does not wait for the answer its history would hold)")
	}
	if c.History == HistoryActual && c.PromptFormat == "token-ids" {
		return configErrorf("--history actual: needs text prompts, not --prompt-format token-ids (the answers are text; turning them into the server's token ids needs its tokenizer); use --history synthetic")
	}
	return nil
}

// validateSim checks the in-process engine's options: they shape the simulated engine
// only, so with --endpoint they would be silently ignored, and a run would claim a
// reasoning share its server never had.
func (c *Config) validateSim() error {
	if _, err := c.imageOptions(); err != nil {
		return err
	}
	if !(c.SimReasoningShare >= 0 && c.SimReasoningShare <= 1) {
		return configErrorf("--sim-reasoning-share %v: want a share in [0, 1] (0.3: the first 30%% of every answer's tokens are reasoning)", c.SimReasoningShare)
	}
	if c.Endpoint == "" {
		return nil
	}
	if c.SimReasoningShare != 0 {
		return configErrorf("--sim-reasoning-share shapes the in-process simulated engine, and --endpoint %s replaces it: drop one (for a separate sim: llmreplay sim --reasoning-share %v)", wire.SafeURL(c.Endpoint), c.SimReasoningShare)
	}
	if c.SimReasoningUsage {
		return configErrorf("--sim-reasoning-usage shapes the in-process simulated engine, and --endpoint %s replaces it: drop one (for a separate sim: llmreplay sim --reasoning-usage)", wire.SafeURL(c.Endpoint))
	}
	return nil
}

// imageRuleName is --image-rule's value, or the default's name.
func (c *Config) imageRuleName() string { return cmp.Or(c.ImageRule, media.DefaultRule) }

// imageOptions returns the image flags checked and typed (the seed is the run's).
func (c *Config) imageOptions() (images.Options, error) {
	o := images.Options{Format: media.JPEG, Reuse: c.ImageReuse, Seed: c.Seed}
	var err error
	if o.Rule, err = media.LookupRule(cmp.Or(c.ImageRule, media.DefaultRule)); err != nil {
		return o, configErrorf("--image-rule: %v", err)
	}
	if c.ImageFormat != "" {
		if o.Format, err = media.ParseFormat(c.ImageFormat); err != nil {
			return o, configErrorf("--image-format: %v", err)
		}
	}
	if o.Width, o.Height, err = images.ParseSize(cmp.Or(c.ImageSize, images.DefaultSize)); err != nil {
		return o, configErrorf("--image-size: %v", err)
	}
	if !(c.ImageReuse >= 0 && c.ImageReuse <= 1) {
		return o, configErrorf("--image-reuse %v: want a share in [0, 1] (0.5: half the images repeat one already sent)", c.ImageReuse)
	}
	return o, nil
}
