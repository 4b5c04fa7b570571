package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/media"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/spf13/pflag"
)

func init() {
	register(&command{name: "trace", summary: "import, synthesise, inspect and slice request traces", run: runTrace})
}

var traceSubcommands = map[string]struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}{
	"import": {"convert a public trace (Azure, BurstGPT, Mooncake, Bailian, ShareGPT, Copilot agent, CSV, JSONL) to trace/v1 Parquet", runTraceImport},
	"synth":  {"generate a synthetic trace (Poisson, gamma or constant arrivals; length distributions; sessions)", runTraceSynth},
	"info":   {"summarise a trace: rate, burstiness, length percentiles, prefix reuse, agent shape", runTraceInfo},
	"slice":  {"cut a window of a trace and rescale its time", runTraceSlice},
}

func runTrace(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := stdout
		if len(args) == 0 {
			w = stderr
		}
		fmt.Fprint(w, "Usage:\n  llmreplay trace SUBCOMMAND [flags]\n\nSubcommands:\n")
		names := make([]string, 0, len(traceSubcommands))
		for n := range traceSubcommands {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "  %-7s %s\n", n, traceSubcommands[n].summary)
		}
		fmt.Fprint(w, "\nRun 'llmreplay trace SUBCOMMAND --help' for its flags and examples.\nThe format: docs/trace-format.md.\n")
		if len(args) == 0 {
			return usagef("trace: no subcommand given")
		}
		return nil
	}
	sc, ok := traceSubcommands[args[0]]
	if !ok {
		return usagef("trace: unknown subcommand %q (want import, synth, info or slice)", args[0])
	}
	return sc.run(ctx, args[1:], stdout, stderr)
}

// positional returns the single positional argument.
func positional(args []string, what string) (string, error) {
	switch len(args) {
	case 1:
		return args[0], nil
	case 0:
		return "", usagef("missing %s", what)
	}
	return "", usagef("want one %s, got %d arguments: %s", what, len(args), strings.Join(args, " "))
}

// arrivalFlags are the flags that make an arrival process, shared by synth and ShareGPT import.
type arrivalFlags struct {
	process string
	rate    string
	cv      float64
	seed    uint64
}

func (a *arrivalFlags) spec(duration time.Duration) (trace.ArrivalSpec, error) {
	r0, r1, err := trace.ParseRate(a.rate)
	if err != nil {
		return trace.ArrivalSpec{}, usagef("--rate: %v", err)
	}
	spec := trace.ArrivalSpec{Process: a.process, Rate: r0, RateEnd: r1, CV: a.cv, Seed: a.seed}
	if r1 != 0 {
		spec.Ramp = duration
	}
	if spec.Process == trace.ArrivalGamma && spec.CV == 1 {
		// Gamma with CV 1 is exactly the exponential: say so in the metadata.
		spec.Process, spec.CV = trace.ArrivalPoisson, 0
	}
	if spec.Process != trace.ArrivalGamma {
		spec.CV = 0
	}
	if err := spec.Validate(); err != nil {
		return spec, usagef("%v", err)
	}
	return spec, nil
}

