package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/media"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/wire"
)

func init() {
	register(&command{
		name:    "sim",
		summary: "serve the simulated continuous-batching engine (OpenAI, Anthropic Messages and Responses APIs, embeddings and rerank; no GPU)",
		run:     runSim,
	})
}

const simExamples = `  # The 8-GPU MoE profile on port 8000; point any OpenAI client at http://127.0.0.1:8000/v1
  llmreplay sim --addr 127.0.0.1:8000

  # A fast engine for tests, 10x real time, with 2% 503s and 1% mid-stream disconnects
  llmreplay sim --profile tiny --time-scale 10 --fault 503=0.02 --fault disconnect=0.01

  # Without automatic prefix caching, and with a per-request log (JSON lines, X-Request-Id)
  llmreplay sim --no-prefix-cache --request-log sim-requests.jsonl

  # The server's own record of each write, to split a client's TTFT error from the server's
  llmreplay sim --profile fixed --ttft 50ms --itl 10ms --request-log sim.jsonl --request-log-writes

  # Exact timing for measuring a client's own error: TTFT 200ms, ITL 20ms
  llmreplay sim --profile fixed --ttft 200ms --itl 20ms

  # A thinking model: the first 75% of every answer streams as reasoning, on every API
  # (/v1/chat/completions, /v1/messages, /v1/responses)
  llmreplay sim --profile tiny --reasoning-share 0.75

  # KV allocated as tokens are made (vLLM v1): under overload the cache runs full and
  # vllm:num_preemptions_total counts the requests preempted
  llmreplay sim --profile tiny --kv-admission on-demand --kv-cache-tokens 16384

  # A vision model: images count as LLaVA-1.5 counts them (576 tokens each), and its
  # vision encoder costs 5 ms an image (default: qwen2-vl's rule, the profile's encoder)
  llmreplay sim --profile tiny --image-rule llava-1.5 --vision-per-image 5ms

  # Override the model: twice the KV cache, batch cap 512; print the analytical limits and exit
  llmreplay sim --kv-cache-tokens 2000000 --max-batch 512 --max-batched-tokens 16384 --print-info

  # A custom profile from flags: write it as a file (no server), edit it, serve it
  llmreplay sim --profile tiny --max-batch 64 --kv-cache-tokens 131072 --save-profile mine.json
  llmreplay sim --profile-file mine.json --addr 127.0.0.1:8000

  # A fitted twin (llmreplay sim fit), faster than real time; flags still override the file
  llmreplay sim --profile-file fitted.json --time-scale 10

  # A built-in profile as a file, to read its parameters and reasoning
  llmreplay sim --profile moe-230b-8gpu --save-profile moe.json

  # An embedding model (0.6B, one GPU) serving /v1/embeddings and /rerank; a smaller
  # per-step budget moves the knee a sweep finds
  llmreplay sim --profile embed-0.6b-1gpu --pool-max-batched-tokens 8192

  # Try it
  curl -N http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \
    -d '{"prompt":"Hello","max_tokens":20,"stream":true,"stream_options":{"include_usage":true}}'
  curl -N http://127.0.0.1:8000/v1/messages -H 'Content-Type: application/json' \
    -d '{"model":"sim-moe-230b","max_tokens":20,"stream":true,"messages":[{"role":"user","content":"Hello"}]}'
  curl http://127.0.0.1:8000/v1/embeddings -H 'Content-Type: application/json' \
    -d '{"input":["Hello","world"],"dimensions":8}'
  curl http://127.0.0.1:8000/rerank -H 'Content-Type: application/json' \
    -d '{"query":"capital of France","documents":["Paris","Berlin"],"top_n":1}'
  curl http://127.0.0.1:8000/sim/info`

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "fit" {
		return runSimFit(ctx, args[1:], stdout, stderr) // simfit.go
	}
	fs := newFlagSet("sim", "llmreplay sim [--addr HOST:PORT] [--profile NAME | --profile-file FILE] [--fault KIND=RATE[:DUR]]... [model flags] [--save-profile FILE]", simExamples, stdout)
	addr := fs.String("addr", "127.0.0.1:8000", "address to listen on (use 127.0.0.1:0 for any free port)")
	profile := fs.String("profile", "moe-230b-8gpu", "parameter set: "+strings.Join(sim.Profiles(), ", "))
	profileFile := fs.String("profile-file", "", "serve the profile file FILE (docs/sim.md, Profile files: one sim fit or --save-profile wrote, or edited by hand) instead of a built-in --profile; the model flags still override it")
	saveProfile := fs.String("save-profile", "", "write the configuration (the profile or profile file with every model flag applied) to FILE as a profile file and exit without serving")
	printInfo := fs.Bool("print-info", false, "print the configuration and analytical limits (as /sim/info) and exit")
	noPrefix := fs.Bool("no-prefix-cache", false, "turn automatic prefix caching off (on by default, as in vLLM and SGLang)")
	requestLog := fs.String("request-log", "", "append one JSON line per generation request to FILE (with its X-Request-Id, and arrive_unix_ns/read_unix_ns/first_write_unix_ns: when the request reached the server's socket (the kernel's stamp), when the server's read returned, when it wrote the first token; the wall clock), written off the engine's path")
	requestLogWrites := fs.Bool("request-log-writes", false, "with --request-log: also log the wall-clock stamp and token count of every body write that carried tokens (write_unix_ns, write_tokens)")
	faults := fs.StringArray("fault", nil, "inject a fault by rate, repeatable: 429=R, 500=R, 503=R, disconnect=R, malformed=R, stall=R:DUR, slow-first-byte=R:DUR, stream-error=R (DUR in model time, default 1s)")

	// Every model parameter; applied over the profile only when given.
	var o sim.Config
	addSimModelFlags(fs, &o)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("sim: unexpected argument %q", fs.Arg(0))
	}
	src, label, err := simSource(fs, *profile, *profileFile)
	if err != nil {
		return err
	}
	cfg := src.Config
	applySimFlags(fs, &cfg, &o)
	if *noPrefix {
		if fs.Changed("prefix-block-tokens") {
			return usagef("sim: --prefix-block-tokens and --no-prefix-cache contradict each other")
		}
		cfg.PrefixCache = false
	}
	if *requestLogWrites && *requestLog == "" {
		return usagef("sim: --request-log-writes needs --request-log FILE")
	}
	cfg.RequestLog, cfg.RequestLogWrites = *requestLog, *requestLogWrites
	if (fs.Changed("ttft") || fs.Changed("itl")) && !cfg.Fixed {
		return usagef("sim: --ttft and --itl apply to --profile fixed only")
	}
	for _, f := range *faults {
		if err := sim.ParseFault(f, &cfg.Faults); err != nil {
			return usagef("sim: --fault: %v", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return usagef("%v", err)
	}
	if *saveProfile != "" {
		if err := saveSimProfile(fs, *saveProfile, src, label, cfg, stderr); err != nil || !*printInfo {
			return err
		}
	}
	if *printInfo {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sim.Analyze(cfg))
	}

	r, err := sim.Start(ctx, *addr, cfg)
	if err != nil {
		return err
	}
	printSimBanner(stderr, r, cfg, label)
	<-ctx.Done()
	fmt.Fprintln(stderr, "llmreplay sim: stopping")
	return r.Close()
}

