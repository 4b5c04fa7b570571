package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/sim"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
)

func init() {
	register(&command{
		name:    "replay",
		summary: "replay a trace open-loop (or closed-loop) against an endpoint; write results.parquet",
		run:     runReplay,
	})
}

const replayExamples = `  # First run: the bundled sample trace (29 s of schedule) against the built-in simulated engine
  llmreplay replay

  # Last Tuesday's traffic at 2x against a vLLM server
  llmreplay replay --trace tuesday.parquet --endpoint http://10.0.0.5:8000/v1 --speedup 2 -o tue-2x.parquet

  # Rescale the trace to a mean of 50 req/s, first 10 minutes only, chat API, OpenAI-style server
  llmreplay replay --trace t.parquet --endpoint https://api.example.com/v1 --api chat --backend openai \
    --rate 50 --duration 10m

  # The classic closed-loop table entry: 64 concurrent users, first 2000 requests
  llmreplay replay --trace t.parquet --endpoint http://127.0.0.1:8000 --concurrency 64 --limit 2000

  # Fail (exit 3) if the replayer itself could not keep to the schedule
  llmreplay replay --trace t.parquet --endpoint http://127.0.0.1:8000 --strict --max-lateness 5ms`

type replayFlags struct {
	trace, endpoint, api, backend, model, apiKey, output, simProfile, encoding, slo, shard string
	promptFormat, startAt, httpClient                                                      string
	vocabSize                                                                              int
	headers                                                                                []string
	speedup, rate                                                                          float64
	concurrency, maxInflight, prewarm                                                      int
	limit, warmup                                                                          int64
	timeout, duration, grace, maxLateness, progressEvery                                   time.Duration
	insecure, strict, quiet, keepJournal, calibrate                                        bool
	seed                                                                                   uint64
}

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replay", "llmreplay replay [--trace T] [--endpoint URL] [--speedup X | --rate R | --concurrency N] [flags]", replayExamples, stdout)
	var f replayFlags
	addReplayFlags(fs, &f)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("replay: unexpected argument %q", fs.Arg(0))
	}
	return doReplay(ctx, fs, &f, stdout, stderr)
}