func runTraceImport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trace import", "llmreplay trace import --from FORMAT [flags] IN -o OUT.parquet",
		`  # Azure LLM inference trace (2023, 2024 or 2025 timestamps)
  llmreplay trace import --from azure AzureLLMInferenceTrace_code.csv -o azure-code.parquet
  # Azure's 2025 multimodal trace, gzipped as released: NumImages images a request, of
  # unknown size (0x0), inside ContextTokens
  llmreplay trace import --from azure-lmm AzureLMMInferenceTrace_multimodal.csv.gz -o azure-lmm.parquet
  # BurstGPT, keeping failed requests (0 response tokens) as 1-token requests
  llmreplay trace import --from burstgpt --keep-failed BurstGPT_1.csv -o burstgpt.parquet
  # Mooncake or Qwen/Bailian JSONL, with their prefix hash ids
  llmreplay trace import --from mooncake conversation_trace.jsonl -o mooncake.parquet
  # ShareGPT (no timestamps): Poisson arrivals at 5 req/s
  llmreplay trace import --from sharegpt --rate 5 --seed 1 sharegpt.json -o sharegpt.parquet
  # GitHub Copilot coding-agent sessions (a gzipped shard as released): one row per LLM
  # call, with the calls it waits for; always sorted in memory (~290 B a call)
  llmreplay trace import --from copilot-agent date=2026-06-01/shard-0000.jsonl.gz -o copilot.parquet
  # TraceLab's Claude Code / Codex rounds as agent calls (parents, tool and user gaps)
  llmreplay trace import --from tracelab syfi_coding_trace.jsonl.gz -o tracelab.parquet
  # A Weka agent trace (kv-cache-tester, AIPerf): subagents fork and join their parent
  llmreplay trace import --from weka trace_0001.json -o weka.parquet
  # Any CSV: name the columns; arrival in milliseconds
  llmreplay trace import --from csv --map arrival=ts,prompt_tokens=in,output_tokens=out --time-unit ms log.csv -o log.parquet`, stdout)
	from := fs.String("from", "", "input format: "+strings.Join(trace.ImportFormats, ", "))
	out := fs.StringP("output", "o", "", "output trace file (.parquet)")
	mapping := fs.String("map", "", "csv/jsonl: trace field=source column, e.g. arrival=ts,prompt_tokens=in,output_tokens=out[,session_id=,request_id=,model=,prompt=,tool_tokens=,images=,image_tokens=]")
	unit := fs.String("time-unit", "s", "csv/jsonl: unit of the arrival column: s, ms, us, ns or datetime")
	sortRows := fs.Bool("sort", false, "accept rows out of arrival order and sort them (holds all rows in memory, ~160 B each; copilot-agent always sorts)")
	keepFailed := fs.Bool("keep-failed", false, "burstgpt: keep failed requests (0 response tokens), lengths raised to 1")
	limit := fs.Int64("limit", 0, "stop after this many requests (0: all)")
	var af arrivalFlags
	fs.StringVar(&af.process, "arrival", trace.ArrivalPoisson, "sharegpt: arrival process: poisson, gamma or constant")
	fs.StringVar(&af.rate, "rate", "1", "sharegpt: arrival rate, requests/s")
	fs.Float64Var(&af.cv, "cv", 1, "sharegpt: gamma arrivals' inter-arrival coefficient of variation")
	fs.Uint64Var(&af.seed, "seed", 1, "sharegpt: random seed of the arrivals")
	asJSON := fs.Bool("json", false, "print the import report as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	in, err := positional(fs.Args(), "input file (or - for stdin)")
	if err != nil {
		return err
	}
	if *from == "" {
		return usagef("trace import: --from is required (%s)", strings.Join(trace.ImportFormats, ", "))
	}
	if *out == "" {
		return usagef("trace import: -o OUT.parquet is required")
	}
	opts := trace.ImportOptions{Format: *from, Sort: *sortRows, KeepFailed: *keepFailed, TimeUnit: *unit, Limit: *limit}
	if *mapping != "" {
		if opts.Map, err = trace.ParseMap(*mapping); err != nil {
			return usagef("--%v", err)
		}
	}
	if *from == trace.FormatShareGPT {
		if opts.Arrivals, err = af.spec(0); err != nil {
			return err
		}
	}
	start := time.Now()
	rep, err := trace.ImportFile(ctx, in, *out, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(stdout, "imported %s (%s) -> %s: %d rows read, %d written, span %.3f s, in %s\n",
		in, rep.Source, *out, rep.RowsRead, rep.RowsWritten, rep.Span.Seconds(), time.Since(start).Round(time.Millisecond))
	for _, g := range []struct {
		verb string
		m    map[string]int64
	}{{"dropped", rep.Dropped}, {"adjusted", rep.Adjusted}} {
		keys := make([]string, 0, len(g.m))
		for k := range g.m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(stdout, "  %s %d: %s\n", g.verb, g.m[k], k)
		}
	}
	return nil
}