// addSimModelFlags defines sim's model parameter flags on fs, into o.
func addSimModelFlags(fs *pflag.FlagSet, o *sim.Config) {
	fs.StringVar(&o.Model, "model", "", "served model name (default: the profile's)")
	fs.Float64Var(&o.TimeScale, "time-scale", 1, "run model time this many times faster than real time (10 = 10x faster)")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed for faults and natural output lengths")
	fs.IntVar(&o.MaxModelLen, "max-model-len", 0, "max prompt+output tokens per request")
	fs.DurationVar(&o.StepBase, "step-base", 0, "step time: fixed cost per step")
	fs.DurationVar(&o.PrefillPerToken, "prefill-per-token", 0, "step time: cost per prefill token")
	fs.DurationVar(&o.DecodePerSeq, "decode-per-seq", 0, "step time: cost per decoding sequence")
	fs.DurationVar(&o.ContextPerToken, "context-per-token", 0, "step time: cost per context token attended")
	fs.Float64Var(&o.AttentionPerPairNs, "attention-per-pair", 0, "step time: prefill attention, nanoseconds per pair of a prefilled token and a token before it (fractions allowed), e.g. --attention-per-pair 0.6")
	fs.DurationVar(&o.PerExpert, "per-expert", 0, "step time: cost per distinct MoE expert touched")
	fs.IntVar(&o.Experts, "experts", 0, "MoE experts per layer (0 = dense: no expert term)")
	fs.IntVar(&o.ExpertsPerToken, "experts-per-token", 0, "MoE experts routed per token (top-k)")
	fs.DurationVar(&o.RequestOverhead, "request-overhead", 0, "the server's time on each request before the engine queues it (parsing, template, tokenizing); it delays the first token and occupies no step, e.g. --request-overhead 8ms")
	fs.IntVar(&o.KVCacheTokens, "kv-cache-tokens", 0, "KV-cache capacity in tokens")
	fs.StringVar(&o.KVAdmission, "kv-admission", sim.KVReserve, "KV allocation: reserve (prompt + whole output at admission: never preempts) or on-demand (a token per step, as vLLM v1; the newest running request is preempted and recomputed when the cache is full), e.g. --kv-admission on-demand")
	fs.IntVar(&o.MaxBatchedTokens, "max-batched-tokens", 0, "per-step token budget (decodes + prefill chunks)")
	fs.IntVar(&o.MaxBatch, "max-batch", 0, "max running sequences")
	fs.IntVar(&o.RefContextTokens, "ref-context-tokens", 0, "per-sequence context for the analytical figures (and the input length of the pooling figures)")
	fs.IntVar(&o.EmbeddingDim, "embedding-dim", 0, "length of the vectors /v1/embeddings returns, e.g. --embedding-dim 4096")
	fs.IntVar(&o.PoolMaxBatchedTokens, "pool-max-batched-tokens", 0, "pooling engine (embeddings, rerank): per-step token budget (vLLM's max_num_batched_tokens for a pooling model)")
	fs.IntVar(&o.PoolMaxBatch, "pool-max-batch", 0, "pooling engine: max inputs running at once (vLLM's max_num_seqs)")
	fs.IntVar(&o.PrefixBlockTokens, "prefix-block-tokens", 16, "prefix cache block size in tokens (vLLM's default block size)")
	fs.DurationVar(&o.FixedTTFT, "ttft", 0, "fixed profile: time to first token")
	fs.DurationVar(&o.FixedITL, "itl", 0, "fixed profile: time between tokens")
	fs.IntVar(&o.EOSMeanTokens, "eos-mean", 0, "mean natural output length for requests without ignore_eos (0 = always max_tokens)")
	fs.IntVar(&o.DefaultMaxTokens, "default-max-tokens", 0, "max_tokens for completions that give none")
	fs.IntVar(&o.DefaultChatMaxTokens, "default-chat-max-tokens", 0, "max_tokens cap for chat requests that give none")
	fs.Float64Var(&o.ReasoningShare, "reasoning-share", 0, "share (0..1) of every answer's output tokens streamed first as reasoning (chat delta.reasoning, a Messages thinking block, a Responses reasoning item), e.g. --reasoning-share 0.75")
	fs.StringVar(&o.ImageRule, "image-rule", media.DefaultRule, "how many prompt tokens one image counts for: "+strings.Join(media.RuleNames(), ", ")+" (docs/replay.md, Images), e.g. --image-rule fixed:256")
	fs.DurationVar(&o.VisionPerImage, "vision-per-image", 0, "step time: vision encoder cost per image of a request admitted in the step (default: the profile's)")
	fs.DurationVar(&o.VisionPerImageToken, "vision-per-image-token", 0, "step time: vision encoder cost per image token of a request admitted in the step (default: the profile's)")
	fs.BoolVar(&o.ReasoningUsage, "reasoning-usage", false, "chat usage says completion_tokens_details.reasoning_tokens, as OpenAI's does (vLLM's does not)")
}

