package main

import (
	"github.com/llmreplay/llmreplay/wire"

	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/repeat"
	"github.com/llmreplay/llmreplay/media"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/images"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/trace"
)

func init() {
	register(&command{
		name:    "replay",
		summary: "replay a trace open-loop (or closed-loop) against an endpoint; write its results file",
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

  # A multi-tenant trace against vLLM serving LoRA adapters, sessions routed by a gateway header
  llmreplay replay --trace t.parquet --endpoint http://gw:8000/v1 --model-map tenant-a=lora-a,tenant-b=lora-b \
    --session-header x-session-affinity

  # A conversation trace replayed as conversations: each turn waits for the previous answer plus
  # a think time, and carries the real history (so the server's prefix cache sees what it would)
  llmreplay trace import --from mooncake conversation_trace.jsonl -o mooncake.parquet
  llmreplay replay --trace mooncake.parquet --endpoint http://127.0.0.1:8000/v1 --api chat \
    --sessions sequential --think-time lognormal:3000,2000 --on-turn-error end-session

  # An agent trace replayed as agents run: each call waits for the calls it depends on and the
  # tools' recorded time, its context grows by the actual answers (100k tokens, mostly cached)
  llmreplay trace import --from copilot-agent copilot.jsonl.gz -o agents.parquet
  llmreplay replay --trace agents.parquet --endpoint http://127.0.0.1:8000/v1 --api chat --gaps recorded

  # Three repeats, 10 s apart, each with fresh prompts: results.r1.parquet ... results.r3.parquet,
  # then the median and the spread across them (again later: llmreplay analyze results.r?.parquet)
  llmreplay replay --trace t.parquet --endpoint http://127.0.0.1:8000/v1 --repeat 3 --cooldown 10s

  # Sample vLLM's /metrics and a DCGM exporter every 500ms beside the requests (results.metrics.parquet)
  llmreplay replay --trace t.parquet --endpoint http://10.0.0.5:8000/v1 \
    --scrape http://10.0.0.5:8000/metrics --scrape http://10.0.0.5:9400/metrics --scrape-interval 500ms

  # A thinking model on the built-in simulated engine: 30% of every answer streams as reasoning
  llmreplay replay --api chat --sim-reasoning-share 0.3 --sim-reasoning-usage

  # Azure's multimodal trace against a Qwen2.5-VL server: each image a real JPEG, 448x448 where the
  # trace gives no size, a fifth of them repeats; --calibrate measures the server's count of each size
  llmreplay trace import --from azure-lmm AzureLMMInferenceTrace_multimodal.csv.gz -o lmm.parquet
  llmreplay replay --trace lmm.parquet --endpoint http://127.0.0.1:8000/v1 --api chat \
    --image-rule qwen2-vl --image-size 448x448 --image-reuse 0.2 --calibrate

  # An embeddings server: each row is one request of 8 inputs sharing its prompt tokens, as evenly
  # as can be (latency, inputs/s and tokens/s; no output)
  llmreplay replay --trace t.parquet --endpoint http://127.0.0.1:8000/v1 --api embeddings --inputs 8

  # A reranker (vLLM's /rerank): a 32-token query and 20 documents sharing the rest of each row
  llmreplay replay --trace t.parquet --endpoint http://127.0.0.1:8000/v1 --api rerank --inputs 20 --query-tokens 32

  # Fail (exit 3) if the replayer itself could not keep to the schedule
  llmreplay replay --trace t.parquet --endpoint http://127.0.0.1:8000 --strict --max-lateness 5ms`

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replay", "llmreplay replay [--trace T] [--endpoint URL] [--speedup X | --rate R | --concurrency N] [flags]", replayExamples, stdout)
	cfg := replay.DefaultConfig()
	addReplayFlags(fs, &cfg)
	var repeats int
	addRepeatFlag(fs, &repeats, "replay")
	cool := fs.Duration("cooldown", defaultCooldown, "with --repeat: pause between repeats")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("replay: unexpected argument %q", fs.Arg(0))
	}
	setGiven(fs, &cfg)
	if err := repeat.Check(repeats, &cfg); err != nil {
		return usagef("replay: %v", err)
	}
	if *cool < 0 {
		return usagef("replay: --cooldown %v: want a duration >= 0", *cool)
	}
	flags := behaviourFlags(fs)
	if repeats == 1 {
		// The run metadata of a run that is not repeated is what it was before --repeat.
		delete(flags, "repeat")
		delete(flags, "cooldown")
		return doReplay(ctx, cfg, flags, stdout, stderr)
	}
	return doReplayRepeats(ctx, cfg, flags, repeats, *cool, stdout, stderr)
}

// addReplayFlags defines replay's flags on fs, with cfg's values as defaults; sweep defines
// the same ones, so that every point of a sweep is a replay with exactly replay's options.
func addReplayFlags(fs *pflag.FlagSet, f *replay.Config) {
	fs.StringVarP(&f.Trace, "trace", "t", f.Trace, "trace file (trace/v1 Parquet); default: the bundled sample ("+trace.SampleName+")")
	fs.StringVarP(&f.Endpoint, "endpoint", "e", f.Endpoint, "OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (no path: /v1); default: start the simulated engine in-process")
	fs.StringVar(&f.API, "api", f.API, "API: completions, chat, messages (Anthropic's Messages API, POST /messages), responses (OpenAI's Responses API, POST /responses), embeddings (POST /embeddings, --inputs per request) or rerank (POST /rerank, a --query-tokens query and --inputs documents); the last two are not streamed")
	fs.IntVar(&f.Inputs, "inputs", f.Inputs, "--api embeddings: inputs per request; --api rerank: documents per request; their lengths add up to the row's prompt tokens (split as evenly as can be, the first ones a token longer)")
	fs.IntVar(&f.QueryTokens, "query-tokens", f.QueryTokens, "--api rerank: the query's tokens, taken from each row's prompt tokens before the documents share the rest")
	fs.StringVar(&f.Backend, "backend", f.Backend, "server kind, chooses the length-forcing fields: vllm, sglang, tgi, llamacpp, openai")
	fs.StringVar(&f.Model, "model", f.Model, "model name (default: the first of GET /v1/models)")
	fs.StringArrayVarP(&f.Headers, "header", "H", f.Headers, "extra request header 'Name: value', repeatable (values are never stored)")
	fs.StringVar(&f.SessionHeader, "session-header", f.SessionHeader, "session-affinity header sent with the trace's session id on every request that has one, for routers and gateways ('' = none); every request also carries X-Request-Id: RUNID-REQUESTID")
	fs.StringVar(&f.ModelMap, "model-map", f.ModelMap, "send the trace's model column as served models: TRACE=SERVED,... (e.g. gpt-4=llama-70b,gpt-3.5=my-lora); default: the column as is when the endpoint serves all its models, else --model")
	fs.StringVar(&f.APIKey, "api-key", f.APIKey, "API key sent as a bearer token (default: $LLMREPLAY_API_KEY, else $OPENAI_API_KEY); never printed or stored")
	fs.BoolVar(&f.Insecure, "insecure", f.Insecure, "skip TLS certificate verification")
	fs.StringVar(&f.HTTPClient, "http-client", f.HTTPClient, "HTTP client: raw (llmreplay's own HTTP/1.1 client, one read per streamed chunk; http:// on linux), net/http (Go's; https, proxies, HTTP/2); auto: raw for http:// without a proxy, else net/http")
	fs.DurationVar(&f.ReadBatch, "read-batch", f.ReadBatch, "raw client, open loop, 64 or more streams in flight: read the streams at most once per `D`, not at each chunk's arrival (less CPU per token; chunk times stay the kernel's arrival stamps, but a chunk that arrived within D before the next one of its stream is dated by that one); 0 = read every chunk as it arrives; at most 10ms")
	fs.Float64Var(&f.Speedup, "speedup", f.Speedup, "replay X times faster than recorded (default 1; the bundled sample: its own speedup)")
	fs.Float64Var(&f.Rate, "rate", f.Rate, "rescale arrivals to a mean of R requests/s (instead of --speedup)")
	fs.IntVar(&f.Concurrency, "concurrency", f.Concurrency, "closed loop: N workers, each sending the next request when its last ends (arrival times ignored)")
	fs.DurationVar(&f.RampUp, "ramp-up", f.RampUp, "closed loop only: start the --concurrency workers spread over D (worker i at i*D/N) instead of all at once")
	fs.StringVar(&f.Sessions, "sessions", f.Sessions, "conversations: dag (agents: a call is due when every call it waits for (parents) has ended plus its gap (--gaps); its prompt grows from its parent's context with the actual answer), sequential (turn k+1 is due at max(its trace time, turn k's end + --think-time)) or independent (every turn at its trace time); default: dag when the trace has parents, sequential when it has session_id, else independent; closed loop: a worker keeps each conversation it starts")
	fs.IntVar(&f.AgentSessions, "agent-sessions", f.AgentSessions, "agent sessions: replay the trace's first N sessions only, all started at once (N concurrent agents; a sweep's agents axis); 0: the whole trace on its own schedule")
	fs.StringVar(&f.Gaps, "gaps", f.Gaps, "agent sessions: how long a call waits after its last parent's end: recorded (the trace's gap: a tool takes as long as it took), scaled (the gap divided by the speedup) or none; default recorded")
	fs.StringVar(&f.History, "history", f.History, "sequential sessions: actual (turn k+1's prompt = what turn k sent + what it received + new text up to the trace's length; text prompts) or synthetic (the prompt builder's text alone); default: actual (synthetic with --prompt-format token-ids)")
	fs.StringVar(&f.ThinkTime, "think-time", f.ThinkTime, "sequential sessions: a user's think time between an answer and the next turn: 0, a duration (3s), or a DIST of milliseconds (lognormal:3000,2000), drawn in trace order from --seed")
	fs.StringVar(&f.OnTurnError, "on-turn-error", f.OnTurnError, "sequential and agent sessions, after a failed or dropped turn: continue (the next turn's history holds no answer) or end-session (the session's remaining turns are recorded dropped, not sent)")
	fs.IntVar(&f.Prewarm, "prewarm", f.Prewarm, "open N keep-alive connections (GET /v1/models) before the run, so early requests do not pay connection set-up in their lateness and TTFT (closed loop: at least min(--concurrency, --max-inflight))")
	fs.IntVar(&f.MaxInflight, "max-inflight", f.MaxInflight, "open loop: a request due while N are in flight is recorded as dropped")
	fs.DurationVar(&f.Timeout, "timeout", f.Timeout, "per-request timeout, from send to the end of the stream (0 = none)")
	fs.DurationVar(&f.Duration, "duration", f.Duration, "replay only requests due within this time (closed loop: sent within it)")
	fs.Int64Var(&f.Limit, "limit", f.Limit, "replay at most N requests (after warm-up)")
	fs.Int64Var(&f.Warmup, "warmup", f.Warmup, "send the first N requests on schedule without recording them")
	fs.DurationVar(&f.Grace, "grace", f.Grace, "after Ctrl-C, SIGTERM or a fatal error, how long requests in flight may finish before they are canceled (a second Ctrl-C cancels them at once)")
	fs.StringVar(&f.SLO, "slo", f.SLO, "SLOs stored with the results for analyze, e.g. ttft=2s,tpot=100ms (ttfa=, answer_tpot= for a reasoning model)")
	fs.DurationVar(&f.MaxLateness, "max-lateness", f.MaxLateness, "schedule lateness p99 above which the run is client-limited (closed loop: of the steady state after the first wave)")
	fs.BoolVar(&f.Strict, "strict", f.Strict, "exit with status 3 when the run is client-limited")
	fs.StringVarP(&f.Output, "output", "o", f.Output, "results file (Parquet; default: results-<start, UTC>.parquet, new for every run); its journal is written beside it while the run goes")
	fs.BoolVar(&f.Force, "force", f.Force, "replace an existing -o file (and discard an unfinished earlier run's journal beside it); without it a run never replaces another")
	fs.BoolVar(&f.KeepJournal, "keep-journal", f.KeepJournal, "keep the journal (OUTPUT.journal) after the results file is written")
	fs.StringVar(&f.Shard, "shard", f.Shard, "send only shard i of N of the trace (by session, else request id); see docs/scaling-out.md")
	fs.StringVar(&f.StartAt, "start-at", f.StartAt, "start the run at this wall-clock instant (RFC 3339 or unix seconds), the same for every shard of one run")
	fs.StringVar(&f.ImageRule, "image-rule", media.DefaultRule, "traces with images: how many prompt tokens the server counts one image for, by model family: "+strings.Join(media.RuleNames(), ", ")+" (docs/replay.md, Images); the prompt's text is prompt_tokens less the images' tokens")
	fs.StringVar(&f.ImageFormat, "image-format", "jpeg", "traces with images: send them as jpeg (a photo's bytes) or png")
	fs.StringVar(&f.ImageSize, "image-size", images.DefaultSize, "traces with images: the size WIDTHxHEIGHT of an image the trace gives no size for (the Azure multimodal trace gives counts only)")
	fs.Float64Var(&f.ImageReuse, "image-reuse", f.ImageReuse, "traces with images: the share (0..1) of images that repeat one already sent of the same size (drawn by --seed), to exercise the engine's multimodal cache; 0: every image distinct")
	fs.BoolVar(&f.DropImages, "drop-images", f.DropImages, "traces with images: send none; every prompt token goes as text (for an API or a model without images)")
	fs.StringVar(&f.SimProfile, "sim-profile", f.SimProfile, "profile of the in-process simulated engine (no --endpoint): a built-in ("+strings.Join(sim.Profiles(), ", ")+") or the path of a profile file (docs/sim.md, Profile files), e.g. --sim-profile fitted.json; the run metadata records the file's name and SHA-256")
	fs.Float64Var(&f.SimReasoningShare, "sim-reasoning-share", f.SimReasoningShare, "in-process simulated engine (no --endpoint): share (0..1) of every answer's output tokens streamed first as reasoning (chat, messages, responses), e.g. --api chat --sim-reasoning-share 0.3; refused with --endpoint (a separate sim: llmreplay sim --reasoning-share)")
	fs.BoolVar(&f.SimReasoningUsage, "sim-reasoning-usage", f.SimReasoningUsage, "in-process simulated engine: chat's usage says completion_tokens_details.reasoning_tokens, as OpenAI's does (vLLM's does not); refused with --endpoint")
	fs.StringVar(&f.PromptFormat, "prompt-format", f.PromptFormat, "prompts as text, or as token-ids (completions API; vLLM and SGLang accept them, no tokenizer drift); auto: token-ids for the in-process simulated engine, else text")
	fs.IntVar(&f.VocabSize, "vocab-size", f.VocabSize, "token-id prompts: ids stay below this (the model's vocabulary; the default is cl100k_base's)")
	fs.BoolVar(&f.Calibrate, "calibrate", f.Calibrate, "before the run, learn how the server counts the builder's text (its /tokenize, else usage.prompt_tokens of probes) and correct prompt lengths so the server counts the trace's (with conversations and agents, its template per request and per earlier message too; with tool_tokens, what a tool costs; with images, what the server counts an image of each frequent size); text prompts only")
	fs.Float64Var(&f.CalibrateMaxError, "calibrate-max-error", f.CalibrateMaxError, "with --calibrate: the largest held-out relative error the fit may have (0.05 = 5%; a real tokenizer leaves well under 1%); above it the run stops before any request, with the probes' counts and what to do (a server that cuts prompts to its context shows tens of percent)")
	fs.StringVar(&f.Encoding, "encoding", f.Encoding, "tokenizer for building prompts and counting output when the server reports no usage")
	fs.Uint64Var(&f.Seed, "seed", f.Seed, "prompt text family (change it so a server's prefix cache cannot reuse an earlier run's prompts)")
	fs.StringArrayVar(&f.Scrape, "scrape", f.Scrape, "sample this Prometheus endpoint during the run into OUTPUT.metrics.parquet, repeatable (e.g. --scrape http://10.0.0.5:9400/metrics for DCGM); 'none' turns it off; default: the endpoint's server root /metrics when it answers there")
	fs.DurationVar(&f.ScrapeInterval, "scrape-interval", f.ScrapeInterval, "period of --scrape sampling on the run clock, e.g. 500ms (each scrape times out at 80% of it)")
	fs.BoolVarP(&f.Quiet, "quiet", "q", f.Quiet, "no progress on stderr")
	fs.DurationVar(&f.ProgressInterval, "progress-interval", f.ProgressInterval, "period of the plain progress lines when stderr is not a terminal")
}

// setGiven records which load flags the command line gave (a given zero is an error, an
// absent one a default), and takes the API key from the environment when no flag gave it.
func setGiven(fs *pflag.FlagSet, cfg *replay.Config) {
	cfg.SpeedupSet, cfg.RateSet, cfg.ConcurrencySet = fs.Changed("speedup"), fs.Changed("rate"), fs.Changed("concurrency")
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv("LLMREPLAY_API_KEY")
	}
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv("OPENAI_API_KEY")
	}
}

