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
package main

import (
	"bufio"
	"bytes"
	"context"
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

	"github.com/llmreplay/llmreplay/internal/quantile"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/trace"
)

var (
	bin      = flag.String("llmreplay", "llmreplay", "llmreplay binary that serves the simulated engine")
	rate     = flag.Float64("rate", 300, "fidelity: offered rate, requests/s")
	dur      = flag.Duration("duration", 20*time.Second, "fidelity/sweep: schedule length per run")
	rates    = flag.String("rates", "300,600,1000,1500,2000,3000", "sweep: offered rates, requests/s")
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
	prewarm  = flag.Int("prewarm", 64, "keep-alive connections opened before each run (replay --prewarm)")
	pformat  = flag.String("prompt-format", "text", "replay --prompt-format: text (what any --endpoint gets by default; the sim tokenizes every prompt, ~2.5 µs a token of its CPU on the same cores) or token-ids (the sim counts them by length)")
)

func main() {
	flag.Parse()
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
	default:
		err = fmt.Errorf("usage: replaybench [flags] fidelity|sweep|memory|floor")
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

// hiccups measures how late a goroutine sleeping 1 ms wakes (every 10 ms, so that its own
// wake-ups cost the replayer little CPU), while a run goes: the
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
			time.Sleep(9 * time.Millisecond)
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
	return quantile.Type7(x, 0.5), quantile.Type7(x, 0.99)
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
	ttftErrP50, ttftErrP99    float64 // ms, measured TTFT - true TTFT
	tokens                    int64
	cpu, wall                 time.Duration
	results                   string
	hicP50, hicP99            float64 // ms
	client                    string
}

// replayOnce replays src at its own times against base with the code `llmreplay replay`
// runs (replay.Prepare, then replay.Run): the trace file, the production prompter (text
// prompts, as for any --endpoint), the client. Only Run is inside the CPU measurement.
func replayOnce(base string, src trace.Source, ratePerSec float64, maxInflight int, model string) (*outcome, error) {
	dir, err := os.MkdirTemp("", "replaybench")
	if err != nil {
		return nil, err
	}
	cfg := replay.DefaultConfig()
	cfg.Trace = filepath.Join(dir, "trace.parquet")
	if err := writeTrace(cfg.Trace, src); err != nil {
		return nil, err
	}
	cfg.Endpoint, cfg.Model, cfg.HTTPClient, cfg.PromptFormat = base, model, *hclient, *pformat
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
	hic := startHiccups()
	cpu0, t0 := cpuTime(), time.Now()
	sum, err := replay.Run(ctx, sess.Options)
	if err != nil {
		return nil, err
	}
	o := &outcome{rate: ratePerSec, cpu: cpuTime() - cpu0, wall: time.Since(t0), results: cfg.Output, client: sess.Options.Client.HTTPClientName()}
	o.hicP50, o.hicP99 = hic.end()
	o.n = int(sum.Requests)
	o.ok = int(sum.ByStatus[results.StatusOK])
	o.tokens = sum.OutputTok
	o.lateP50, o.lateP99, o.lateMax = sum.Lateness.P50, sum.Lateness.P99, sum.Lateness.Max
	o.sent = sum.Lateness.N
	return o, nil
}

// ttftError reads the results and returns type-7 percentiles of measured TTFT - true TTFT.
func ttftError(o *outcome, truth time.Duration) error {
	res, _, err := replay.ReadFile(o.results)
	if err != nil {
		return err
	}
	var errs []float64
	for _, r := range res {
		if v, ok := r.TTFT(); ok {
			errs = append(errs, v-float64(truth)/1e6)
		}
	}
	slices.Sort(errs)
	if len(errs) > 0 {
		o.ttftErrP50, o.ttftErrP99 = quantile.Type7(errs, 0.5), quantile.Type7(errs, 0.99)
	}
	return nil
}

