//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/internal/cputime"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/trace"
)

const (
	pathDirect = "direct"
	pathProxy  = "proxy"
	model      = "model-a" // the first model vllmtest's server lists
	// proxyStop bounds the proxy's exit after SIGTERM: it writes its files then.
	proxyStop = time.Minute
)

// bench holds what every run shares.
type bench struct {
	c        *config
	dir      string
	upstream *child
	log      io.Writer
	measured string // the measured runs' trace: the same arrivals in every run
	warm     string // the warm-up's trace ("" with --warmup 0)
}

// pairs runs c.Pairs pairs, direct and through the proxy, the first of a pair alternating.
func (b *bench) pairs(ctx context.Context) ([]runResult, error) {
	var err error
	if b.measured, err = b.writeTrace("measured.parquet", b.c.Duration, b.c.Seed); err != nil {
		return nil, err
	}
	if b.c.Warmup > 0 {
		if b.warm, err = b.writeTrace("warmup.parquet", b.c.Warmup, b.c.Seed+1); err != nil {
			return nil, err
		}
	}
	var runs []runResult
	for i := 0; i < b.c.Pairs; i++ {
		order := []string{pathDirect, pathProxy}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, p := range order {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			r, err := b.once(ctx, i, p)
			if err != nil {
				return nil, fmt.Errorf("pair %d, %s: %w", i+1, p, err)
			}
			fmt.Fprintf(b.log, "recordbench: pair %d/%d %-6s: %d/%d ok, TTFT p50 %.3f p99 %.3f ms, lateness p99 %.3f ms\n",
				i+1, b.c.Pairs, p, r.OK, r.Requests, r.TTFTP50, r.TTFTP99, r.LatenessP99)
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// writeTrace writes a Poisson trace of d at the offered rate, every request of the same
// prompt and output length.
func (b *bench) writeTrace(name string, d time.Duration, seed uint64) (string, error) {
	path := filepath.Join(b.dir, name)
	prompt, err1 := trace.ParseDist(fmt.Sprintf("fixed:%d", b.c.PromptTokens))
	output, err2 := trace.ParseDist(fmt.Sprintf("fixed:%d", b.c.OutputTokens))
	if err1 != nil || err2 != nil {
		return "", fmt.Errorf("lengths: %v %v", err1, err2)
	}
	spec := trace.SynthSpec{
		Arrivals: trace.ArrivalSpec{Process: trace.ArrivalPoisson, Rate: b.c.Rate, Seed: seed},
		Duration: d, Prompt: prompt, Output: output,
		PromptMin: int32(b.c.PromptTokens), PromptMax: int32(b.c.PromptTokens),
		OutputMin: int32(b.c.OutputTokens), OutputMax: int32(b.c.OutputTokens),
	}
	w, err := trace.Create(path, trace.Meta{Source: "synth"})
	if err != nil {
		return "", err
	}
	if _, err := trace.Synth(context.Background(), spec, w); err != nil {
		w.Abort()
		return "", err
	}
	return path, w.Close()
}

// proxyArgv is the proxy's command line (the CLI contract of `llmreplay record`).
func (b *bench) proxyArgv(listen, out string) []string {
	argv := []string{b.c.LLMReplay, "record", "--listen", listen, "--upstream", "http://" + b.upstream.addr, "-o", out}
	return append(argv, strings.Fields(b.c.ProxyArgs)...)
}

// once is one run: the warm-up, then the measured replay, on one path. A proxy run starts
// its proxy first and stops it after, by SIGTERM.
func (b *bench) once(ctx context.Context, pair int, path string) (runResult, error) {
	r := runResult{Pair: pair + 1, Path: path}
	endpoint := "http://" + b.upstream.addr + "/v1"
	var px *child
	out := filepath.Join(b.dir, fmt.Sprintf("pair%d-%s", pair+1, path))
	if err := os.Mkdir(out, 0o755); err != nil {
		return r, err
	}
	if path == pathProxy {
		listen, err := freePort()
		if err != nil {
			return r, err
		}
		rec := filepath.Join(out, "recording")
		argv := b.proxyArgv(listen, rec)
		if px, err = startChild("the proxy ("+strings.Join(argv, " ")+")", command(b.c.ProxyCPUs, argv), 30*time.Second); err != nil {
			return r, err
		}
		defer func() {
			if px != nil {
				px.kill()
			}
		}()
		endpoint = "http://" + px.addr + "/v1"
		r.ProxyCPUsAllowed = cpusAllowed(strconv.Itoa(px.cmd.Process.Pid))
	}
	var forwarded int64
	if b.warm != "" {
		sum, _, err := replayOnce(ctx, endpoint, b.warm, filepath.Join(out, "warmup-results.parquet"))
		if err != nil {
			return r, fmt.Errorf("warm-up: %w", err)
		}
		forwarded += int64(sum.Lateness.N)
		r.WarmupOK, r.WarmupRequests = int(sum.ByStatus[results.StatusOK]), int(sum.Requests)
	}
	var up0, px0 time.Duration
	up0 = b.upstream.cpu()
	if px != nil {
		px0 = px.cpu()
	}
	resPath := filepath.Join(out, "results.parquet")
	sum, cpu, err := replayOnce(ctx, endpoint, b.measured, resPath)
	if err != nil {
		return r, err
	}
	forwarded += int64(sum.Lateness.N)
	r.fill(sum, cpu, b.upstream.cpu()-up0)
	if r.OK < r.Requests {
		r.NotOK = notOK(resPath, 5)
	}
	if px == nil {
		return r, nil
	}
	r.ProxyCPU = int64(px.cpu() - px0)
	err = px.stop(proxyStop)
	life, rss := px.usage()
	r.ProxyLifeCPU, r.ProxyMaxRSS = int64(life), rss
	px = nil
	if err != nil {
		return r, err
	}
	if b.c.CheckRecording {
		r.Recording = checkRecording(filepath.Join(out, "recording"), forwarded)
	}
	return r, nil
}

// replayOnce replays the trace at its own times against endpoint with the code `llmreplay
// replay` runs (replay.Prepare, then replay.Run: text prompts, the raw client on Linux)
// and returns its summary and the CPU this process spent in Run: the replayer's, since the
// upstream and the proxy are processes of their own.
func replayOnce(ctx context.Context, endpoint, tracePath, out string) (*replay.Summary, time.Duration, error) {
	cfg := replay.DefaultConfig()
	cfg.Trace, cfg.Endpoint, cfg.Model, cfg.PromptFormat = tracePath, endpoint, model, "text"
	cfg.Speedup, cfg.SpeedupSet = 1, true
	// A request the replayer cannot send is a dropped record, never a silent delay: the
	// bound is far above the ~1,000 streams a run keeps in flight, so a drop says the
	// proxy held streams far longer than the upstream did.
	cfg.Timeout, cfg.MaxInflight, cfg.Grace = time.Minute, 1<<14, time.Second
	cfg.Output, cfg.Force, cfg.Quiet = out, true, true // the benchmark owns the folder
	cfg.Scrape = []string{"none"}                      // the upstream has no /metrics
	sess, err := replay.Prepare(ctx, cfg, replay.Env{ToolVersion: "recordbench"})
	if err != nil {
		return nil, 0, err
	}
	defer sess.Close()
	cpu0 := cputime.Process()
	sum, err := replay.Run(ctx, sess.Options)
	cpu := cputime.Process() - cpu0
	if err != nil {
		return nil, 0, err
	}
	return sum, cpu, nil
}

// notOK says why the first n requests of a results file that were not ok were not.
func notOK(path string, n int) []string {
	res, _, err := results.ReadFile(path)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v", path, err)}
	}
	var why []string
	for _, r := range res {
		if r.Status != results.StatusOK && len(why) < n {
			why = append(why, fmt.Sprintf("request %d: %s, HTTP %d, %d of %d output tokens: %s",
				r.RequestID, r.Status, r.HTTPStatus, r.OutputTokens, r.OutputTokensTarget, r.Error))
		}
	}
	return why
}

// checkRecording counts the rows of the proxy's trace and results files in dir
// (trace-NNNN.parquet, results-NNNN.parquet) and says what is wrong: no file of a kind, an
// unreadable one, or fewer results rows than requests sent through the proxy (the
// replayer's own requests not in its trace, its length check, may add rows; none may be
// missing).
func checkRecording(dir string, forwarded int64) *recording {
	rec := &recording{Forwarded: forwarded}
	var problems []string
	count := func(kind string, rows func(string) (int64, error)) int64 {
		files, _ := filepath.Glob(filepath.Join(dir, kind+"-[0-9][0-9][0-9][0-9].parquet"))
		if len(files) == 0 {
			problems = append(problems, fmt.Sprintf("no %s-NNNN.parquet in %s", kind, dir))
		}
		var n int64
		for _, f := range files {
			k, err := rows(f)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			}
			n += k
		}
		return n
	}
	rec.TraceRows = count("trace", func(f string) (int64, error) {
		r, err := trace.Open(f)
		if err != nil {
			return 0, err
		}
		defer r.Close()
		return r.NumRows(), nil
	})
	rec.ResultsRows = count("results", func(f string) (int64, error) {
		res, _, err := results.ReadFile(f)
		return int64(len(res)), err
	})
	if len(problems) == 0 && rec.ResultsRows < forwarded {
		problems = append(problems, fmt.Sprintf("%d results rows for %d requests sent through the proxy", rec.ResultsRows, forwarded))
	}
	rec.Problem = strings.Join(problems, "; ")
	return rec
}