const traceSynthExamples = `  # 10 minutes of Poisson arrivals at 20 req/s, lognormal prompts, clamped to 8k
  llmreplay trace synth --rate 20 --duration 10m --prompt-tokens lognormal:1500,1200 --max 8192 -o poisson.parquet
  # Bursty: gamma arrivals with inter-arrival CV 3
  llmreplay trace synth --arrival gamma --cv 3 --rate 20 --count 20000 -o bursty.parquet
  # A linear ramp from 10 to 100 req/s over 5 minutes (for finding the knee)
  llmreplay trace synth --rate 10:100 --duration 5m -o ramp.parquet
  # Multi-turn chat: 2..8 turns per conversation, 64 open conversations, shared prefixes
  llmreplay trace synth --rate 5 --duration 30m --turns uniform:2,8 --sessions 64 -o chat.parquet
  # Every request also sends 4,000 tokens of tool definitions (inside its prompt_tokens)
  llmreplay trace synth --rate 5 --count 1000 --tool-tokens 4000 -o tools.parquet
  # Multimodal: 0..4 images a request of 512..2048 x 768 pixels; each prompt is the drawn
  # text plus its images' tokens under the qwen2-vl rule (recorded in image_tokens)
  llmreplay trace synth --rate 5 --count 1000 --images uniform:0,4 --image-width uniform:512,2048 --image-height fixed:768 -o images.parquet
  # Lengths drawn from a real trace's columns
  llmreplay trace synth --rate 5 --count 5000 --prompt-tokens empirical:azure.parquet --output-tokens empirical:azure.parquet -o like-azure.parquet
  # Agent sessions: 100 tasks started at 0.5/s, 10..40 calls each on a 20k-token first
  # prompt, tool gaps of about 3 s, a user turn every 10 calls, and one call in five
  # forking 2..3 subagents of 2..6 calls that join; contexts end at 128k tokens
  llmreplay trace synth --agent-sessions 100 --rate 0.5 --agent-calls uniform:10,40 --agent-first-prompt lognormal:20000,8000 --agent-tool-gap lognormal:3000,4000 --agent-user-every 10 --agent-fork 0.2 --agent-branches uniform:2,3 --agent-branch-calls uniform:2,6 -o agents.parquet`

// agentFlags are trace synth's agent-session flags.
type agentFlags struct {
	sessions                                                   int64
	calls, first, app, toolGap, userGap, branches, branchCalls string
	userEvery                                                  int
	fork, prefill, decode                                      float64
}

func (f *agentFlags) register(fs *pflag.FlagSet) {
	fs.Int64Var(&f.sessions, "agent-sessions", 0, "agent sessions instead of requests: this many tasks, started at --rate per second by --arrival (--duration also stops their starts); every other --agent-* flag shapes them")
	fs.StringVar(&f.calls, "agent-calls", "uniform:10,40", "agent: the main agent's calls per session DIST (a join counts, subagents' calls do not)")
	fs.StringVar(&f.first, "agent-first-prompt", "lognormal:20000,8000", "agent: first prompt tokens DIST (system prompt and task)")
	fs.StringVar(&f.app, "agent-append", "lognormal:1500,2000", "agent: tokens a call appends to its parent's context DIST (the tools' output)")
	fs.StringVar(&f.toolGap, "agent-tool-gap", "lognormal:3000,4000", "agent: tool gap DIST in milliseconds, from a parent's end to the next call")
	fs.IntVar(&f.userEvery, "agent-user-every", 0, "agent: after every K main calls the gap is a user's turn (0: never)")
	fs.StringVar(&f.userGap, "agent-user-gap", "lognormal:30000,30000", "agent: user gap DIST in milliseconds")
	fs.Float64Var(&f.fork, "agent-fork", 0, "agent: probability that a main call forks subagents (0..1)")
	fs.StringVar(&f.branches, "agent-branches", "fixed:2", "agent: subagents per fork DIST")
	fs.StringVar(&f.branchCalls, "agent-branch-calls", "uniform:2,6", "agent: calls per subagent DIST")
	fs.Float64Var(&f.prefill, "agent-prefill-rate", 10000, "agent: modelled prefill tokens/s of the uncached prompt, for duration_ns (0 with --agent-decode-rate 0: no durations)")
	fs.Float64Var(&f.decode, "agent-decode-rate", 50, "agent: modelled decode tokens/s of the output, for duration_ns")
}

