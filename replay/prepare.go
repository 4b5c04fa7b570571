package replay

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/internal/filehash"
	"github.com/llmreplay/llmreplay/replay/images"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/scrape"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// Env is what Prepare needs from its caller beside the Config: the things replay does not
// own (the tool version, the command line's flag map, the simulated engine, a log).
type Env struct {
	Log         io.Writer // notices: the in-process engine started, calibration; nil = none
	ToolVersion string
	// Flags is the run metadata's map of behaviour flags, as given or defaulted (cmd builds
	// it from the command line). Prepare stores it through SafeFlags and adds http-client
	// and calibration.
	Flags map[string]string
	// StartSim starts the simulated engine with the named profile on a loopback port and
	// returns its base URL and how to stop it; called when Config.Endpoint is empty (replay
	// does not import sim: cmd glues).
	StartSim func(ctx context.Context, profile string) (baseURL string, stop func(), err error)
}

// Session is a replay ready to run: the trace open, the endpoint known, the client and the
// prompter built. Run it with Run(ctx, s.Options) (ctx from WithStop; set Options.Progress
// first), then Close it.
type Session struct {
	Options Options
	// ProgressTotal is the number of requests the run will see (0: unknown); Schedule its
	// schedule length (0: unknown). Both are for progress displays.
	ProgressTotal int64
	Schedule      time.Duration
	// Output is the results file the run writes: Config.Output, or the unique default
	// name when none was given. Checked before any request (CheckOutput).
	Output  string
	closers []func()
}