// doReplay runs one replay of cfg, prints its report and decides --strict. flags is the
// run metadata's flag map (behaviourFlags of the command line).
func doReplay(ctx context.Context, cfg replay.Config, flags map[string]string, stdout, stderr io.Writer) error {
	_, err := doReplayRepeat(ctx, cfg, flags, repeatOf{}, stdout, stderr)
	return err
}

// doReplayRepeat is doReplay for repeat ro of a repeated run (the zero repeatOf: a run
// that is not repeated); it returns the run id, once the run started.
func doReplayRepeat(ctx context.Context, cfg replay.Config, flags map[string]string, ro repeatOf, stdout, stderr io.Writer) (runID string, _ error) {
	// Flag checks first: nothing is started for a bad command line.
	if err := checkReplayConfig(&cfg); err != nil {
		return "", err
	}
	engine := &inProcessSim{rc: cfg}
	sess, err := replay.Prepare(ctx, cfg, replay.Env{Log: stderr, ToolVersion: version, Flags: flags, StartSim: engine.start})
	if err != nil {
		if replay.IsConfigError(err) {
			return "", usagef("replay: %v", err)
		}
		return "", err
	}
	defer sess.Close()
	engine.stamp(&sess.Options.Meta)
	out := sess.Output
	fmt.Fprintf(stderr, "llmreplay: results will be written to %s\n", out)
	if ro.count > 0 {
		m := &sess.Options.Meta
		m.Repeat, m.RepeatCount, m.RepeatGroup = ro.index, ro.count, ro.group
	}
	sum, err := runSession(ctx, sess, &cfg, stderr)
	if sum != nil {
		runID = sum.Run.RunID
		for _, n := range sum.ScrapeNotes() {
			fmt.Fprintf(stderr, "llmreplay: %s\n", n)
		}
	}
	if err != nil {
		if sum != nil {
			sum.WriteText(stderr)
			strictCheck(stderr, nil, sum, false) // the client-limited warning, by the report's rule
		}
		return runID, err
	}
	fmt.Fprintf(stdout, "results: %s\n", out)
	if sum.Run.MetricsFile != "" {
		fmt.Fprintf(stdout, "metrics: %s\n", results.MetricsPath(out))
	}
	if n := sum.HistoryNote(); n != "" {
		fmt.Fprintf(stdout, "llmreplay: %s\n", n)
	}
	rep, aerr := writeReport(ctx, out, stdout)
	if aerr != nil {
		// The results file is written; only the report failed: say why, print the short summary.
		fmt.Fprintf(stderr, "llmreplay: replay: the full report failed (%v); short summary:\n", aerr)
		sum.WriteText(stdout)
	}
	return runID, strictCheck(stdout, rep, sum, cfg.Strict)
}