// addReplayFlags defines replay's flags on fs; sweep defines the same ones, so that every
// point of a sweep is a replay with exactly replay's options.
func addReplayFlags(fs *pflag.FlagSet, f *replayFlags) {
	fs.StringVarP(&f.trace, "trace", "t", "", "trace file (trace/v1 Parquet); default: the bundled sample ("+trace.SampleName+")")
	fs.StringVarP(&f.endpoint, "endpoint", "e", "", "OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (no path: /v1); default: start the simulated engine in-process")
	fs.StringVar(&f.api, "api", "completions", "API: completions or chat")
	fs.StringVar(&f.backend, "backend", "vllm", "server kind, chooses the length-forcing fields: vllm, sglang, tgi, llamacpp, openai")
	fs.StringVar(&f.model, "model", "", "model name (default: the first of GET /v1/models)")
	fs.StringArrayVarP(&f.headers, "header", "H", nil, "extra request header 'Name: value', repeatable (values are never stored)")
	fs.StringVar(&f.apiKey, "api-key", "", "API key sent as a bearer token (default: $LLMREPLAY_API_KEY, else $OPENAI_API_KEY); never printed or stored")
	fs.BoolVar(&f.insecure, "insecure", false, "skip TLS certificate verification")
	fs.StringVar(&f.httpClient, "http-client", "auto", "HTTP client: raw (llmreplay's own HTTP/1.1 client, one read per streamed chunk; http:// only), net/http (Go's; https, proxies, HTTP/2); auto: raw for http:// without a proxy, else net/http")
	fs.Float64Var(&f.speedup, "speedup", 0, "replay X times faster than recorded (default 1; the bundled sample: its own speedup)")
	fs.Float64Var(&f.rate, "rate", 0, "rescale arrivals to a mean of R requests/s (instead of --speedup)")
	fs.IntVar(&f.concurrency, "concurrency", 0, "closed loop: N workers, each sending the next request when its last ends (arrival times ignored)")
	fs.IntVar(&f.prewarm, "prewarm", 64, "open N keep-alive connections (GET /v1/models) before the run, so early requests do not pay connection set-up in their lateness and TTFT")
	fs.IntVar(&f.maxInflight, "max-inflight", replay.DefaultMaxInflight, "open loop: a request due while N are in flight is recorded as dropped")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "per-request timeout, from send to the end of the stream (0 = none)")
	fs.DurationVar(&f.duration, "duration", 0, "replay only requests due within this time (closed loop: sent within it)")
	fs.Int64Var(&f.limit, "limit", 0, "replay at most N requests (after warm-up)")
	fs.Int64Var(&f.warmup, "warmup", 0, "send the first N requests on schedule without recording them")
	fs.DurationVar(&f.grace, "grace", replay.DefaultGrace, "after Ctrl-C, SIGTERM or a fatal error, how long requests in flight may finish before they are canceled (a second Ctrl-C cancels them at once)")
	fs.StringVar(&f.slo, "slo", "", "SLOs stored with the results for analyze, e.g. ttft=2s,tpot=100ms")
	fs.DurationVar(&f.maxLateness, "max-lateness", replay.DefaultMaxLateness, "schedule lateness p99 above which the run is client-limited")
	fs.BoolVar(&f.strict, "strict", false, "exit with status 3 when the run is client-limited")
	fs.StringVarP(&f.output, "output", "o", "results.parquet", "results file (Parquet); its journal is written beside it while the run goes")
	fs.BoolVar(&f.keepJournal, "keep-journal", false, "keep the journal (OUTPUT.journal) after the results file is written")
	fs.StringVar(&f.shard, "shard", "0/1", "send only shard i of N of the trace (by session, else request id); see docs/scaling-out.md")
	fs.StringVar(&f.startAt, "start-at", "", "start the run at this wall-clock instant (RFC 3339 or unix seconds), the same for every shard of one run")
	fs.StringVar(&f.simProfile, "sim-profile", "tiny", "profile of the in-process simulated engine (no --endpoint): "+strings.Join(sim.Profiles(), ", "))
	fs.StringVar(&f.promptFormat, "prompt-format", "auto", "prompts as text, or as token-ids (completions API; vLLM and SGLang accept them, no tokenizer drift); auto: token-ids for the in-process simulated engine, else text")
	fs.IntVar(&f.vocabSize, "vocab-size", 100256, "token-id prompts: ids stay below this (the model's vocabulary; the default is cl100k_base's)")
	fs.BoolVar(&f.calibrate, "calibrate", false, "before the run, learn how the server counts the builder's text (its /tokenize, else usage.prompt_tokens of probes) and correct prompt lengths so the server counts the trace's; text prompts only")
	fs.StringVar(&f.encoding, "encoding", tokenize.CL100kBase, "tokenizer for building prompts and counting output when the server reports no usage")
	fs.Uint64Var(&f.seed, "seed", 0, "prompt text family (change it so a server's prefix cache cannot reuse an earlier run's prompts)")
	fs.BoolVarP(&f.quiet, "quiet", "q", false, "no progress on stderr")
	fs.DurationVar(&f.progressEvery, "progress-interval", 5*time.Second, "period of the plain progress lines when stderr is not a terminal")
}