// spec returns the AgentSpec of the flags, or nil without --agent-sessions (then no other
// --agent-* flag may be given).
func (f *agentFlags) spec(fs *pflag.FlagSet) (*trace.AgentSpec, error) {
	if f.sessions == 0 {
		var set []string
		fs.Visit(func(fl *pflag.Flag) {
			if strings.HasPrefix(fl.Name, "agent-") {
				set = append(set, "--"+fl.Name)
			}
		})
		if len(set) > 0 {
			return nil, usagef("%s: only with --agent-sessions N", strings.Join(set, ", "))
		}
		return nil, nil
	}
	a := &trace.AgentSpec{Sessions: f.sessions, UserEvery: f.userEvery, Fork: f.fork, PrefillPerS: f.prefill, DecodePerS: f.decode}
	for _, d := range []struct {
		flag, val string
		dst       *trace.Dist
		ptr       **trace.Dist
	}{{"agent-calls", f.calls, &a.Calls, nil}, {"agent-first-prompt", f.first, &a.First, nil}, {"agent-append", f.app, &a.Append, nil},
		{"agent-tool-gap", f.toolGap, &a.ToolGapMS, nil}, {"agent-user-gap", f.userGap, nil, &a.UserGapMS},
		{"agent-branches", f.branches, nil, &a.Branches}, {"agent-branch-calls", f.branchCalls, nil, &a.BranchCalls}} {
		v, err := trace.ParseDist(d.val)
		if err != nil {
			return nil, usagef("--%s: %v", d.flag, err)
		}
		switch {
		case d.dst != nil:
			*d.dst = v
		case d.flag == "agent-user-gap" && f.userEvery > 0, d.flag != "agent-user-gap" && f.fork > 0:
			// Only the draws a session makes go into the spec (and llmreplay.generator).
			*d.ptr = &v
		}
	}
	return a, nil
}