// Close releases the trace, the client and the in-process engine, last opened first.
func (s *Session) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// Prepare does what lies between a Config and Run: it validates cfg, opens the trace (or
// the bundled sample) and hashes it, turns --speedup/--rate into a speedup, starts the
// in-process engine when there is no endpoint, finds the model, builds the client, checks
// with one short request that the server honours the output limit (lengths), builds the
// shard origin, the calibration and the prompter, and fills the run metadata. Its errors
// are *ConfigError for a bad configuration; none carries a secret.
func Prepare(ctx context.Context, cfg Config, env Env) (_ *Session, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if env.Log == nil {
		env.Log = io.Discard
	}
	s := &Session{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	p := &preparer{cfg: &cfg, env: env, s: s}
	p.api, _ = wire.ParseAPI(cfg.API)
	p.backend, _ = wire.ParseBackend(cfg.Backend)
	p.tokenIDs, _ = cfg.tokenIDPrompts(p.api)
	p.shard, _ = trace.ParseShard(cfg.Shard)
	p.header, _ = ParseHeaders(cfg.Headers)
	if cfg.StartAt != "" {
		p.startAt, _ = ParseStartAt(cfg.StartAt)
		if late := time.Since(p.startAt); late > time.Second {
			return nil, fmt.Errorf("replay: --start-at %s was %v ago: a late shard would send its share at other times than the others; choose a later instant", cfg.StartAt, late.Round(time.Millisecond))
		}
	}
	if p.enc, err = tokenize.Get(cfg.Encoding); err != nil {
		return nil, configErrorf("--encoding: %v", err)
	}
	if p.builder, err = tokenize.NewBuilder(p.enc, tokenize.BuilderOptions{Seed: cfg.Seed}); err != nil {
		return nil, err
	}
	steps := []func(context.Context) error{p.output, p.openTrace, p.sessions, p.unary, p.speed, p.origin, p.agents, p.images, p.endpoint, p.model, p.reachable, p.routes, p.client, p.lengths, p.calibrate, p.tools, p.calibrateImages, p.scrape}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	if err := p.reusable(ctx); err != nil {
		return nil, err
	}
	p.meta.Flags["sessions"] = p.sessMode
	maps.Copy(p.meta.Flags, p.imageFlags)
	if p.sessMode == SessionsDAG {
		p.meta.Flags["gaps"] = p.gaps()
		if cfg.AgentSessions > 0 {
			p.meta.Flags["agent-sessions"] = strconv.Itoa(cfg.AgentSessions)
		}
		p.meta.Flags["on-turn-error"] = p.onTurnError()
	}
	if p.sessMode == SessionsSequential {
		p.meta.Flags["history"] = p.history
		p.meta.Flags["think-time"] = p.think.String()
		p.meta.Flags["on-turn-error"] = p.onTurnError()
	}
	s.Options = Options{
		Source: p.source, Client: p.cl, Prompter: p.prompter(), Tools: NewTools(p.builder, p.toolOverhead, p.cl.TakesTools()), Images: p.imgs, LookAhead: p.lookAhead,
		Speedup: p.speedup, Concurrency: cfg.Concurrency, MaxInflight: cfg.MaxInflight,
		Duration: cfg.Duration, Limit: cfg.Limit, Warmup: cfg.Warmup, Grace: cfg.Grace,
		Shard: int32(p.shard.Index), Prewarm: PrewarmCount(cfg.Prewarm, cfg.MaxInflight, cfg.Concurrency), RampUp: cfg.RampUp,
		Output: s.Output, KeepJournal: cfg.KeepJournal,
		Meta: p.meta, MaxLateness: cfg.MaxLateness, Models: p.models,
		Start: p.startAt, Origin: p.originAt, HasOrigin: p.shard.Count > 1,
		Scrape: p.scrapeURLs, ScrapeInterval: cfg.ScrapeInterval,
	}
	if p.unaryAPI() {
		s.Options.Inputs, s.Options.QueryTokens = cfg.Inputs, p.queryTokens()
		p.meta.Flags["inputs"] = strconv.Itoa(cfg.Inputs)
		if q := p.queryTokens(); q > 0 {
			p.meta.Flags["query-tokens"] = strconv.Itoa(q)
		}
		s.Options.Meta = p.meta
	}
	if p.sessMode == SessionsSequential {
		o := &s.Options
		o.Sessions, o.History, o.OnTurnError, o.HistoryOverhead = p.sessMode, p.history, p.onTurnError(), p.histOverhead
		o.ThinkTime, o.ThinkSeed, o.SessionPlan = p.think, cfg.Seed, p.plan
	}
	if p.sessMode == SessionsDAG {
		o := &s.Options
		o.Sessions, o.Gaps, o.AgentPlan, o.OnTurnError, o.HistoryOverhead = p.sessMode, p.gaps(), p.agentPlan, p.onTurnError(), p.histOverhead
	}
	s.ProgressTotal = p.progressTotal()
	p.diskCheck()
	return s, nil
}

// preparer holds Prepare's state between its steps.
type preparer struct {
	cfg      *Config
	env      Env
	s        *Session
	api      wire.API
	backend  wire.Backend
	tokenIDs bool
	shard    trace.Shard
	header   http.Header
	startAt  time.Time
	enc      *tokenize.Encoding
	builder  *tokenize.Builder

	src      *trace.Reader
	source   trace.Source
	meta     results.RunMeta
	speedup  float64
	base     *url.URL
	modelID  string
	cl       *transport.Client
	originAt time.Duration
	cal      *tokenize.Calibration

	histOverhead HistoryOverhead // what earlier turns cost beyond their text (calibrate)

	toolOverhead ToolOverhead      // what one tool costs the server (tools)
	imgs         *images.Builder   // the trace's images, when sent (images)
	imageFlags   map[string]string // how they are sent, for the run metadata
	imageSizes   map[[2]int]int64  // images sent per size, for --calibrate to probe
	lookAhead    int               // Options.LookAhead: 0, the default, unless images bound it

	servedIDs []string          // GET /v1/models, once listed (route.go)
	models    map[string]string // Options.Models

	scrapeURLs []string // Options.Scrape, decided

	sessMode string // independent or sequential, decided
	history  string // sequential mode: actual or synthetic, decided
	think    ThinkTime
	plan     *SessionPlan

	agentPlan *AgentPlan // --sessions dag
}

func (p *preparer) gaps() string {
	if p.cfg.Gaps == "" {
		return GapsRecorded
	}
	return p.cfg.Gaps
}

// agents plans an agent replay's calls (PlanAgents): a pass over the rows this run will
// read, through the same planner, that checks the dependencies before anything is sent.
func (p *preparer) agents(context.Context) error {
	if p.sessMode != SessionsDAG {
		return nil
	}
	scan, err := p.open()
	if err != nil {
		return err
	}
	defer scan.Close()
	var src trace.Source = scan
	if p.shard.Count > 1 {
		src = trace.NewShardSource(scan, p.shard)
	}
	pl := planner{speedup: p.speedup, duration: p.cfg.Duration, limit: p.cfg.Limit, warmup: p.cfg.Warmup,
		origin: p.originAt, hasOrigin: p.shard.Count > 1}
	if p.agentPlan, err = PlanAgents(src, scan.Name(), pl, p.cfg.AgentSessions); err != nil {
		return err
	}
	if p.agentPlan.Sessions == 0 {
		return configErrorf("--sessions dag: trace %s has no session_id in the rows this run replays: nothing to run as agents", p.meta.TraceFile)
	}
	if p.agentPlan.HasReuse {
		v := p.agentPlan.Reusable
		p.meta.PrefixReusableShare, p.meta.PrefixReusableRule = &v, results.ReusableAgents
	}
	return nil
}

func (p *preparer) onTurnError() string {
	if p.cfg.OnTurnError == "" {
		return TurnErrorContinue
	}
	return p.cfg.OnTurnError
}

// sessions decides --sessions and --history for this trace, and plans a sequential
// replay's sessions: a pass over the trace counts each session's turns and checks that
// its rows are in arrival order, before anything is sent.
func (p *preparer) sessions(context.Context) error {
	cfg := p.cfg
	p.think, _ = ParseThinkTime(cfg.ThinkTime)
	p.sessMode = cfg.Sessions
	if p.sessMode == "" && p.unaryAPI() {
		p.sessMode = SessionsIndependent // a trace's sessions are no conversation to an embeddings model
		return nil
	}
	if p.sessMode == "" && cfg.AgentSessions > 0 {
		p.sessMode = SessionsDAG
	}
	has := p.src.HasValues(trace.ColSessionID)
	if p.sessMode == "" {
		p.sessMode = SessionsIndependent
		switch {
		case has && p.src.HasValues(trace.ColParents):
			p.sessMode = SessionsDAG
		case has:
			p.sessMode = SessionsSequential
		}
	}
	if p.sessMode == SessionsDAG {
		if !has {
			return configErrorf("--sessions dag: trace %s has no session_id: its calls belong to no agent session", p.meta.TraceFile)
		}
		p.tokenIDs = false // --prompt-format auto: a context holds the answers, which are text
		return nil
	}
	if p.sessMode == SessionsSequential && has {
		scan, err := p.open()
		if err != nil {
			return err
		}
		p.plan, err = PlanSessions(scan, scan.Name())
		scan.Close()
		if err != nil {
			return err
		}
	}
	if p.sessMode == SessionsSequential && (p.plan == nil || len(p.plan.Turns) == 0) {
		if cfg.Sessions == SessionsSequential {
			return configErrorf("--sessions sequential: trace %s has no session_id", p.meta.TraceFile)
		}
		p.sessMode, p.plan = SessionsIndependent, nil
	}
	if p.sessMode != SessionsSequential {
		if cfg.History == HistoryActual {
			return configErrorf("--history actual: needs sequential sessions, and this replay's are independent")
		}
		return nil
	}
	p.history = cfg.History
	if p.history == "" {
		p.history = HistoryActual
		if cfg.PromptFormat == "token-ids" {
			p.history = HistorySynthetic
			fmt.Fprintln(p.env.Log, "llmreplay: --prompt-format token-ids: sequential sessions with --history synthetic (an actual history is text)")
		}
	}
	if p.history == HistoryActual {
		p.tokenIDs = false // --prompt-format auto: the answers are text
	}
	return nil
}

func (p *preparer) open() (*trace.Reader, error) {
	if p.cfg.Trace == "" {
		return trace.OpenSample()
	}
	return trace.Open(p.cfg.Trace)
}

// openTrace opens the trace and starts the run metadata with its name and hash.
func (p *preparer) openTrace(context.Context) error {
	cfg := p.cfg
	src, err := p.open()
	if err != nil {
		return err
	}
	p.src, p.source = src, src
	p.s.closers = append(p.s.closers, func() { src.Close() })
	p.meta = results.RunMeta{ToolVersion: p.env.ToolVersion, API: string(p.api), Backend: string(p.backend),
		ShardIndex: p.shard.Index, ShardCount: p.shard.Count, SLO: cfg.SLO, Concurrency: cfg.Concurrency}
	p.meta.Host, _ = os.Hostname()
	if cfg.Trace == "" {
		p.meta.TraceFile, p.meta.TraceSHA256 = trace.SampleName, trace.SampleSHA256()
		return nil
	}
	p.meta.TraceFile = filepath.Base(cfg.Trace)
	if p.meta.TraceSHA256, err = filehash.SHA256(cfg.Trace); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	return nil
}

// progressScanRows: above this many rows, the trace's span is not scanned for progress alone.
const progressScanRows = 200_000

// speed decides the speedup (--speedup, the sample's own, or --rate's) and the schedule
// length shown by progress.
func (p *preparer) speed(context.Context) error {
	cfg := p.cfg
	speedup := cfg.Speedup
	if cfg.Trace == "" && !cfg.SpeedupSet {
		speedup = trace.SampleSpeedup
	}
	if speedup == 0 {
		speedup = 1
	}
	// The trace's span: needed for --rate, and shown by the progress display (elapsed vs
	// schedule); a first pass over arrivals, skipped for big traces when only progress
	// wants it.
	var traceSpan time.Duration
	if cfg.RateSet || (!cfg.Quiet && cfg.Concurrency == 0 && p.src.NumRows() <= progressScanRows) {
		// The rate is the whole trace's (every shard gets the same speedup).
		scan, err := p.open()
		if err != nil {
			return err
		}
		n, span, err := ScanSpan(scan, cfg.scanRows())
		scan.Close()
		if err != nil {
			return err
		}
		traceSpan = span
		if cfg.RateSet {
			if speedup, err = SpeedupForRate(n, span, cfg.Rate); err != nil {
				return configErrorf("--%v", err)
			}
			p.meta.Rate = cfg.Rate
		}
	}
	if cfg.Concurrency > 0 {
		speedup = 0
	}
	p.speedup, p.meta.Speedup = speedup, speedup
	if speedup > 0 && traceSpan > 0 {
		p.s.Schedule = time.Duration(float64(traceSpan) / speedup)
		if cfg.Duration > 0 && cfg.Duration < p.s.Schedule {
			p.s.Schedule = cfg.Duration
		}
	}
	return nil
}

// endpoint parses --endpoint, or starts the simulated engine in-process.
func (p *preparer) endpoint(ctx context.Context) error {
	cfg := p.cfg
	if cfg.Endpoint != "" {
		base, err := wire.BaseURL(cfg.Endpoint)
		if err != nil {
			return configErrorf("--%v", err)
		}
		p.base = base
		p.meta.Endpoint = wire.SafeEndpoint(base)
		return nil
	}
	if p.env.StartSim == nil {
		return configErrorf("--endpoint is empty")
	}
	running, stop, err := p.env.StartSim(ctx, cfg.SimProfile)
	if err != nil {
		return err
	}
	p.s.closers = append(p.s.closers, stop)
	fmt.Fprintf(p.env.Log, "llmreplay: no --endpoint: started the simulated engine (profile %s) at %s\n", cfg.SimProfile, running)
	p.meta.Simulated, p.meta.SimProfile = true, cfg.SimProfile
	if p.base, err = wire.BaseURL(running); err != nil {
		return err
	}
	p.meta.Endpoint = wire.SafeEndpoint(p.base)
	return nil
}

// model takes --model, or the first model the endpoint lists.
func (p *preparer) model(ctx context.Context) error {
	id, err := DiscoverModel(ctx, p.cfg.Model, p.base, p.cfg.APIKey, p.header, p.cfg.Insecure)
	if err != nil {
		return err
	}
	p.modelID, p.meta.Model = id, id
	p.meta.Flags = SafeFlags(p.env.Flags)
	return nil
}

// DiscoverModel returns model when given, else the first model id of GET BASE/models
// (waiting at most 30 s). Its errors name the endpoint in its safe form.
func DiscoverModel(ctx context.Context, model string, base *url.URL, apiKey string, header http.Header, insecure bool) (string, error) {
	if model != "" {
		return model, nil
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ids, err := transport.ListModels(lctx, base, apiKey, header, insecure)
	cancel()
	if err != nil {
		return "", fmt.Errorf("replay: no --model given and %w", err)
	}
	if len(ids) == 0 {
		return "", fmt.Errorf("replay: no --model given and %s/models lists none", wire.SafeEndpoint(base))
	}
	return ids[0], nil
}

func (p *preparer) client(context.Context) error {
	cfg := p.cfg
	cl, err := transport.NewClient(transport.ClientOptions{
		BaseURL: p.base, API: p.api, Backend: p.backend, Model: p.modelID, APIKey: cfg.APIKey, Header: p.header,
		Timeout: cfg.Timeout, MaxInflight: max(cfg.MaxInflight, cfg.Concurrency), Insecure: cfg.Insecure,
		CountTokens: p.enc.Count, TokenIDPrompts: p.tokenIDs, HTTPClient: cfg.HTTPClient, SessionHeader: cfg.SessionHeader,
		ReadBatch: cfg.ReadBatch,
	})
	if err != nil {
		return err
	}
	p.cl = cl
	p.s.closers = append(p.s.closers, func() { cl.Close() })
	p.meta.Flags["http-client"] = cl.HTTPClientName() // what auto chose
	return nil
}

// origin makes a shard's due times count from the whole trace's first arrival, not the
// shard's, so every request is due at the same instant as in a single-process run.
func (p *preparer) origin(context.Context) error {
	if p.shard.Count <= 1 {
		return nil
	}
	first, err := p.open()
	if err != nil {
		return err
	}
	if first.Next() {
		p.originAt = first.Request().Arrival
	}
	err = first.Err()
	first.Close()
	if err != nil {
		return err
	}
	p.source = trace.NewShardSource(p.src, p.shard)
	return nil
}

// probed is what the calibrations probe: the run's server, API, backend, model and
// credentials.
func (p *preparer) probed() Endpoint {
	return Endpoint{Base: p.base, API: p.api, Backend: p.backend, Model: p.modelID, APIKey: p.cfg.APIKey,
		Header: p.header, Insecure: p.cfg.Insecure}
}

// calibrate runs --calibrate: it learns how the server counts the builder's text, and
// stops the run when the fit's held-out error is above --calibrate-max-error.
func (p *preparer) calibrate(ctx context.Context) error {
	cfg := p.cfg
	if !cfg.Calibrate {
		return nil
	}
	if p.tokenIDs {
		fmt.Fprintln(p.env.Log, "llmreplay: --calibrate: token-id prompts are counted exactly; nothing to calibrate")
		return nil
	}
	c, err := Calibrate(ctx, p.probed(), p.builder)
	if err != nil {
		return fmt.Errorf("replay: --calibrate: %w", err)
	}
	fmt.Fprintf(p.env.Log, "llmreplay: calibrated: %s\n", c)
	for _, w := range c.Warnings {
		fmt.Fprintf(p.env.Log, "llmreplay: calibration: warning: %s\n", w)
	}
	// Before any request of the trace: a fit that misses by more than the bound would
	// build every prompt at a length the server does not count as the trace's.
	if err := checkCalibration(c, cfg.CalibrateMaxError); err != nil {
		return err
	}
	p.cal = &c
	p.meta.Flags["calibration"] = c.String()
	if p.sessMode == SessionsDAG || (p.sessMode == SessionsSequential && p.history == HistoryActual) {
		// A turn's history is what earlier requests sent: the template of each is measured
		// apart from the messages' (HistoryOverhead).
		if p.histOverhead, err = CalibrateHistory(ctx, p.probed(), p.builder, c); err != nil {
			return fmt.Errorf("replay: --calibrate: %w", err)
		}
		fmt.Fprintf(p.env.Log, "llmreplay: calibrated conversations: %s\n", p.histOverhead)
		p.meta.Flags["history-overhead"] = p.histOverhead.String()
	}
	return nil
}

// tools decides what one tool costs the server, for the tools of the trace's rows
// (Tools): measured with --calibrate (CalibrateTools), else DefaultToolOverhead; the run
// metadata records which (flag tool-overhead) when the trace has tool_tokens.
func (p *preparer) tools(ctx context.Context) error {
	p.toolOverhead = DefaultToolOverhead
	if !p.src.HasValues(trace.ColToolTokens) {
		return nil
	}
	if !p.cl.TakesTools() {
		p.meta.Flags["tool-overhead"] = fmt.Sprintf("none: the %s API takes no tools, so tool_tokens are sent as the prompt's text", p.api)
		return nil
	}
	if p.cfg.Calibrate {
		o, err := CalibrateTools(ctx, p.probed(), p.builder)
		if err != nil {
			return fmt.Errorf("replay: --calibrate: %w", err)
		}
		p.toolOverhead = o
		fmt.Fprintf(p.env.Log, "llmreplay: calibrated tools: %s\n", o)
	}
	p.meta.Flags["tool-overhead"] = p.toolOverhead.String()
	return nil
}

func (p *preparer) prompter() Prompter {
	return NewPrompter(PrompterOptions{Builder: p.builder, Encoding: p.enc, TokenIDs: p.tokenIDs,
		VocabSize: p.cfg.VocabSize, BlockTokens: p.src.Meta().BlockTokens, Calibration: p.cal})
}

// progressTotal is the number of requests a progress display counts to (0: unknown).
func (p *preparer) progressTotal() int64 {
	total := p.src.NumRows()
	if p.shard.Count > 1 {
		total = 0
	}
	if l := p.cfg.Limit; l > 0 && (total == 0 || l+p.cfg.Warmup < total) {
		total = l + p.cfg.Warmup
	}
	return total
}

// SafeFlags returns a copy of a run's flag map fit to store: the endpoint without its
// userinfo or query; the API key and header values are never in it (cmd lists header names
// only).
func SafeFlags(flags map[string]string) map[string]string {
	m := maps.Clone(flags)
	if m == nil {
		m = map[string]string{}
	}
	delete(m, "api-key")
	if e, ok := m["endpoint"]; ok {
		m["endpoint"] = wire.SafeURL(e)
	}
	return m
}

// reusable records in the run metadata the best prefix-cache hit rate the rows this run
// replays allow (over this shard's rows, --warmup and --limit applied) and its rule: with
// sequential sessions and --history actual, HistoryReusableShare (a later turn sends its
// history back; recorded whether or not the trace has prefix blocks); otherwise
// ReusableShare, when the trace has prefix blocks. analyze reports the measured hit rate
// beside it.
func (p *preparer) reusable(context.Context) error {
	if p.sessMode == SessionsDAG {
		return nil // agents planned it (PlanAgents)
	}
	bt := p.src.Meta().BlockTokens
	history := p.sessMode == SessionsSequential && p.history == HistoryActual
	if bt <= 0 && !history {
		return nil
	}
	scan, err := p.open()
	if err != nil {
		return err
	}
	defer scan.Close()
	var src trace.Source = scan
	if p.shard.Count > 1 {
		src = trace.NewShardSource(scan, p.shard)
	}
	share, rule := ReusableShare, results.ReusableBlocks
	if history {
		share, rule = HistoryReusableShare, results.ReusableHistory
	}
	v, ok, err := share(src, max(bt, 0), p.cfg.Warmup, p.cfg.Limit)
	if err != nil {
		return err
	}
	if ok {
		p.meta.PrefixReusableShare, p.meta.PrefixReusableRule = &v, rule
	}
	return nil
}

// scrape decides what the run scrapes: the --scrape URLs; none with --scrape none; by
// default the endpoint's server root /metrics (wire.MetricsURL) when a probe finds a parseable
// exposition there. It says what it decided in one line. The API key and --header values
// are not sent to a metrics endpoint (a --scrape host may be another party's); a URL's
// userinfo is (as basic auth).
func (p *preparer) scrape(ctx context.Context) error {
	cfg := p.cfg
	iv := cfg.ScrapeInterval
	switch {
	case len(cfg.Scrape) == 1 && cfg.Scrape[0] == scrape.None:
		return nil
	case len(cfg.Scrape) > 0:
		p.scrapeURLs = append([]string(nil), cfg.Scrape...)
		safe := make([]string, len(cfg.Scrape))
		for i, u := range cfg.Scrape {
			safe[i] = wire.SafeURL(u)
		}
		fmt.Fprintf(p.env.Log, "llmreplay: scraping %s every %v\n", strings.Join(safe, ", "), iv)
		return nil
	}
	u := wire.MetricsURL(p.base)
	n, err := scrape.Probe(ctx, u, cfg.Insecure)
	if err != nil {
		fmt.Fprintf(p.env.Log, "llmreplay: not scraping: %s: %v (--scrape URL names a metrics endpoint)\n", wire.SafeEndpoint(u), err)
		return nil
	}
	p.scrapeURLs = []string{u.String()}
	fmt.Fprintf(p.env.Log, "llmreplay: scraping %s every %v (%d samples; --scrape none to turn off)\n", wire.SafeEndpoint(u), iv, n)
	return nil
}