// checkReplayConfig validates cfg, with what only cmd can check (replayConfigProblem), and
// makes its errors usage errors.
func checkReplayConfig(cfg *replay.Config) error {
	if err := replayConfigProblem(cfg); err != nil {
		return usagef("replay: %v", err)
	}
	return nil
}

// replayConfigProblem returns what is wrong with cfg, in the words of the flags: its
// Validate's finding, or what only cmd can check (analysis parses --slo; sim knows the
// profiles).
func replayConfigProblem(cfg *replay.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.SLO != "" {
		if _, err := analysis.ParseSLO(cfg.SLO); err != nil {
			return fmt.Errorf("--slo: %w", err)
		}
	}
	if cfg.Endpoint == "" {
		if _, _, err := sim.LoadProfile(cfg.SimProfile); err != nil {
			return fmt.Errorf("--sim-profile: %w", err)
		}
	}
	return nil
}

// inProcessSim starts the simulated engine for a replay of rc with no --endpoint: the
// profile --sim-profile names (a built-in, or a profile file) with rc's --sim-* options.
// After start, name and sum say which profile file served the run ("" for a built-in).
type inProcessSim struct {
	rc        replay.Config
	name, sum string
}

// start is replay.Env.StartSim.
func (s *inProcessSim) start(ctx context.Context, profile string) (string, func(), error) {
	p, sum, err := sim.LoadProfile(profile)
	if err != nil {
		return "", nil, fmt.Errorf("replay: --sim-profile: %w", err)
	}
	cfg := p.Config
	// Given, the --sim-* options override; not given, a profile file's own reasoning
	// stands (the built-ins have none, so for them this is the flags' value either way).
	if s.rc.SimReasoningShare > 0 {
		cfg.ReasoningShare = s.rc.SimReasoningShare
	}
	cfg.ReasoningUsage = cfg.ReasoningUsage || s.rc.SimReasoningUsage
	cfg.ImageRule = s.rc.ImageRule // the engine counts images as the replay expects
	running, err := sim.Start(context.WithoutCancel(ctx), "127.0.0.1:0", cfg)
	if err != nil {
		return "", nil, err
	}
	if sum != "" {
		s.name, s.sum = p.Name, sum
	}
	return running.BaseURL(), func() { running.Close() }, nil
}