func doReplay(ctx context.Context, fs *pflag.FlagSet, f *replayFlags, stdout, stderr io.Writer) error {
	// Flag checks first: nothing is started for a bad command line.
	modes := 0
	for _, n := range []string{"speedup", "rate", "concurrency"} {
		if fs.Changed(n) {
			modes++
		}
	}
	if modes > 1 {
		return usagef("replay: give at most one of --speedup, --rate and --concurrency")
	}
	if _, err := replay.ParseHTTPClient(f.httpClient); err != nil {
		return usagef("replay: --http-client: %v", err)
	}
	if fs.Changed("speedup") && !(f.speedup > 0) {
		return usagef("replay: --speedup %v: must be positive", f.speedup)
	}
	if fs.Changed("concurrency") && f.concurrency < 1 {
		return usagef("replay: --concurrency %d: must be at least 1", f.concurrency)
	}
	if f.maxInflight < 1 {
		return usagef("replay: --max-inflight %d: must be at least 1", f.maxInflight)
	}
	api, err := replay.ParseAPI(f.api)
	if err != nil {
		return usagef("replay: --api: %v", err)
	}
	backend, err := replay.ParseBackend(f.backend)
	if err != nil {
		return usagef("replay: --backend: %v", err)
	}
	var tokenIDs bool
	switch f.promptFormat {
	case "text":
	case "token-ids":
		tokenIDs = true
	case "auto":
		// The in-process engine counts token ids by length: no tokenizer on its side of the
		// process, so the replayer's CPU is not shared with prompt tokenization.
		tokenIDs = f.endpoint == "" && api == replay.APICompletions
	default:
		return usagef("replay: --prompt-format %q: want auto, text or token-ids", f.promptFormat)
	}
	if tokenIDs && api != replay.APICompletions {
		return usagef("replay: --prompt-format token-ids needs --api completions")
	}
	if _, _, err := tokenize.TokenIDRange(f.vocabSize); tokenIDs && err != nil {
		return usagef("replay: --vocab-size: %v", err)
	}
	shard, err := trace.ParseShard(f.shard)
	if err != nil {
		return usagef("replay: --shard: %v", err)
	}
	var startAt time.Time
	if f.startAt != "" {
		if startAt, err = parseStartAt(f.startAt); err != nil {
			return usagef("replay: --start-at: %v", err)
		}
		if late := time.Since(startAt); late > time.Second {
			return fmt.Errorf("replay: --start-at %s was %v ago: a late shard would send its share at other times than the others; choose a later instant", f.startAt, late.Round(time.Millisecond))
		}
	}
	header := http.Header{}
	for _, h := range f.headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return usagef("replay: --header %q: want 'Name: value'", headerName(h))
		}
		header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	apiKey := f.apiKey
	if apiKey == "" {
		apiKey = os.Getenv("LLMREPLAY_API_KEY")
	}
	if apiKey == "" {
		apiKey = os.Getenv("OPENAI_API_KEY")
	}
	enc, err := tokenize.Get(f.encoding)
	if err != nil {
		return usagef("replay: --encoding: %v", err)
	}
	builder, err := tokenize.NewBuilder(enc, tokenize.BuilderOptions{Seed: f.seed})
	if err != nil {
		return err
	}
	if f.output == "" {
		return usagef("replay: --output is empty")
	}
	if f.slo != "" {
		if _, err := analysis.ParseSLO(f.slo); err != nil {
			return usagef("replay: --slo: %v", err)
		}
	}

	// The trace: a file, or the bundled sample.
	openTrace := func() (*trace.Reader, error) {
		if f.trace == "" {
			return trace.OpenSample()
		}
		return trace.Open(f.trace)
	}
	src, err := openTrace()
	if err != nil {
		return err
	}
	defer src.Close()
	meta := replay.RunMeta{ToolVersion: version, API: string(api), Backend: string(backend),
		ShardIndex: shard.Index, ShardCount: shard.Count, SLO: f.slo, Concurrency: f.concurrency}
	meta.Host, _ = os.Hostname()
	speedup := f.speedup
	if f.trace == "" {
		meta.TraceFile, meta.TraceSHA256 = trace.SampleName, trace.SampleSHA256()
		if !fs.Changed("speedup") {
			speedup = trace.SampleSpeedup
		}
	} else {
		meta.TraceFile = filepath.Base(f.trace)
		if meta.TraceSHA256, err = fileSHA256(f.trace); err != nil {
			return err
		}
	}
	if speedup == 0 {
		speedup = 1
	}
	// The trace's span: needed for --rate, and shown by the progress display (elapsed vs
	// schedule); a first pass over arrivals, skipped for big traces when only progress
	// wants it.
	var traceSpan time.Duration
	const progressScanRows = 200_000
	if fs.Changed("rate") || (!f.quiet && f.concurrency == 0 && src.NumRows() <= progressScanRows) {
		// The rate is the whole trace's (every shard gets the same speedup).
		scan, err := openTrace()
		if err != nil {
			return err
		}
		lim := int64(0)
		if f.limit > 0 {
			lim = f.limit + f.warmup
		}
		n, span, err := replay.ScanSpan(scan, lim)
		scan.Close()
		if err != nil {
			return err
		}
		traceSpan = span
		if fs.Changed("rate") {
			if speedup, err = replay.SpeedupForRate(n, span, f.rate); err != nil {
				return usagef("replay: --%v", err)
			}
			meta.Rate = f.rate
		}
	}
	if f.concurrency > 0 {
		speedup = 0
	}
	meta.Speedup = speedup
	var schedule time.Duration // the run's schedule length, for progress
	if speedup > 0 && traceSpan > 0 {
		schedule = time.Duration(float64(traceSpan) / speedup)
		if f.duration > 0 && f.duration < schedule {
			schedule = f.duration
		}
	}

	// The endpoint: given, or the simulated engine in-process.
	var base *url.URL
	if f.endpoint == "" {
		cfg, err := sim.Profile(f.simProfile)
		if err != nil {
			return usagef("replay: --sim-profile: %v", err)
		}
		running, err := sim.Start(context.WithoutCancel(ctx), "127.0.0.1:0", cfg)
		if err != nil {
			return err
		}
		defer running.Close()
		fmt.Fprintf(stderr, "llmreplay: no --endpoint: started the simulated engine (profile %s) at %s\n", f.simProfile, running.BaseURL())
		meta.Simulated, meta.SimProfile = true, f.simProfile
		base, _ = replay.BaseURL(running.BaseURL())
	} else if base, err = replay.BaseURL(f.endpoint); err != nil {
		return usagef("replay: --%v", err)
	}
	meta.Endpoint = replay.SafeEndpoint(base)
	model := f.model
	if model == "" {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ids, err := replay.ListModels(lctx, base, apiKey, header, f.insecure)
		cancel()
		if err != nil {
			return fmt.Errorf("replay: no --model given and %w", err)
		}
		if len(ids) == 0 {
			return fmt.Errorf("replay: no --model given and %s/models lists none", meta.Endpoint)
		}
		model = ids[0]
	}
	meta.Model = model
	meta.Flags = behaviourFlags(fs)

	client, err := replay.NewClient(replay.ClientOptions{
		BaseURL: base, API: api, Backend: backend, Model: model, APIKey: apiKey, Header: header,
		Timeout: f.timeout, MaxInflight: max(f.maxInflight, f.concurrency), Insecure: f.insecure,
		CountTokens: enc.Count, TokenIDPrompts: tokenIDs, HTTPClient: f.httpClient,
	})
	if err != nil {
		return err
	}
	defer client.Close()
	meta.Flags["http-client"] = client.HTTPClientName() // what auto chose

	var source trace.Source = src
	var origin time.Duration
	if shard.Count > 1 {
		// Due times count from the whole trace's first arrival, not this shard's, so every
		// request is due at the same instant as in a single-process run.
		first, err := openTrace()
		if err != nil {
			return err
		}
		if first.Next() {
			origin = first.Request().Arrival
		}
		err = first.Err()
		first.Close()
		if err != nil {
			return err
		}
		source = trace.NewShardSource(src, shard)
	}
	blockTokens := src.Meta().BlockTokens
	var cal *tokenize.Calibration
	if f.calibrate && tokenIDs {
		fmt.Fprintln(stderr, "llmreplay: --calibrate: token-id prompts are counted exactly; nothing to calibrate")
	} else if f.calibrate {
		h := header.Clone()
		if apiKey != "" {
			h.Set("Authorization", "Bearer "+apiKey)
		}
		c, err := tokenize.Calibrate(ctx, tokenize.CalibrateOptions{BaseURL: base.String(), API: string(api), Model: model,
			HTTPClient: &http.Client{Transport: replay.NewTransport(8, f.insecure), Timeout: time.Minute}, Header: h, Builder: builder})
		if err != nil {
			return fmt.Errorf("replay: --calibrate: %w", err)
		}
		cal = &c
		fmt.Fprintf(stderr, "llmreplay: calibrated: %s\n", c)
		meta.Flags["calibration"] = c.String()
	}
	var ids []int32 // the prompter runs on the one goroutine that prepares requests
	prompter := replay.PrompterFunc(func(dst []byte, r *trace.Request) ([]byte, error) {
		if r.Prompt != "" && !tokenIDs {
			return append(dst, r.Prompt...), nil
		}
		spec := tokenize.PromptSpec{RequestID: r.ID, Tokens: int(r.PromptTokens)}
		if blockTokens > 0 {
			spec.Blocks, spec.BlockTokens = r.PrefixBlocks, blockTokens
		}
		if cal != nil {
			// The whole prompt is corrected; shared blocks keep their builder length, so
			// sharing stays exact and the tail absorbs the correction.
			spec.Tokens = cal.Target(spec.Tokens)
		}
		if !tokenIDs {
			return builder.AppendPrompt(dst, spec)
		}
		ids = ids[:0]
		if r.Prompt != "" {
			for _, id := range enc.Encode(r.Prompt) {
				ids = append(ids, int32(id))
			}
		} else {
			// A local error: the prompter runs on the preparer goroutine, so it must not
			// write doReplay's err while Run is under way.
			var perr error
			if ids, perr = builder.AppendTokenIDs(ids, spec, f.vocabSize); perr != nil {
				return dst, perr
			}
		}
		dst = append(dst, '[')
		for i, id := range ids {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(id), 10)
		}
		return append(dst, ']'), nil
	})

	// Stopping: main's signal handler cancels ctx at the first SIGINT/SIGTERM (the graceful
	// stop) and its hard context at the second; Run acts on both, this says so.
	defer context.AfterFunc(ctx, func() {
		fmt.Fprintf(stderr, "\nllmreplay: stopping: no more requests; waiting up to %v for those in flight (Ctrl-C again to cancel them)\n", f.grace)
	})()
	defer context.AfterFunc(replay.HardContext(ctx), func() {
		fmt.Fprintln(stderr, "\nllmreplay: canceling the requests in flight")
	})()

	prog := new(replay.Progress)
	progCtx, stopProg := context.WithCancel(context.Background())
	progDone := make(chan struct{})
	if !f.quiet {
		total := src.NumRows()
		if shard.Count > 1 {
			total = 0
		}
		if f.limit > 0 && (total == 0 || f.limit+f.warmup < total) {
			total = f.limit + f.warmup
		}
		tty := false
		if fd, ok := stderr.(interface{ Fd() uintptr }); ok {
			tty = term.IsTerminal(int(fd.Fd()))
		}
		go func() {
			defer close(progDone)
			replay.RenderProgress(progCtx, stderr, prog, replay.ProgressOptions{Terminal: tty, Interval: f.progressEvery, Total: total, Span: schedule})
		}()
	} else {
		close(progDone)
	}

	sum, err := replay.Run(ctx, replay.Options{
		Source: source, Client: client, Prompter: prompter,
		Speedup: speedup, Concurrency: f.concurrency, MaxInflight: f.maxInflight,
		Duration: f.duration, Limit: f.limit, Warmup: f.warmup, Grace: f.grace,
		Shard: int32(shard.Index), Prewarm: min(max(f.prewarm, 0), max(f.maxInflight, f.concurrency)), Output: f.output, KeepJournal: f.keepJournal,
		Meta: meta, MaxLateness: f.maxLateness, Progress: prog,
		Start: startAt, Origin: origin, HasOrigin: shard.Count > 1,
	})
	stopProg()
	<-progDone
	if err != nil {
		if sum != nil {
			sum.WriteText(stderr)
		}
		return err
	}
	fmt.Fprintf(stdout, "results: %s\n", f.output)
	if aerr := writeReport(ctx, f.output, stdout); aerr != nil {
		// The results file is written; only the report failed: say why, print the short summary.
		fmt.Fprintf(stderr, "llmreplay: replay: the full report failed (%v); short summary:\n", aerr)
		sum.WriteText(stdout)
	}
	if f.strict && sum.ClientLimited() {
		return &exitError{code: 3, err: fmt.Errorf("replay: client-limited: schedule lateness p99 %.3f ms > --max-lateness %v", sum.Lateness.P99, f.maxLateness)}
	}
	return nil
}

