//go:build linux

// Command replaybench measures the replayer's own error and cost (docs/replay.md,
// "Fidelity"). It starts `llmreplay sim` in a separate process and replays a synthetic
// Poisson trace against it with package replay, in this process, so getrusage(RUSAGE_SELF)
// is the replayer's alone.
//
//	go build -o /tmp/llmreplay ./cmd/llmreplay
//	go run ./bench/replaybench -llmreplay /tmp/llmreplay fidelity   # 300 req/s vs fixed: lateness, TTFT error, CPU/token
//	go run ./bench/replaybench -llmreplay /tmp/llmreplay sweep      # highest rate with lateness p99 < 5 ms
//	go run ./bench/replaybench -llmreplay /tmp/llmreplay memory     # 1,000,000 requests vs tiny: peak RSS
//	go run ./bench/replaybench -llmreplay /tmp/llmreplay floor      # CPU per chunk of a minimal epoll client
//	go run ./bench/replaybench -llmreplay /tmp/llmreplay suite      # the fidelity targets: floor and fidelity interleaved, medians
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/llmreplay/llmreplay/internal/osthread"
	"github.com/llmreplay/llmreplay/internal/rxstamp"
	"github.com/llmreplay/llmreplay/internal/uring"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/stats"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

var (
	bin      = flag.String("llmreplay", "llmreplay", "llmreplay binary that serves the simulated engine")
	rate     = flag.Float64("rate", 300, "fidelity: offered rate, requests/s")
	dur      = flag.Duration("duration", 20*time.Second, "fidelity/sweep: schedule length per run")
	rates    = flag.String("rates", defaultRates, "sweep: offered rates, requests/s")
	outTok   = flag.Int("output-tokens", 100, "output tokens per request")
	promptTk = flag.Int("prompt-tokens", 100, "prompt tokens per request")
	ttft     = flag.Duration("ttft", 50*time.Millisecond, "fixed profile TTFT")
	itl      = flag.Duration("itl", 10*time.Millisecond, "fixed profile ITL")
	memN     = flag.Int64("n", 1_000_000, "memory: requests in the trace")
	memRate  = flag.Float64("memory-rate", 5000, "memory: offered rate, requests/s")
	seed     = flag.Uint64("seed", 1, "arrival seed")
	cpuProf  = flag.String("cpuprofile", "", "write a CPU profile of the replayer to this file")
	warmup   = flag.Duration("warmup", 0, "send this much of the schedule first without recording it")
	procs    = flag.Int("procs", 0, "GOMAXPROCS of the replayer (0: the runtime's default); the sim keeps its own")
	simCPUs  = flag.String("sim-cpus", "", "run the sim under taskset -c LIST (e.g. 1, with the replayer under taskset -c 0 and -procs 1: as if on separate machines)")
	hclient  = flag.String("http-client", "auto", "replayer's HTTP client: auto, raw or net/http (replay --http-client)")
	ring     = flag.Bool("ring", true, "the reactor reads the streams it finds ready in one io_uring submission (false: one recvmsg(2) each)")
	rbatch   = flag.Duration("read-batch", replay.DefaultReadBatch, "replay --read-batch: with 64 or more streams in flight, the reactor reads at most once per this (0: every chunk as it arrives)")
	prewarm  = flag.Int("prewarm", 64, "keep-alive connections opened before each run (replay --prewarm)")
	pformat  = flag.String("prompt-format", "text", "replay --prompt-format: text (what any --endpoint gets by default; the sim tokenizes every prompt, ~2.5 µs a token of its CPU on the same cores) or token-ids (the sim counts them by length)")
	cpus     = flag.String("cpus", "", "run replaybench (the replayer) under taskset -c LIST: it re-executes itself under taskset before anything runs, since Go starts threads before main (e.g. -cpus 0 -procs 1 -sim-cpus 1: a core each)")
	srvRec   = flag.Bool("server-record", true, "fidelity: start the sim with --request-log FILE --request-log-writes and join its record to the results (the replayer's own TTFT error)")
	fring    = flag.Bool("floor-ring", false, "floor: read the sockets an epoll wake finds ready in one io_uring submission (recvmsg with receive timestamps), as the replayer's reactor does; not the reference floor")
	fbatch   = flag.Duration("floor-batch", 0, "floor: wait this long after each wake before the next epoll_wait, as the replayer's --read-batch does; not the reference floor")
	fstamps  = flag.Bool("floor-stamps", false, "floor: read with recvmsg and the kernel's receive timestamps (SO_TIMESTAMPNS), as the replayer's reactor does, instead of read(2)")
	summary  = flag.String("summary", "", "write the run's figures as JSON to this file (what suite reads)")
)