// stamp records in the run metadata the profile file that served the run, if one did.
func (s *inProcessSim) stamp(m *results.RunMeta) {
	m.SimProfileName, m.SimProfileSHA256 = s.name, s.sum
}

// runSession runs a prepared replay with the progress display. Stopping: main's signal
// handler cancels ctx at the first SIGINT/SIGTERM (the graceful stop) and its hard context
// at the second; Run acts on both, and this says so.
func runSession(ctx context.Context, sess *replay.Session, cfg *replay.Config, stderr io.Writer) (*replay.Summary, error) {
	defer afterFunc(ctx, func() {
		fmt.Fprintf(stderr, "\nllmreplay: stopping: no more requests; waiting up to %v for those in flight (Ctrl-C again to cancel them)\n", cfg.Grace)
	})()
	defer afterFunc(replay.HardContext(ctx), func() {
		fmt.Fprintln(stderr, "\nllmreplay: canceling the requests in flight")
	})()

	prog := new(replay.Progress)
	stopProg := startProgress(sess, cfg, prog, stderr)
	opts := sess.Options
	opts.Progress = prog
	sum, err := replay.Run(ctx, opts)
	stopProg()
	return sum, err
}

// afterFunc is context.AfterFunc whose stop also waits for f when f has started, so that
// a stop message is written before the caller goes on to write anything after it.
func afterFunc(ctx context.Context, f func()) (stop func()) {
	done := make(chan struct{})
	stopF := context.AfterFunc(ctx, func() {
		defer close(done)
		f()
	})
	return func() {
		if !stopF() {
			<-done
		}
	}
}