func runTraceSynth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trace synth", "llmreplay trace synth --rate R (--duration D | --count N | --agent-sessions N) [flags] -o OUT.parquet",
		traceSynthExamples, stdout)
	var af arrivalFlags
	fs.StringVar(&af.process, "arrival", trace.ArrivalPoisson, "arrival process: poisson, gamma or constant")
	fs.StringVar(&af.rate, "rate", "", "requests per second (agent sessions started per second with --agent-sessions), or a linear ramp R0:R1 over --duration")
	fs.Float64Var(&af.cv, "cv", 1, "gamma: inter-arrival coefficient of variation (1 is Poisson; >1 bursty)")
	dur := fs.Duration("duration", 0, "trace length (arrivals before it)")
	count := fs.Int64("count", 0, "number of requests")
	prompt := fs.String("prompt-tokens", "lognormal:1024,768", "prompt (new user tokens per turn) length DIST, the text (with --images their tokens come on top): fixed:N uniform:A,B normal:M,SD lognormal:M,SD zipf:S,MAX empirical:FILE")
	output := fs.String("output-tokens", "lognormal:256,192", "output length DIST")
	lo := fs.Int32("min", 1, "clamp every drawn length to at least this")
	hi := fs.Int32("max", 32768, "clamp prompt and output lengths to at most this (a model's context)")
	pmax := fs.Int32("prompt-max", 0, "prompt clamp, overriding --max (with sessions, the context limit; with --agent-sessions 131072 unless this or --max is given)")
	omax := fs.Int32("output-max", 0, "output clamp, overriding --max")
	turns := fs.String("turns", "", "multi-turn sessions: turns per conversation as a DIST (e.g. uniform:2,8); empty: single requests")
	sessions := fs.Int("sessions", 32, "with --turns: conversations open at once")
	block := fs.Int("block-tokens", 16, "with --turns: tokens per prefix block")
	var agf agentFlags
	agf.register(fs)
	tools := fs.Int32("tool-tokens", 0, "every request sends tool definitions of N tokens (tool_tokens), counted in its prompt_tokens: a prompt is N plus the drawn tokens, the draw clamped so the whole stays within --prompt-max; later turns and agent calls send the tools once, before their history")
	var imf imageFlags
	imf.register(fs)
	model := fs.String("model", "", "model column value for every request")
	fs.Uint64Var(&af.seed, "seed", 1, "random seed: the same command and seed give a byte-identical file")
	out := fs.StringP("output", "o", "", "output trace file (.parquet)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if len(fs.Args()) != 0 {
		return usagef("trace synth: unexpected arguments %s", strings.Join(fs.Args(), " "))
	}
	if *out == "" {
		return usagef("trace synth: -o OUT.parquet is required")
	}
	if af.rate == "" {
		return usagef("trace synth: --rate is required")
	}
	as, err := af.spec(*dur)
	if err != nil {
		return err
	}
	spec := trace.SynthSpec{Arrivals: as, Count: *count, Duration: *dur, PromptMin: *lo, PromptMax: *hi, OutputMin: *lo, OutputMax: *hi, Model: *model, ToolTokens: *tools}
	if *pmax > 0 {
		spec.PromptMax = *pmax
	}
	if *omax > 0 {
		spec.OutputMax = *omax
	}
	if spec.Prompt, err = trace.ParseDist(*prompt); err != nil {
		return usagef("--prompt-tokens: %v", err)
	}
	if spec.Output, err = trace.ParseDist(*output); err != nil {
		return usagef("--output-tokens: %v", err)
	}
	if *turns != "" {
		d, err := trace.ParseDist(*turns)
		if err != nil {
			return usagef("--turns: %v", err)
		}
		if d.Kind == "empirical" {
			return usagef("--turns: empirical is for token lengths")
		}
		spec.Turns, spec.Sessions, spec.BlockTokens = &d, *sessions, *block
	}
	if spec.Agent, err = agf.spec(fs); err != nil {
		return err
	}
	if spec.Images, err = imf.spec(fs); err != nil {
		return err
	}
	if spec.Agent != nil {
		if fs.Changed("prompt-tokens") || fs.Changed("turns") {
			return usagef("trace synth: --agent-sessions makes agent calls, whose prompts are --agent-first-prompt and --agent-append: drop --prompt-tokens and --turns")
		}
		spec.Prompt = trace.Dist{}
		if !fs.Changed("prompt-max") && !fs.Changed("max") {
			spec.PromptMax = 131072 // an agent's context window, not a chat request's clamp
		}
	}
	if err := spec.Validate(); err != nil {
		return usagef("%v", err)
	}
	w, err := trace.Create(*out, trace.Meta{})
	if err != nil {
		return err
	}
	n, err := trace.Synth(ctx, spec, w)
	if err != nil {
		w.Abort()
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d requests to %s\n", n, *out)
	return nil
}

func runTraceInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trace info", "llmreplay trace info TRACE.parquet [--json]",
		`  llmreplay trace info azure-code.parquet
  llmreplay trace info --json mooncake.parquet | jq .reusable_block_share
  # an agent trace: calls per session, fan-out, depth, gaps, context lengths, cache share
  llmreplay trace info --json agents.parquet | jq .agent.shared_prefix_share`, stdout)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path, err := positional(fs.Args(), "trace file")
	if err != nil {
		return err
	}
	r, err := trace.Open(path)
	if err != nil {
		return err
	}
	defer r.Close()
	info, err := trace.ComputeInfo(ctx, r, r.Meta())
	if err != nil {
		return err
	}
	if *asJSON {
		// NaN (an empty trace's dispersion) is not JSON.
		for _, f := range []*float64{&info.Dispersion1s, &info.Dispersion60s} {
			if math.IsNaN(*f) {
				*f = 0
			}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(info)
	}
	return info.WriteText(stdout, path)
}