const defaultRates = "300,600,1000,1500,2000,2500,3000"

func main() {
	flag.Parse()
	transport.SetReactorRing(*ring)
	if *cpus != "" {
		if err := pinSelf(*cpus); err != nil {
			fmt.Fprintln(os.Stderr, "replaybench: -cpus:", err)
			os.Exit(1)
		}
	}
	if *procs > 0 {
		runtime.GOMAXPROCS(*procs)
	}
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err == nil {
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	var err error
	switch flag.Arg(0) {
	case "fidelity":
		err = fidelity()
	case "sweep":
		err = sweep()
	case "memory":
		err = memory()
	case "floor":
		err = floor()
	case "suite":
		err = suite(flag.Args()[1:])
	default:
		err = fmt.Errorf("usage: replaybench [flags] fidelity|sweep|memory|floor|suite [suite flags]")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "replaybench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// simPID is the running sim's process (taskset execs it, so the pid stays the sim's).
var simPID int

// simCPU returns the sim process's CPU time so far, from /proc.
func simCPU() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", simPID))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100 on Linux
}

// startSim runs `llmreplay sim` on a free loopback port and waits until it answers.
func startSim(args ...string) (base string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(*bin, append([]string{"sim", "--addr", addr}, args...)...)
	if *simCPUs != "" {
		cmd = exec.Command("taskset", append([]string{"-c", *simCPUs, *bin, "sim", "--addr", addr}, args...)...)
	}
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	simPID = cmd.Process.Pid
	stop = func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return "http://" + addr + "/v1", stop, nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	stop()
	return "", nil, fmt.Errorf("sim did not start on %s", addr)
}

// poisson is a Source of n requests with exponential gaps of mean 1/rate, generated on
// the fly (no trace held in memory).
type poisson struct {
	rng            *rand.Rand
	rate           float64
	n, i           int64
	t              time.Duration
	prompt, output int32
	cur            trace.Request
}

func newPoisson(n int64, ratePerSec float64, prompt, output int) *poisson {
	return &poisson{rng: rand.New(rand.NewPCG(*seed, 7)), rate: ratePerSec, n: n, prompt: int32(prompt), output: int32(output)}
}

func (p *poisson) Next() bool {
	if p.i >= p.n {
		return false
	}
	if p.i > 0 {
		p.t += time.Duration(p.rng.ExpFloat64() / p.rate * 1e9)
	}
	p.cur = trace.Request{ID: p.i, Arrival: p.t, PromptTokens: p.prompt, OutputTokens: p.output}
	p.i++
	return true
}
func (p *poisson) Request() trace.Request { return p.cur }
func (p *poisson) Err() error             { return nil }

// writeTrace writes src to a trace file, so that a run replays it the way
// `llmreplay replay --trace` does.
func writeTrace(path string, src trace.Source) error {
	w, err := trace.Create(path, trace.Meta{Source: "synth"})
	if err != nil {
		return err
	}
	for src.Next() {
		if err := w.Write(src.Request()); err != nil {
			w.Abort()
			return err
		}
	}
	if err := src.Err(); err != nil {
		w.Abort()
		return err
	}
	return w.Close()
}

// hiccups measures how late a goroutine sleeping 1 ms wakes (every 50 ms, so that its own
// wake-ups cost the replayer's CPU figure little: every 10 ms, as until 2026-12-04, an idle
// process spent 52 ms of CPU in 5 s on them, 16 ms every 50 ms), while a run goes: the
// floor under any schedule lateness this process can reach on this machine (a loaded
// machine preempts the whole process for milliseconds at a time).
type hiccups struct {
	stop chan struct{}
	done chan []float64
}

func startHiccups() *hiccups {
	h := &hiccups{stop: make(chan struct{}), done: make(chan []float64, 1)}
	go func() {
		var over []float64
		for {
			select {
			case <-h.stop:
				h.done <- over
				return
			default:
			}
			t := time.Now()
			time.Sleep(time.Millisecond)
			over = append(over, float64(time.Since(t)-time.Millisecond)/1e6)
			time.Sleep(49 * time.Millisecond)
		}
	}()
	return h
}

// end returns the p50 and p99 wake-up overshoot, ms.
func (h *hiccups) end() (p50, p99 float64) {
	close(h.stop)
	x := <-h.done
	slices.Sort(x)
	if len(x) == 0 {
		return 0, 0
	}
	return stats.Type7(x, 0.5), stats.Type7(x, 0.99)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func maxRSSMB() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024 // KiB on Linux
}

type outcome struct {
	rate                      float64
	n, ok, sent               int
	lateP50, lateP99, lateMax float64 // ms
	ttftErrP50, ttftErrP99    float64 // ms, measured TTFT - nominal TTFT
	ttftErrMax                float64
	tokens                    int64
	cpu, wall                 time.Duration
	reactorCPU                time.Duration // of the threads named transport.ReactorThreadName, during the run
	samplerCPU                time.Duration // of the benchmark's sampler of reactorCPU, taken out of cpu
	sleeperCPU                time.Duration // of the C-like sleeper's thread, taken out of cpu
	results                   string
	hicP50, hicP99            float64 // ms: the 1 ms goroutine sleeper
	sleepP50, sleepP99        float64 // ms: the C-like sleeper (contract 1) at the mean gap
	sleepMax                  float64
	period                    time.Duration // the C-like sleeper's period
	client                    string
	goroutines, fds           [2]int // before the run; after it and Session.Close
	settled                   time.Duration
	batchWaits                int64 // the reactors' batching waits during the run (--read-batch)
	ringReads                 int64 // the reactors' reads through io_uring during the run
}

// replayOnce replays src at its own times against base with the code `llmreplay replay`
// runs (replay.Prepare, then replay.Run): the trace file, the production prompter (text
// prompts, as for any --endpoint), the client. Only Run is inside the CPU measurement.
// Beside it run the two sleepers (the C-like one at the offered mean gap, the 1 ms
// goroutine one), and it counts the process's goroutines and file descriptors before the
// run and after it (Session.Close done), giving them up to 2 s to go.
func replayOnce(base string, src trace.Source, ratePerSec float64, maxInflight int, model string) (*outcome, error) {
	g0, fd0 := runtime.NumGoroutine(), openFDs()
	dir, err := os.MkdirTemp("", "replaybench")
	if err != nil {
		return nil, err
	}
	cfg := replay.DefaultConfig()
	cfg.Trace = filepath.Join(dir, "trace.parquet")
	if err := writeTrace(cfg.Trace, src); err != nil {
		return nil, err
	}
	cfg.Endpoint, cfg.Model, cfg.HTTPClient, cfg.PromptFormat, cfg.ReadBatch = base, model, *hclient, *pformat, *rbatch
	cfg.Speedup, cfg.SpeedupSet = 1, true
	cfg.Timeout, cfg.MaxInflight, cfg.Grace, cfg.Prewarm = time.Minute, maxInflight, time.Second, *prewarm
	cfg.Warmup = int64(warmup.Seconds() * ratePerSec)
	cfg.Output, cfg.Force = filepath.Join(dir, "results.parquet"), true // the benchmark owns dir
	cfg.Quiet = true
	ctx := context.Background()
	sess, err := replay.Prepare(ctx, cfg, replay.Env{ToolVersion: "replaybench"})
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	period := time.Duration(float64(time.Second) / ratePerSec)
	slp := startSleeper(period)
	hic := startHiccups()
	reactorCPU := threadCPU(transport.ReactorThreadName)
	cpu0, t0, bw0, rr0 := cpuTime(), time.Now(), transport.ReactorBatchWaits(), transport.ReactorRingReads()
	sum, err := replay.Run(ctx, sess.Options)
	if err != nil {
		slp.end()
		hic.end()
		reactorCPU()
		return nil, err
	}
	o := &outcome{rate: ratePerSec, cpu: cpuTime() - cpu0, wall: time.Since(t0), results: cfg.Output, client: sess.Options.Client.HTTPClientName(), period: period}
	o.reactorCPU, o.samplerCPU = reactorCPU()
	o.batchWaits = transport.ReactorBatchWaits() - bw0
	o.ringReads = transport.ReactorRingReads() - rr0
	o.hicP50, o.hicP99 = hic.end()
	o.sleepP50, o.sleepP99, o.sleepMax, o.sleeperCPU = slp.endCPU()
	o.cpu -= o.samplerCPU + o.sleeperCPU // the benchmark's own instruments, not the replayer
	o.n = int(sum.Requests)
	o.ok = int(sum.ByStatus[results.StatusOK])
	o.tokens = sum.OutputTok
	o.lateP50, o.lateP99, o.lateMax = sum.Lateness.P50, sum.Lateness.P99, sum.Lateness.Max
	o.sent = sum.Lateness.N
	sess.Close()
	t1 := time.Now()
	for runtime.NumGoroutine() > g0 || openFDs() > fd0 {
		if time.Since(t1) > 2*time.Second {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	o.settled = time.Since(t1)
	o.goroutines, o.fds = [2]int{g0, runtime.NumGoroutine()}, [2]int{fd0, openFDs()}
	return o, nil
}

// openFDs counts this process's open file descriptors (the directory read's own counts
// in every figure alike).
func openFDs() int {
	e, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(e)
}

// ttftError returns type-7 percentiles of measured TTFT - nominal TTFT over res.
func ttftError(o *outcome, res []results.Result, nominal time.Duration) {
	var errs []float64
	for _, r := range res {
		if v, ok := r.TTFT(); ok {
			errs = append(errs, v-float64(nominal)/1e6)
		}
	}
	d := summarize(errs)
	o.ttftErrP50, o.ttftErrP99, o.ttftErrMax = d.P50, d.P99, d.Max
}

// simLateness reads the fixed sim's write-lateness histogram from /metrics and returns
// the upper bounds of the buckets holding the p50 and p99 of its first writes.
func simLateness(base string) ([2]string, error) {
	var out [2]string
	u, err := wire.BaseURL(base)
	if err != nil {
		return out, err
	}
	resp, err := http.Get(wire.MetricsURL(u).String())
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return out, err
	}
	type bucket struct {
		le  string
		cum float64
	}
	var bs []bucket
	const prefix = `llmreplay_sim_fixed_write_lateness_seconds_bucket{model_name="sim-fixed",token="first",le="`
	for _, l := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(l, prefix)
		if !ok {
			continue
		}
		le, v, _ := strings.Cut(rest, `"} `)
		var n float64
		fmt.Sscan(v, &n)
		bs = append(bs, bucket{le, n})
	}
	if len(bs) == 0 || bs[len(bs)-1].cum == 0 {
		return out, fmt.Errorf("no write-lateness histogram in the sim's /metrics")
	}
	total := bs[len(bs)-1].cum
	for i, q := range []float64{0.50, 0.99} {
		for _, x := range bs {
			if x.cum >= q*total {
				if sec, err := strconv.ParseFloat(x.le, 64); err == nil {
					out[i] = fmt.Sprintf("%.3g ms", sec*1e3)
				} else {
					out[i] = x.le
				}
				break
			}
		}
	}
	return out, nil
}

func fixedArgs() []string {
	return []string{"--profile", "fixed", "--ttft", ttft.String(), "--itl", itl.String()}
}

// simHasServerRecord says whether bin's sim has --request-log-writes, the flag that came
// with the server's per-request stamps (the record TTFT error is split by); why says what
// is missing when not.
func simHasServerRecord() (ok bool, why string) {
	out, _ := exec.Command(*bin, "sim", "--help").CombinedOutput()
	if !bytes.Contains(out, []byte("--request-log-writes")) {
		return false, fmt.Sprintf("%s sim has no --request-log-writes (a build older than the sim's server stamps)", *bin)
	}
	return true, ""
}

// cpusAllowed returns the Cpus_allowed_list of a process ("self" or a pid).
func cpusAllowed(pid string) string {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// runSummary is one run's figures, as -summary writes them for suite (ms unless named).
type runSummary struct {
	Mode         string  `json:"mode"`
	Rate         float64 `json:"rate"`
	Requests     int     `json:"requests"`
	Sent         int     `json:"sent"`
	OK           int     `json:"ok"`
	LateP50      float64 `json:"lateness_p50"`
	LateP99      float64 `json:"lateness_p99"`
	LateMax      float64 `json:"lateness_max"`
	TTFTNomP50   float64 `json:"ttft_minus_nominal_p50"`
	TTFTNomP99   float64 `json:"ttft_minus_nominal_p99"`
	SleeperP50   float64 `json:"sleeper_p50"`
	SleeperP99   float64 `json:"sleeper_p99"`
	SleeperMax   float64 `json:"sleeper_max"`
	HiccupP99    float64 `json:"goroutine_sleep_1ms_p99"`
	CPUPerToken  float64 `json:"cpu_us_per_token"`
	ReactorPerTk float64 `json:"reactor_cpu_us_per_token,omitempty"`
	SimPerToken  float64 `json:"sim_cpu_us_per_token"`
	FloorPerChnk float64 `json:"floor_us_per_chunk,omitempty"`
	ReadBatchMS  float64 `json:"read_batch_ms"`
	BatchWaits   int64   `json:"batch_waits"`
	RingReads    int64   `json:"ring_reads"`
	// ServerRecord is "" when the join ran, else why it did not.
	ServerRecord string     `json:"server_record_unavailable,omitempty"`
	Server       serverJoin `json:"server"`
	Goroutines   [2]int     `json:"goroutines"`
	FDs          [2]int     `json:"fds"`
	SweepBest    float64    `json:"sweep_best_rate,omitempty"`
	Sweep        []sweepPt  `json:"sweep,omitempty"`
}

type sweepPt struct {
	Rate    float64 `json:"rate"`
	N       int     `json:"requests"`
	Sent    int     `json:"sent"`
	OK      int     `json:"ok"`
	LateP99 float64 `json:"lateness_p99"`
	Sleeper float64 `json:"sleeper_p99"`
}

func writeSummary(s *runSummary) error {
	if *summary == "" {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(*summary, b, 0o644)
}

func fidelity() error {
	dir, err := os.MkdirTemp("", "replaybench-sim")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	args, logPath, why := fixedArgs(), "", "-server-record=false"
	if *srvRec {
		var ok bool
		if ok, why = simHasServerRecord(); ok {
			logPath = filepath.Join(dir, "requests.jsonl")
			args = append(args, "--request-log", logPath, "--request-log-writes")
		}
	}
	base, stopSim, err := startSim(args...)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			stopSim()
		}
	}()
	simCPUs := cpusAllowed(strconv.Itoa(simPID))
	n := int64(*rate * (dur.Seconds() + warmup.Seconds()))
	sim0 := simCPU()
	o, err := replayOnce(base, newPoisson(n, *rate, *promptTk, *outTok), *rate, 4096, "sim-fixed")
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(o.results))
	simUsed := simCPU() - sim0
	res, meta, err := results.ReadFile(o.results)
	if err != nil {
		return err
	}
	ttftError(o, res, *ttft)
	late, lerr := simLateness(base)
	stopSim() // the sim writes what its request log holds as it stops
	stopped = true
	var j serverJoin
	if logPath != "" {
		j, why = joinLog(logPath, res, meta)
	}

	sum := &runSummary{Mode: "fidelity", Rate: *rate, Requests: o.n, Sent: o.sent, OK: o.ok,
		LateP50: o.lateP50, LateP99: o.lateP99, LateMax: o.lateMax, TTFTNomP50: o.ttftErrP50, TTFTNomP99: o.ttftErrP99,
		SleeperP50: o.sleepP50, SleeperP99: o.sleepP99, SleeperMax: o.sleepMax, HiccupP99: o.hicP99,
		CPUPerToken: float64(o.cpu) / 1e3 / float64(max(o.tokens, 1)), ReactorPerTk: float64(o.reactorCPU) / 1e3 / float64(max(o.tokens, 1)), SimPerToken: float64(simUsed) / 1e3 / float64(max(o.tokens, 1)),
		ReadBatchMS: float64(*rbatch) / 1e6, BatchWaits: o.batchWaits, RingReads: o.ringReads,
		ServerRecord: why, Server: j, Goroutines: o.goroutines, FDs: o.fds}
	fmt.Printf("fidelity: %.0f req/s Poisson, %d requests, %d output tokens each, fixed sim (TTFT %v, ITL %v) in a separate process; %s client\n", *rate, n, *outTok, *ttft, *itl, o.client)
	fmt.Printf("  replayer on CPUs %s (GOMAXPROCS %d), sim on CPUs %s; load average %s\n", cpusAllowed("self"), runtime.GOMAXPROCS(0), simCPUs, loadavg())
	fmt.Printf("  sent %d/%d, ok %d\n", o.sent, o.n, o.ok)
	notOK := 0
	for _, r := range res {
		if r.Status != results.StatusOK {
			if notOK < 5 {
				fmt.Printf("    NOT OK: request %d, status %s, sent at %.3f s, %d of %d output tokens, HTTP %d: %s\n",
					r.RequestID, r.Status, float64(r.SentNS)/1e9, r.OutputTokens, r.OutputTokensTarget, r.HTTPStatus, r.Error)
			}
			notOK++
		}
	}
	if notOK > 5 {
		fmt.Printf("    ... and %d more not ok\n", notOK-5)
	}
	fmt.Printf("  schedule lateness ms:  %s   (target p99 <= C-like sleeper p99 + 0.2 unpinned, <= 1 pinned)\n", fmtDist(o.lateP50, o.lateP99, o.lateMax))
	fmt.Printf("  C-like sleeper late ms: %s   (a thread outside Go's scheduler sleeping to absolute deadlines %v apart, the mean gap: the floor for the lateness above)\n", fmtDist(o.sleepP50, o.sleepP99, o.sleepMax), o.period.Round(time.Microsecond))
	fmt.Printf("  goroutine 1 ms sleep late ms: p50 %.3f p99 %.3f   (time.Sleep every 50 ms: Go's timers, another floor)\n", o.hicP50, o.hicP99)
	fmt.Printf("  TTFT - %v ms (client vs nominal): %s   (target p99 <= 3 pinned)\n", *ttft, fmtDist(o.ttftErrP50, o.ttftErrP99, o.ttftErrMax))
	if why == "" {
		fmt.Printf("  replayer's own TTFT error ms (client TTFT - server TTFT, %d of %d ok joined, %d dated by the kernel's arrival stamp, the rest by the sim's read): %s   (target p99 <= 1)\n", j.Joined, j.OK, j.Arrived, j.OwnTTFTErr)
		fmt.Printf("    one-way, CLOCK_REALTIME: request (server arrival - client send) %s; first chunk (client chunk time - server write) %s\n", j.SendLeg, j.RecvLeg)
		fmt.Printf("    the sim's read of a request returned after its arrival by ms: %s   (the sim's own wake-up, outside every figure here)\n", j.SimRead)
		fmt.Printf("    ITL error per server write ms (client gap between two writes' arrivals - server gap between the writes, %d gaps in %d streams; %d streams did not pair by token count): %s\n", j.ITLErr.N, j.ITLStreams, j.ITLSkipped, j.ITLErr)
		fmt.Printf("  sim's own first-write lateness ms (first_write - (arrival + %v), its request log): %s\n", *ttft, j.SimFirstLate)
	} else {
		fmt.Printf("  replayer's own TTFT error: server record unavailable: %s\n", why)
	}
	if lerr == nil {
		fmt.Printf("  sim's /metrics: its first writes left the handler late by p50 <= %s, p99 <= %s (bucket bounds)\n", late[0], late[1])
	} else {
		fmt.Printf("  sim's /metrics lateness unknown: %v\n", lerr)
	}
	fmt.Printf("  replayer CPU %v for %d streamed tokens: %.2f µs/token (target <= 1.3 x `replaybench floor` µs/chunk); wall %v; the benchmark's thread-CPU sampler's own %v and the C-like sleeper thread's %v taken out\n",
		o.cpu.Round(time.Millisecond), o.tokens, sum.CPUPerToken, o.wall.Round(time.Millisecond), o.samplerCPU.Round(time.Millisecond), o.sleeperCPU.Round(time.Millisecond))
	if o.reactorCPU > 0 {
		fmt.Printf("    of which the reactor threads (%s: they read and parse the streams, the floor client's counterpart) %v: %.2f µs/token; the rest (dispatch, requests' goroutines, results, runtime, the goroutine sleeper) %.2f\n",
			transport.ReactorThreadName, o.reactorCPU.Round(time.Millisecond), sum.ReactorPerTk, sum.CPUPerToken-sum.ReactorPerTk)
	}
	fmt.Printf("    reads: --read-batch %v; the reactors waited %d times to batch them (%.0f a second); %d reads through io_uring (-ring %v)\n", *rbatch, o.batchWaits, float64(o.batchWaits)/o.wall.Seconds(), o.ringReads, *ring)
	fmt.Printf("  sim CPU %v: %.2f µs/token\n", simUsed, sum.SimPerToken)
	fmt.Printf("  replayer goroutines %d -> %d, file descriptors %d -> %d (before the run; after it and Session.Close, %v later)%s\n",
		o.goroutines[0], o.goroutines[1], o.fds[0], o.fds[1], o.settled.Round(time.Millisecond), leakNote(o))
	return writeSummary(sum)
}

func leakNote(o *outcome) string {
	if o.goroutines[1] > o.goroutines[0] || o.fds[1] > o.fds[0] {
		return "  NOT BACK TO THE START COUNT"
	}
	return ""
}

func fmtDist(p50, p99, mx float64) string {
	return fmt.Sprintf("p50 %.3f p99 %.3f max %.3f", p50, p99, mx)
}

// joinLog reads the sim's request log and joins it to res; why says why there is no join.
func joinLog(path string, res []results.Result, meta *results.RunMeta) (serverJoin, string) {
	f, err := os.Open(path)
	if err != nil {
		return serverJoin{}, err.Error()
	}
	defer f.Close()
	l, err := readServerLog(f)
	if err != nil {
		return serverJoin{}, err.Error()
	}
	if l.stamped == 0 {
		return serverJoin{}, fmt.Sprintf("none of the sim's %d request-log lines has both read_unix_ns and first_write_unix_ns (%d have the one, %d the other)", l.lines, l.read, l.first)
	}
	j := joinServerLog(res, meta, l, *ttft)
	if j.Joined == 0 {
		return j, fmt.Sprintf("no ok result joined the sim's %d stamped lines (X-Request-Id %s-ID)", l.stamped, meta.RunID)
	}
	return j, ""
}

func sweep() error {
	base, stop, err := startSim(fixedArgs()...)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Printf("sweep: %d output tokens per request, replayer on CPUs %s (GOMAXPROCS %d), sim on CPUs %s\n",
		*outTok, cpusAllowed("self"), runtime.GOMAXPROCS(0), cpusAllowed(strconv.Itoa(simPID)))
	sum := &runSummary{Mode: "sweep"}
	for _, s := range strings.Split(*rates, ",") {
		var r float64
		if _, err := fmt.Sscan(s, &r); err != nil {
			return fmt.Errorf("rate %q: %v", s, err)
		}
		n := int64(r * (dur.Seconds() + warmup.Seconds()))
		o, err := replayOnce(base, newPoisson(n, r, *promptTk, *outTok), r, 1<<16, "sim-fixed")
		if err != nil {
			return err
		}
		if res, _, err := results.ReadFile(o.results); err == nil {
			ttftError(o, res, *ttft)
		}
		fmt.Printf("sweep: %6.0f req/s: %d requests, sent %d, ok %d, lateness p50 %.3f p99 %.3f max %.3f ms, TTFT - %v p99 %.3f ms, %.2f µs CPU/token; C-like sleeper late p99 %.3f ms, 1 ms goroutine sleep late p99 %.3f ms; load %s\n",
			r, o.n, o.sent, o.ok, o.lateP50, o.lateP99, o.lateMax, *ttft, o.ttftErrP99, float64(o.cpu)/1e3/float64(max(o.tokens, 1)), o.sleepP99, o.hicP99, loadavg())
		sum.Sweep = append(sum.Sweep, sweepPt{Rate: r, N: o.n, Sent: o.sent, OK: o.ok, LateP99: o.lateP99, Sleeper: o.sleepP99})
		if o.lateP99 < 5 && o.ok == o.n && o.n > 0 && r > sum.SweepBest {
			sum.SweepBest = r
		}
		os.RemoveAll(filepath.Dir(o.results))
	}
	fmt.Printf("sweep: highest offered rate with lateness p99 < 5 ms and every request ok: %.0f req/s\n", sum.SweepBest)
	return writeSummary(sum)
}

func memory() error {
	base, stop, err := startSim("--profile", "tiny", "--time-scale", "100")
	if err != nil {
		return err
	}
	defer stop()
	go func() { // print RSS as it goes
		for range time.Tick(10 * time.Second) {
			fmt.Fprintf(os.Stderr, "memory: peak RSS so far %.1f MB\n", maxRSSMB())
		}
	}()
	o, err := replayOnce(base, newPoisson(*memN, *memRate, 16, 4), *memRate, 4096, "sim-tiny")
	if err != nil {
		return err
	}
	fmt.Printf("memory: %d requests at %.0f req/s vs tiny (separate process): %d recorded, %d ok, wall %v\n",
		*memN, *memRate, o.n, o.ok, o.wall.Round(time.Second))
	fmt.Printf("memory: replayer peak RSS %.1f MB (target < 500 MB), including the journal -> Parquet conversion\n", maxRSSMB())
	w := bufio.NewWriter(os.Stdout)
	w.Flush()
	os.RemoveAll(filepath.Dir(o.results))
	return nil
}

// floor measures the least CPU any client pays per streamed chunk on this machine: a
// minimal client on one locked thread, an epoll loop that reads each ready socket once
// (the kernel's read, and the ACK it sends, are in it), counts "data:" lines and parses
// nothing, against the same sim and load as fidelity. Its thread's CPU per chunk is the
// floor under the replayer's figure.
func floor() error {
	base, stop, err := startSim(fixedArgs()...)
	if err != nil {
		return err
	}
	defer stop()
	u, err := wire.BaseURL(base)
	if err != nil {
		return err
	}
	addr := u.Host
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return err
	}
	body := fmt.Sprintf(`{"model":"sim-fixed","stream":true,"max_tokens":%d,"min_tokens":%d,"ignore_eos":true,"prompt":%q}`,
		*outTok, *outTok, strings.Repeat(" the", *promptTk))
	msg := []byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		wire.APIURL(u, wire.APICompletions).Path, addr, len(body), body))
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	defer syscall.Close(epfd)
	n := int64(*rate * dur.Seconds())
	var opened atomic.Int64
	go func() { // dispatcher: not measured
		src := newPoisson(n, *rate, *promptTk, *outTok)
		t0 := time.Now()
		for src.Next() {
			time.Sleep(time.Until(t0.Add(src.Request().Arrival)))
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
			if err != nil {
				continue
			}
			sa := &syscall.SockaddrInet4{Port: tcp.Port}
			copy(sa.Addr[:], tcp.IP.To4())
			if syscall.Connect(fd, sa) != nil {
				syscall.Close(fd)
				continue
			}
			if *fstamps || *fring {
				rxstamp.Enable(fd)
			}
			syscall.Write(fd, msg)
			syscall.SetNonblock(fd, true)
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
			syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, fd, &ev)
			opened.Add(1)
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ru0, ru1 syscall.Rusage
	const rusageThread = 1
	syscall.Getrusage(rusageThread, &ru0)
	events := make([]syscall.EpollEvent, 256)
	buf := make([]byte, 64<<10)
	oob := make([]byte, rxstamp.OOBSize)
	var ring *uring.Ring
	var rreads []floorRead
	if *fring {
		if ring, err = uring.New(uint32(len(events))); err != nil {
			return fmt.Errorf("floor -floor-ring: %w", err)
		}
		defer ring.Close()
		rreads = make([]floorRead, len(events))
	}
	var chunks, reads, closed, wakes, stamped int64
	deadline := time.Now().Add(*dur + 30*time.Second)
	for closed < n && time.Now().Before(deadline) {
		k, err := syscall.EpollWait(epfd, events, 50)
		if err != nil && err != syscall.EINTR {
			return err
		}
		var woke int64
		if *fbatch > 0 { // a clock reading is a system call here: the reference floor makes none
			woke = osthread.Monotonic()
		}
		wakes++
		if ring != nil {
			for i, ev := range events[:max(k, 0)] {
				rreads[i].prep(ring, int(ev.Fd), uint64(i))
			}
			ring.Submit()
			ring.Reap(func(i uint64, res int32) { rreads[i].res = res })
		}
		for i, ev := range events[:max(k, 0)] {
			fd := int(ev.Fd)
			var m int
			var err error
			got := buf
			if ring != nil {
				rd := &rreads[i]
				if m = int(rd.res); rd.res < 0 {
					m, err = -1, syscall.Errno(-rd.res)
				} else if rd.m.Stamp() != 0 {
					stamped++
				}
				got = rd.buf[:]
			} else if *fstamps {
				n, ns, e := rxstamp.Recv(fd, buf, oob)
				if m = n; e != 0 {
					m, err = -1, e
				} else if ns != 0 {
					stamped++
				}
			} else {
				m, err = syscall.Read(fd, buf)
			}
			reads++
			if m > 0 {
				chunks += int64(bytes.Count(got[:m], []byte("data: {")))
				continue
			}
			if err == syscall.EAGAIN {
				continue
			}
			syscall.EpollCtl(epfd, syscall.EPOLL_CTL_DEL, fd, nil)
			syscall.Close(fd)
			closed++
		}
		if *fbatch > 0 {
			osthread.SleepUntil(woke + int64(*fbatch))
		}
	}
	syscall.Getrusage(rusageThread, &ru1)
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) + syscall.TimevalToNsec(ru1.Stime) -
		syscall.TimevalToNsec(ru0.Utime) - syscall.TimevalToNsec(ru0.Stime))
	perChunk := float64(cpu) / 1e3 / float64(max(chunks, 1))
	how := "read(2)"
	if ring != nil {
		how = fmt.Sprintf("recvmsg with the kernel's receive timestamps, through io_uring, one submission a wake; %d reads stamped", stamped)
	} else if *fstamps {
		how = fmt.Sprintf("recvmsg with the kernel's receive timestamps, %d reads stamped", stamped)
	}
	if *fbatch > 0 {
		how += fmt.Sprintf(", waits %v after each wake", *fbatch)
	}
	fmt.Printf("floor: %.0f req/s, %d streams, %d chunks, %d reads (%s), %d epoll wake-ups; minimal epoll client thread CPU %v: %.2f µs/chunk (read + wake-ups, no parsing); load %s\n",
		*rate, closed, chunks, reads, how, wakes, cpu.Round(time.Millisecond), perChunk, loadavg())
	return writeSummary(&runSummary{Mode: "floor", Rate: *rate, Requests: int(n), OK: int(closed), FloorPerChnk: perChunk})
}

// floorRead is one socket's read in the floor client's io_uring submission (-floor-ring).
type floorRead struct {
	m   rxstamp.Msg
	buf [16 << 10]byte
	res int32
}

func (rd *floorRead) prep(ring *uring.Ring, fd int, i uint64) {
	rd.res = -int32(syscall.EAGAIN)
	ring.PrepRecvmsg(fd, rd.m.Header(rd.buf[:]), i)
}