// startProgress renders progress on stderr until the returned function is called (which
// waits for the last line), unless --quiet.
func startProgress(sess *replay.Session, cfg *replay.Config, prog *replay.Progress, stderr io.Writer) (stop func()) {
	if cfg.Quiet {
		return func() {}
	}
	progCtx, stopProg := context.WithCancel(context.Background())
	progDone := make(chan struct{})
	tty := false
	if fd, ok := stderr.(interface{ Fd() uintptr }); ok {
		tty = term.IsTerminal(int(fd.Fd()))
	}
	go func() {
		defer close(progDone)
		replay.RenderProgress(progCtx, stderr, prog, replay.ProgressOptions{Terminal: tty, Interval: cfg.ProgressInterval, Total: sess.ProgressTotal, Span: sess.Schedule, Inputs: sess.Options.Inputs})
	}()
	return func() {
		stopProg()
		<-progDone
	}
}

// writeReport prints the analysis text report of a results file (the run's own --slo and
// max-lateness come from its metadata) and returns it.
func writeReport(ctx context.Context, path string, w io.Writer) (*analysis.Report, error) {
	d, err := analysis.Load(context.WithoutCancel(ctx), decode.LoadOptions{AllowPartial: true}, path)
	if err != nil {
		return nil, err
	}
	rep, err := analysis.Analyze(d, analysis.DefaultOptions())
	if err != nil {
		return nil, err
	}
	return rep, rep.WriteText(w)
}

// behaviourFlags lists every flag that changes what the run does, as given or defaulted;
// never the API key, only the names of headers (their values may be credentials), and the
// endpoint in its safe form (wire.SafeURL: no password).
func behaviourFlags(fs *pflag.FlagSet) map[string]string {
	m := map[string]string{}
	fs.VisitAll(func(fl *pflag.Flag) {
		switch fl.Name {
		case "api-key", "quiet", "progress-interval", "help", "keep-journal":
			return
		case "header":
			hs, _ := fs.GetStringArray("header")
			m[fl.Name] = replay.SafeHeaderNames(hs)
			return
		case "endpoint":
			m[fl.Name] = wire.SafeURL(fl.Value.String())
			return
		case "scrape":
			ss, _ := fs.GetStringArray("scrape")
			for i := range ss {
				ss[i] = wire.SafeURL(ss[i])
			}
			m[fl.Name] = strings.Join(ss, ",")
			return
		}
		m[fl.Name] = fl.Value.String()
	})
	return m
}