// writeReport prints the analysis text report of a results file (the run's own --slo and
// max-lateness come from its metadata).
func writeReport(ctx context.Context, path string, w io.Writer) error {
	d, err := analysis.Load(context.WithoutCancel(ctx), analysis.LoadOptions{AllowPartial: true}, path)
	if err != nil {
		return err
	}
	rep, err := analysis.Analyze(d, analysis.DefaultOptions())
	if err != nil {
		return err
	}
	return rep.WriteText(w)
}

// behaviourFlags lists every flag that changes what the run does, as given or defaulted;
// never the API key, and only the names of headers (their values may be credentials).
func behaviourFlags(fs *pflag.FlagSet) map[string]string {
	m := map[string]string{}
	fs.VisitAll(func(fl *pflag.Flag) {
		switch fl.Name {
		case "api-key", "quiet", "progress-interval", "help", "keep-journal":
			return
		case "header":
			hs, _ := fs.GetStringArray("header")
			names := make([]string, 0, len(hs))
			for _, h := range hs {
				names = append(names, headerName(h))
			}
			sort.Strings(names)
			m[fl.Name] = strings.Join(names, ",")
			return
		}
		m[fl.Name] = fl.Value.String()
	})
	return m
}

// headerName returns the name part of a 'Name: value' header, for messages.
func headerName(h string) string {
	k, _, _ := strings.Cut(h, ":")
	return strings.TrimSpace(k)
}

func fileSHA256(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("replay: %w", err)
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", fmt.Errorf("replay: hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// parseStartAt reads an instant as RFC 3339 (2026-12-02T15:00:00Z) or unix seconds
// (1796223600, with up to nine fraction digits, read exactly).
func parseStartAt(s string) (time.Time, error) {
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