// applySimFlags sets over cfg (a profile) the model parameters the command line gave.
func applySimFlags(fs *pflag.FlagSet, cfg *sim.Config, o *sim.Config) {
	set := func(name string, dst, src any) {
		if !fs.Changed(name) {
			return
		}
		switch d := dst.(type) {
		case *string:
			*d = *src.(*string)
		case *int:
			*d = *src.(*int)
		case *uint64:
			*d = *src.(*uint64)
		case *float64:
			*d = *src.(*float64)
		case *bool:
			*d = *src.(*bool)
		case *time.Duration:
			*d = *src.(*time.Duration)
		}
	}
	set("model", &cfg.Model, &o.Model)
	set("time-scale", &cfg.TimeScale, &o.TimeScale)
	set("seed", &cfg.Seed, &o.Seed)
	set("max-model-len", &cfg.MaxModelLen, &o.MaxModelLen)
	set("step-base", &cfg.StepBase, &o.StepBase)
	set("prefill-per-token", &cfg.PrefillPerToken, &o.PrefillPerToken)
	set("decode-per-seq", &cfg.DecodePerSeq, &o.DecodePerSeq)
	set("context-per-token", &cfg.ContextPerToken, &o.ContextPerToken)
	set("attention-per-pair", &cfg.AttentionPerPairNs, &o.AttentionPerPairNs)
	set("per-expert", &cfg.PerExpert, &o.PerExpert)
	set("experts", &cfg.Experts, &o.Experts)
	set("experts-per-token", &cfg.ExpertsPerToken, &o.ExpertsPerToken)
	set("request-overhead", &cfg.RequestOverhead, &o.RequestOverhead)
	set("kv-cache-tokens", &cfg.KVCacheTokens, &o.KVCacheTokens)
	set("kv-admission", &cfg.KVAdmission, &o.KVAdmission)
	set("max-batched-tokens", &cfg.MaxBatchedTokens, &o.MaxBatchedTokens)
	set("max-batch", &cfg.MaxBatch, &o.MaxBatch)
	set("ref-context-tokens", &cfg.RefContextTokens, &o.RefContextTokens)
	set("embedding-dim", &cfg.EmbeddingDim, &o.EmbeddingDim)
	set("pool-max-batched-tokens", &cfg.PoolMaxBatchedTokens, &o.PoolMaxBatchedTokens)
	set("pool-max-batch", &cfg.PoolMaxBatch, &o.PoolMaxBatch)
	set("prefix-block-tokens", &cfg.PrefixBlockTokens, &o.PrefixBlockTokens)
	set("ttft", &cfg.FixedTTFT, &o.FixedTTFT)
	set("itl", &cfg.FixedITL, &o.FixedITL)
	set("eos-mean", &cfg.EOSMeanTokens, &o.EOSMeanTokens)
	set("default-max-tokens", &cfg.DefaultMaxTokens, &o.DefaultMaxTokens)
	set("default-chat-max-tokens", &cfg.DefaultChatMaxTokens, &o.DefaultChatMaxTokens)
	set("reasoning-share", &cfg.ReasoningShare, &o.ReasoningShare)
	set("reasoning-usage", &cfg.ReasoningUsage, &o.ReasoningUsage)
	set("image-rule", &cfg.ImageRule, &o.ImageRule)
	set("vision-per-image", &cfg.VisionPerImage, &o.VisionPerImage)
	set("vision-per-image-token", &cfg.VisionPerImageToken, &o.VisionPerImageToken)
}