// simLateness reads the fixed sim's write-lateness histogram from /metrics and returns
// the upper bounds of the buckets holding the p50 and p99 of its first writes.
func simLateness(base string) ([2]string, error) {
	var out [2]string
	resp, err := http.Get(strings.TrimSuffix(base, "/v1") + "/metrics")
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

func fidelity() error {
	base, stop, err := startSim(fixedArgs()...)
	if err != nil {
		return err
	}
	defer stop()
	n := int64(*rate * (dur.Seconds() + warmup.Seconds()))
	sim0 := simCPU()
	o, err := replayOnce(base, newPoisson(n, *rate, *promptTk, *outTok), *rate, 4096, "sim-fixed")
	if err != nil {
		return err
	}
	simUsed := simCPU() - sim0
	if err := ttftError(o, *ttft); err != nil {
		return err
	}
	late, lerr := simLateness(base)
	fmt.Printf("fidelity: %.0f req/s Poisson, %d requests, %d output tokens each, fixed sim (TTFT %v, ITL %v) in a separate process; %s client\n", *rate, n, *outTok, *ttft, *itl, o.client)
	fmt.Printf("  sent %d/%d, ok %d\n", o.sent, o.n, o.ok)
	fmt.Printf("  schedule lateness ms: p50 %.3f p99 %.3f max %.3f   (target p99 <= 1)\n", o.lateP50, o.lateP99, o.lateMax)
	fmt.Printf("  TTFT - %v ms: p50 %.3f p99 %.3f   (target p99 <= 3)\n", *ttft, o.ttftErrP50, o.ttftErrP99)
	if lerr == nil {
		fmt.Printf("  of which the sim's own lateness: its first writes left the handler late by p50 <= %s, p99 <= %s (bucket bounds from its /metrics)\n", late[0], late[1])
	} else {
		fmt.Printf("  sim lateness unknown: %v\n", lerr)
	}
	fmt.Printf("  machine floor: a goroutine sleeping 1 ms wakes late by p50 %.3f p99 %.3f ms; load average %s\n", o.hicP50, o.hicP99, loadavg())
	fmt.Printf("  replayer CPU %v for %d streamed tokens: %.2f µs/token (target <= 10); wall %v\n",
		o.cpu.Round(time.Millisecond), o.tokens, float64(o.cpu)/1e3/float64(o.tokens), o.wall.Round(time.Millisecond))
	fmt.Printf("  sim CPU %v: %.2f µs/token\n", simUsed, float64(simUsed)/1e3/float64(max(o.tokens, 1)))
	return nil
}

func sweep() error {
	base, stop, err := startSim(fixedArgs()...)
	if err != nil {
		return err
	}
	defer stop()
	best := 0.0
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
		ttftError(o, *ttft)
		fmt.Printf("sweep: %6.0f req/s: %d requests, sent %d, ok %d, lateness p50 %.3f p99 %.3f max %.3f ms, TTFT err p99 %.3f ms, %.2f µs CPU/token; 1 ms sleeper late p99 %.3f ms; load %s\n",
			r, o.n, o.sent, o.ok, o.lateP50, o.lateP99, o.lateMax, o.ttftErrP99, float64(o.cpu)/1e3/float64(max(o.tokens, 1)), o.hicP99, loadavg())
		if o.lateP99 < 5 && o.ok == o.n && r > best {
			best = r
		}
		os.RemoveAll(filepath.Dir(o.results))
	}
	fmt.Printf("sweep: highest offered rate with lateness p99 < 5 ms and every request ok: %.0f req/s\n", best)
	return nil
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
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return err
	}
	body := fmt.Sprintf(`{"model":"sim-fixed","stream":true,"max_tokens":%d,"min_tokens":%d,"ignore_eos":true,"prompt":%q}`,
		*outTok, *outTok, strings.Repeat(" the", *promptTk))
	msg := []byte(fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body))
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
	var chunks, reads, closed, wakes int64
	deadline := time.Now().Add(*dur + 30*time.Second)
	for closed < n && time.Now().Before(deadline) {
		k, err := syscall.EpollWait(epfd, events, 50)
		if err != nil && err != syscall.EINTR {
			return err
		}
		wakes++
		for _, ev := range events[:max(k, 0)] {
			fd := int(ev.Fd)
			m, err := syscall.Read(fd, buf)
			reads++
			if m > 0 {
				chunks += int64(bytes.Count(buf[:m], []byte("data: {")))
				continue
			}
			if err == syscall.EAGAIN {
				continue
			}
			syscall.EpollCtl(epfd, syscall.EPOLL_CTL_DEL, fd, nil)
			syscall.Close(fd)
			closed++
		}
	}
	syscall.Getrusage(rusageThread, &ru1)
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) + syscall.TimevalToNsec(ru1.Stime) -
		syscall.TimevalToNsec(ru0.Utime) - syscall.TimevalToNsec(ru0.Stime))
	fmt.Printf("floor: %.0f req/s, %d streams, %d chunks, %d reads, %d epoll wake-ups; minimal epoll client thread CPU %v: %.2f µs/chunk (read + wake-ups, no parsing)\n",
		*rate, closed, chunks, reads, wakes, cpu.Round(time.Millisecond), float64(cpu)/1e3/float64(max(chunks, 1)))
	return nil
}