func runTraceSlice(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trace slice", "llmreplay trace slice TRACE.parquet [--start D] [--duration D] [--limit N] [--max-idle D] [--speedup X | --rate R] -o OUT.parquet",
		`  # the 10 minutes after the first 20, played 4x faster
  llmreplay trace slice azure.parquet --start 20m --duration 10m --speedup 4 -o window.parquet
  # the first 1000 requests, idle gaps capped at 5 s, rescaled to 50 req/s on average
  llmreplay trace slice azure.parquet --limit 1000 --max-idle 5s --rate 50 -o first1k.parquet`, stdout)
	var spec trace.SliceSpec
	fs.DurationVar(&spec.Start, "start", 0, "keep requests arriving at or after this offset")
	fs.DurationVar(&spec.Duration, "duration", 0, "keep requests arriving before start + this (0: to the end)")
	fs.Int64Var(&spec.Limit, "limit", 0, "keep at most this many requests (0: all)")
	fs.DurationVar(&spec.MaxIdle, "max-idle", 0, "cut every gap between arrivals longer than this to this (0: keep)")
	fs.Float64Var(&spec.Speedup, "speedup", 0, "divide arrival times by this")
	fs.Float64Var(&spec.Rate, "rate", 0, "rescale time so the mean rate is this many requests/s")
	out := fs.StringP("output", "o", "", "output trace file (.parquet)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	in, err := positional(fs.Args(), "trace file")
	if err != nil {
		return err
	}
	if *out == "" {
		return usagef("trace slice: -o OUT.parquet is required")
	}
	if fs.Changed("speedup") && spec.Speedup <= 0 {
		return usagef("--speedup must be > 0")
	}
	if fs.Changed("rate") && spec.Rate <= 0 {
		return usagef("--rate must be > 0")
	}
	if err := spec.Validate(); err != nil {
		return usagef("%v", err)
	}
	n, err := trace.SliceFile(ctx, in, *out, spec)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d requests to %s\n", n, *out)
	return nil
}

// defaultImageRule is trace synth's --image-rule default: the replay's and the sim's.
const defaultImageRule = media.DefaultRule

// imageFlags are trace synth's image flags.
type imageFlags struct {
	count, width, height, rule string
}

func (f *imageFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.count, "images", "", "images per request DIST, e.g. fixed:1, uniform:0,4, zipf:1.5,16 (a draw of 0 sends none; at most 65536); empty: no images. Single requests only, not with --turns or --agent-sessions")
	fs.StringVar(&f.width, "image-width", "fixed:1024", "with --images: each image's width in pixels DIST, clamped to 1..16384 (default a fixed mid-size square with --image-height, so every image counts the same tokens unless a spread is asked for)")
	fs.StringVar(&f.height, "image-height", "fixed:1024", "with --images: each image's height in pixels DIST, clamped to 1..16384")
	fs.StringVar(&f.rule, "image-rule", defaultImageRule, "with --images: the image rule (a model family's vision processor) counting each image's prompt tokens: a prompt is the --prompt-tokens text plus its images' tokens (recorded in image_tokens), the text clamped so the whole stays within --prompt-max; none: image_tokens null and prompt_tokens the text alone")
}

// spec returns the images spec, nil without --images.
func (f *imageFlags) spec(fs *pflag.FlagSet) (*trace.SynthImages, error) {
	if f.count == "" {
		for _, n := range []string{"image-width", "image-height", "image-rule"} {
			if fs.Changed(n) {
				return nil, usagef("--%s needs --images", n)
			}
		}
		return nil, nil
	}
	var im trace.SynthImages
	for _, d := range []struct {
		flag string
		text string
		dst  *trace.Dist
	}{{"images", f.count, &im.Count}, {"image-width", f.width, &im.Width}, {"image-height", f.height, &im.Height}} {
		v, err := trace.ParseDist(d.text)
		if err != nil {
			return nil, usagef("--%s: %v", d.flag, err)
		}
		if v.Kind == "empirical" {
			return nil, usagef("--%s: empirical is for token lengths", d.flag)
		}
		*d.dst = v
	}
	tokens, err := imageRuleTokens(f.rule)
	if err != nil {
		return nil, err
	}
	if tokens != nil {
		im.Rule, im.Tokens = f.rule, tokens
	}
	return &im, nil
}

// imageRuleTokens returns the token function of the named image rule (media.LookupRule);
// nil for "none".
func imageRuleTokens(name string) (func(width, height int) int, error) {
	if name == "none" {
		return nil, nil
	}
	r, err := media.LookupRule(name)
	if err != nil {
		return nil, usagef("--image-rule: %v", err)
	}
	return r.Tokens, nil
}