// printSimBanner says on stderr what the running engine serves and models; label says
// which profile (simSource).
func printSimBanner(stderr io.Writer, r *sim.Running, cfg sim.Config, label string) {
	in := r.Info()
	fmt.Fprintf(stderr, "llmreplay sim: serving %s (%s) at %s\n", cfg.Model, label, r.BaseURL())
	if cfg.Fixed {
		fmt.Fprintf(stderr, "  fixed timing: TTFT %v, ITL %v (model time), no batching\n", cfg.FixedTTFT, cfg.FixedITL)
	} else {
		fmt.Fprintf(stderr, "  model time: %.1f tok/s single stream, %.0f tok/s max decode at batch %d (context %d tokens/seq); KV cache %d tokens\n",
			in.SingleStreamTokPerSec, in.MaxDecodeTokPerSec, in.MaxDecodeBatch, cfg.RefContextTokens, cfg.KVCacheTokens)
		if pc := in.PrefixCache; pc != nil && pc.Enabled {
			fmt.Fprintf(stderr, "  prefix cache: blocks of %d tokens, up to %d blocks in free KV space (--no-prefix-cache turns it off)\n", pc.BlockTokens, pc.CapacityBlocks)
		} else {
			fmt.Fprintln(stderr, "  prefix cache: off")
		}
		if p := in.Pooling; p != nil {
			fmt.Fprintf(stderr, "  embeddings, rerank: inputs of %d tokens take %.2f ms alone, at most %.0f tok/s (%.1f inputs/s) under load; %d tokens a step, %d inputs at once\n",
				p.RefInputTokens, p.SingleInputMs, p.MaxTokPerSec, p.MaxInputsPerSec, p.MaxBatchedTokens, p.MaxBatch)
		}
	}
	if cfg.RequestLog != "" {
		w := ""
		if cfg.RequestLogWrites {
			w = " (every write)"
		}
		fmt.Fprintf(stderr, "  request log: %s%s\n", cfg.RequestLog, w)
	}
	if cfg.ReasoningShare > 0 {
		fmt.Fprintf(stderr, "  reasoning: the first %.0f%% of every answer's tokens stream as reasoning (chat, messages, responses)\n", 100*cfg.ReasoningShare)
	}
	if cfg.TimeScale != 1 {
		fmt.Fprintf(stderr, "  time scale %gx: real-time rates are model rates x %g\n", cfg.TimeScale, cfg.TimeScale)
	}
	for _, w := range in.Warnings {
		fmt.Fprintf(stderr, "  warning: %s\n", w)
	}
	if cfg.Faults.Any() {
		b, _ := json.Marshal(cfg.Faults)
		fmt.Fprintf(stderr, "  faults: %s\n", b)
	}
	host := r.BaseURL()
	if u, err := wire.BaseURL(host); err == nil {
		host = wire.ServerRoot(u)
	}
	fmt.Fprintf(stderr, "  try GET %s/models, %s/sim/info, %s/metrics; Ctrl-C stops\n", r.BaseURL(), host, host)
}
