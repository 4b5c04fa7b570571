//go:build linux

// Command soak runs the replayer for a long time at a steady moderate load against the
// simulated engine with its faults on, through an embedded toxiproxy whose toxics are
// switched on and off every few minutes, and checks that nothing is lost and nothing
// drifts (bench/soak.sh runs it; docs in bench/README.md, "Soak").
//
// Three processes: `llmreplay sim` (the engine, with --fault), this one (toxiproxy, the
// toxic schedule, the checks) and `soak replayer`, the replayer: package replay run
// through replay.Prepare and replay.Run as `llmreplay replay` runs it, alone in its process
// so that its RSS and goroutines are its own. It samples them every -sample and writes its
// done count every 100 ms (unbuffered, so a kill -9 leaves them on disk).
//
// It checks:
//   - records = due requests: one record per request of the trace (with -kill: for every
//     request due at least -timeout + 1 s before the kill -9, after `llmreplay recover`);
//   - with -kill, the recovered file holds at least the records the replayer had counted
//     done one second before the kill: at most the last second lost;
//   - RSS and goroutines: the least-squares slope of the samples after the first and up to
//     the schedule's end, times the run's length, within max(16 MiB, 10% of the median) and
//     max(20, 10% of the median) (runs of at least 20 samples); and the goroutines after the
//     run, its client closed, no more than before it;
//   - lateness p99 per -window: the least-squares drift across windows, times the run's
//     length, within max(2 ms, half the median window p99).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
	"github.com/llmreplay/llmreplay/trace"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "replayer" {
		if err := replayer(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "soak replayer:", err)
			os.Exit(1)
		}
		return
	}
	ok, err := soak(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// sample is one line of the replayer's samples file.
type sample struct {
	Phase      string `json:"phase"` // before (Run), run, after (Run and closing the client)
	UnixNS     int64  `json:"unix_ns"`
	RSSKiB     int64  `json:"rss_kib"`
	Goroutines int    `json:"goroutines"`
	HeapKiB    int64  `json:"heap_inuse_kib"`
	Done       int64  `json:"done"`
	InFlight   int64  `json:"in_flight"`
}

// replayer is the replayer process: one replay of -trace against -endpoint.
func replayer(args []string) error {
	fs := flag.NewFlagSet("soak replayer", flag.ExitOnError)
	endpoint := fs.String("endpoint", "", "base URL")
	tracePath := fs.String("trace", "", "trace file")
	out := fs.String("o", "", "results file")
	timeout := fs.Duration("timeout", 10*time.Second, "per-request timeout")
	hc := fs.String("http-client", "auto", "HTTP client")
	every := fs.Duration("sample", time.Minute, "sampling period")
	samplesPath := fs.String("samples", "", "samples file (JSON lines)")
	progressPath := fs.String("progress", "", "done-count file: 'UNIX_NS DONE' every 100 ms")
	hiccupsPath := fs.String("hiccups", "", "file of 'UNIX_NS LATE_NS' for each 1 ms sleep that woke over 5 ms late")
	fs.Parse(args)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg := replay.DefaultConfig()
	cfg.Trace, cfg.Endpoint, cfg.Output, cfg.HTTPClient = *tracePath, *endpoint, *out, *hc
	cfg.Speedup, cfg.SpeedupSet = 1, true
	cfg.Timeout, cfg.Grace, cfg.Quiet = *timeout, 5*time.Second, true
	cfg.PromptFormat = "token-ids" // the sim then spends no CPU on tokenizing prompts
	sess, err := replay.Prepare(ctx, cfg, replay.Env{ToolVersion: "soak", Log: os.Stderr})
	if err != nil {
		return err
	}
	defer sess.Close()
	prog := new(replay.Progress)
	sess.Options.Progress = prog

	samples, err := os.OpenFile(*samplesPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	progress, err := os.OpenFile(*progressPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	hiccups, err := os.OpenFile(*hiccupsPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	defer close(done)
	// How late a goroutine sleeping 1 ms wakes: no schedule is kept more precisely than
	// the machine lets this process run (replaybench prints the same).
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(time.Millisecond)
			if late := time.Since(t0) - time.Millisecond; late > 5*time.Millisecond {
				fmt.Fprintf(hiccups, "%d %d\n", t0.UnixNano(), late)
			}
		}
	}()
	writeSample := func(phase string) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b, _ := json.Marshal(sample{Phase: phase, UnixNS: time.Now().UnixNano(), RSSKiB: rssKiB(), Goroutines: runtime.NumGoroutine(),
			HeapKiB: int64(ms.HeapInuse >> 10), Done: prog.Done.Load(), InFlight: prog.InFlight.Load()})
		samples.Write(append(b, '\n')) // one write(2) a line: a kill -9 leaves whole lines
	}
	go func() {
		tick := time.NewTicker(*every)
		fast := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		defer fast.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				writeSample("run")
			case <-fast.C:
				fmt.Fprintf(progress, "%d %d\n", time.Now().UnixNano(), prog.Done.Load())
			}
		}
	}()
	before := runtime.NumGoroutine()
	writeSample("before")
	sum, err := replay.Run(ctx, sess.Options)
	if err != nil {
		return err
	}
	name := sess.Options.Client.HTTPClientName()
	sess.Options.Client.Close() // the idle keep-alive connections (net/http: two goroutines each)
	// Connections close asynchronously: settle for up to 5 s back to the count before Run.
	for t0 := time.Now(); runtime.NumGoroutine() > before && time.Since(t0) < 5*time.Second; {
		time.Sleep(10 * time.Millisecond)
	}
	writeSample("after")
	fmt.Printf("replayer: %d records, lateness p99 %.3f ms, client %s\n", sum.Requests, sum.Lateness.P99, name)
	return nil
}

// rssKiB reads the process's resident set size from /proc/self/status.
func rssKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return -1
}

// toxicSet is one entry of the toxic schedule: the toxics switched on together.
type toxicSet struct {
	name   string
	toxics []string // toxiproxy's JSON, each with a unique name
}

// schedule is what the soak switches on, in turn, each for -toggle with -toggle off
// between. Toxicity below 1 hits a share of the connections (drawn per connection).
var schedule = []toxicSet{
	{"latency 20±10 ms both ways", []string{
		`{"name":"lat_up","type":"latency","stream":"upstream","toxicity":1,"attributes":{"latency":20,"jitter":10}}`,
		`{"name":"lat_down","type":"latency","stream":"downstream","toxicity":1,"attributes":{"latency":20,"jitter":10}}`}},
	{"bandwidth 16 KB/s per connection", []string{
		`{"name":"bw","type":"bandwidth","stream":"downstream","toxicity":1,"attributes":{"rate":16}}`}},
	{"slicer 1-7 B on 10% of connections", []string{
		`{"name":"slicer","type":"slicer","stream":"downstream","toxicity":0.1,"attributes":{"average_size":4,"size_variation":3,"delay":100}}`}},
	{"reset_peer after 2 s on 5% of connections", []string{
		`{"name":"reset","type":"reset_peer","stream":"downstream","toxicity":0.05,"attributes":{"timeout":2000}}`}},
	{"silent peer (timeout) on 5% of connections", []string{
		`{"name":"silent","type":"timeout","stream":"downstream","toxicity":0.05,"attributes":{"timeout":0}}`}},
	{"limit_data 32 KiB on 10% of connections", []string{
		`{"name":"limit","type":"limit_data","stream":"downstream","toxicity":0.1,"attributes":{"bytes":32768}}`}},
}

type config struct {
	llmreplay, dir, hc, faults, prompt, output string
	duration, sample, window, toggle, timeout  time.Duration
	ttft, itl                                  time.Duration
	rate                                       float64
	kill                                       bool
}

func soak(args []string) (bool, error) {
	fs := flag.NewFlagSet("soak", flag.ExitOnError)
	var c config
	fs.StringVar(&c.llmreplay, "llmreplay", "", "llmreplay binary (for sim, trace synth, recover); required")
	fs.StringVar(&c.dir, "dir", "", "working folder, kept (default: a new temporary one)")
	fs.DurationVar(&c.duration, "duration", time.Hour, "length of the soak (the trace's schedule)")
	fs.Float64Var(&c.rate, "rate", 20, "Poisson arrivals per second")
	fs.StringVar(&c.prompt, "prompt-tokens", "uniform:64,512", "prompt length DIST")
	fs.StringVar(&c.output, "output-tokens", "uniform:20,200", "output length DIST")
	fs.DurationVar(&c.ttft, "ttft", 50*time.Millisecond, "the sim's fixed TTFT")
	fs.DurationVar(&c.itl, "itl", 10*time.Millisecond, "the sim's fixed ITL")
	fs.StringVar(&c.faults, "faults", "503=0.005,429=0.005,disconnect=0.005,malformed=0.002,stall=0.002:30s,slow-first-byte=0.01:1s",
		"the sim's --fault flags, comma-separated")
	fs.DurationVar(&c.sample, "sample", time.Minute, "RSS and goroutine sampling period")
	fs.DurationVar(&c.window, "window", 5*time.Minute, "lateness window")
	fs.DurationVar(&c.toggle, "toggle", 3*time.Minute, "each toxic set is on for this long, then off for this long")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "the replayer's per-request timeout")
	fs.StringVar(&c.hc, "http-client", "auto", "the replayer's --http-client")
	fs.BoolVar(&c.kill, "kill", false, "end with a kill -9 of the replayer at -duration (its trace goes on) and `llmreplay recover`")
	fs.Parse(args)
	if c.llmreplay == "" {
		return false, errors.New("-llmreplay is required")
	}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "soak")
		if err != nil {
			return false, err
		}
		c.dir = d
	} else if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return false, err
	}
	zerolog.SetGlobalLevel(zerolog.Disabled)
	fmt.Printf("soak: %v at %g req/s, sim fixed TTFT %v ITL %v with faults %s, toxics toggled every %v, timeout %v, kill %v; folder %s\n",
		c.duration, c.rate, c.ttft, c.itl, c.faults, c.toggle, c.timeout, c.kill, c.dir)

	// The trace: with -kill it goes on past the kill.
	span := c.duration
	if c.kill {
		span += c.duration/2 + time.Minute
	}
	tracePath := filepath.Join(c.dir, "trace.parquet")
	if out, err := exec.Command(c.llmreplay, "trace", "synth", "--arrival", "poisson", "--rate", fmt.Sprint(c.rate),
		"--duration", span.String(), "--prompt-tokens", c.prompt, "--output-tokens", c.output, "--seed", "1",
		"-o", tracePath).CombinedOutput(); err != nil {
		return false, fmt.Errorf("trace synth: %v: %s", err, out)
	}

	// The engine.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	simArgs := []string{"sim", "--addr", "127.0.0.1:0", "--profile", "fixed", "--ttft", c.ttft.String(), "--itl", c.itl.String()}
	for _, f := range strings.Split(c.faults, ",") {
		if f = strings.TrimSpace(f); f != "" {
			simArgs = append(simArgs, "--fault", f)
		}
	}
	simCmd := exec.CommandContext(ctx, c.llmreplay, simArgs...)
	simErr, _ := simCmd.StderrPipe()
	if err := simCmd.Start(); err != nil {
		return false, err
	}
	defer func() { cancel(); simCmd.Wait() }()
	simAddr, err := simAddress(simErr)
	if err != nil {
		return false, err
	}

	// The proxy.
	api := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(api, "sim", "127.0.0.1:0", simAddr)
	if err := proxy.Start(); err != nil {
		return false, err
	}
	defer proxy.Stop()

	// The replayer.
	out := filepath.Join(c.dir, "results.parquet")
	samplesPath, progressPath := filepath.Join(c.dir, "samples.jsonl"), filepath.Join(c.dir, "progress.log")
	hiccupsPath := filepath.Join(c.dir, "hiccups.log")
	for _, p := range []string{out, out + results.JournalSuffix, samplesPath, progressPath, hiccupsPath} {
		os.Remove(p)
	}
	self, _ := os.Executable()
	rep := exec.Command(self, "replayer", "-endpoint", "http://"+proxy.Listen+"/v1", "-trace", tracePath, "-o", out,
		"-timeout", c.timeout.String(), "-http-client", c.hc, "-sample", c.sample.String(),
		"-samples", samplesPath, "-progress", progressPath, "-hiccups", hiccupsPath)
	logf, err := os.Create(filepath.Join(c.dir, "replayer.log"))
	if err != nil {
		return false, err
	}
	defer logf.Close()
	rep.Stdout, rep.Stderr = logf, logf
	if err := rep.Start(); err != nil {
		return false, err
	}
	start := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- rep.Wait() }()

	// The toxic schedule, until the replayer ends or is killed.
	var toggles atomic.Int64
	stopToggles := make(chan struct{})
	toggled := make(chan struct{})
	go func() {
		defer close(toggled)
		toggle(proxy, c.toggle, start, stopToggles, &toggles)
	}()

	var killAt time.Time
	var runErr error
	if c.kill {
		select {
		case runErr = <-exited:
			return false, fmt.Errorf("the replayer ended before the kill: %v (see %s)", runErr, logf.Name())
		case <-time.After(time.Until(start.Add(c.duration))):
		}
		killAt = time.Now()
		rep.Process.Signal(syscall.SIGKILL)
		<-exited
		fmt.Printf("kill -9 of the replayer at %v\n", killAt.Sub(start).Round(time.Millisecond))
		b, err := exec.Command(c.llmreplay, "recover", out+results.JournalSuffix, "-o", out).CombinedOutput()
		if err != nil {
			return false, fmt.Errorf("recover: %v: %s", err, b)
		}
		fmt.Printf("llmreplay recover: %s", b)
	} else {
		limit := c.duration + c.timeout + 5*time.Second + 2*time.Minute
		select {
		case runErr = <-exited:
		case <-time.After(time.Until(start.Add(limit))):
			rep.Process.Signal(syscall.SIGQUIT) // its goroutines' stacks go to the log
			return false, fmt.Errorf("the replayer hangs %v after its start (see %s)", limit, logf.Name())
		}
		if runErr != nil {
			return false, fmt.Errorf("replayer: %v (see %s)", runErr, logf.Name())
		}
	}
	close(stopToggles)
	select {
	case <-toggled:
	case <-time.After(15 * time.Second): // a change blocked in toxiproxy (toggle says so)
	}
	fmt.Printf("toxic sets switched on %d times\n", toggles.Load())
	return check(c, tracePath, out, samplesPath, progressPath, hiccupsPath, killAt)
}

var servingRe = regexp.MustCompile(`at http://([0-9.:]+)/v1`)

// simAddress reads the sim's stderr up to the line that gives its address, and drains
// the rest in the background.
func simAddress(r interface{ Read([]byte) (int, error) }) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if m := servingRe.FindStringSubmatch(sc.Text()); m != nil {
			go func() {
				for sc.Scan() {
				}
			}()
			return m[1], nil
		}
	}
	return "", errors.New("the sim exited before serving")
}

// toggle switches the schedule's sets on and off in turn: off for the first period, then
// set 1 on, off, set 2 on, ... cycling, until stop.
//
// toxiproxy v2.5.0 can block for ever removing or adding a toxic: a toxic that holds data
// for a connection whose client is gone waits to pass it on, and the change waits for
// that toxic. Each change is given 10 s; one that takes longer stops the schedule (the
// report says so) rather than the soak.
func toggle(p *toxiproxy.Proxy, every time.Duration, start time.Time, stop <-chan struct{}, n *atomic.Int64) {
	within := func(f func()) bool {
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}
	for i := 1; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(time.Until(start.Add(time.Duration(i) * every))):
		}
		at := time.Since(start).Round(time.Second)
		var ok bool
		if i%2 == 1 {
			set := schedule[(i/2)%len(schedule)]
			ok = within(func() {
				for _, x := range set.toxics {
					if _, err := p.Toxics.AddToxicJson(strings.NewReader(x)); err != nil {
						fmt.Printf("  %v add toxic: %v\n", at, err)
					}
				}
			})
			n.Add(1)
			fmt.Printf("  %8v on:  %s\n", at, set.name)
		} else {
			ok = within(func() { p.Toxics.ResetToxics(context.Background()) })
			fmt.Printf("  %8v off\n", at)
		}
		if !ok {
			fmt.Printf("WARN %v: toxiproxy did not apply the change within 10 s (a toxic blocked on a closed connection): the toxic schedule stops here\n", at)
			return
		}
	}
}

// check reads what the run left and prints the report; false when a check fails.
func check(c config, tracePath, out, samplesPath, progressPath, hiccupsPath string, killAt time.Time) (bool, error) {
	ok := true
	verdict := func(pass bool, format string, a ...any) {
		word := "PASS"
		if !pass {
			word, ok = "FAIL", false
		}
		fmt.Printf("%s %s\n", word, fmt.Sprintf(format, a...))
	}
	res, meta, err := results.ReadFile(out)
	if err != nil {
		return false, err
	}
	dues, err := dueOffsets(tracePath)
	if err != nil {
		return false, err
	}
	seen := map[int64]int{}
	byStatus := map[results.Status]int{}
	for _, r := range res {
		seen[r.RequestID]++
		byStatus[r.Status]++
	}
	dups := 0
	for _, n := range seen {
		if n > 1 {
			dups += n - 1
		}
	}
	fmt.Printf("records by status: %v\n", byStatus)

	if killAt.IsZero() {
		verdict(len(res) == len(dues) && len(seen) == len(dues) && dups == 0,
			"records = due requests: %d records (%d distinct) for %d due", len(res), len(seen), len(dues))
	} else {
		killNS := killAt.UnixNano() - meta.RunStartUnixNS
		bound := killNS - int64(c.timeout) - int64(time.Second)
		due := 0
		for _, d := range dues {
			if d < bound {
				due++
			}
		}
		have := 0
		for _, r := range res {
			if r.ScheduledNS < bound {
				have++
			}
		}
		verdict(have == due && dups == 0, "records = due requests up to kill - timeout - 1 s (%.1f s): %d records for %d due",
			float64(bound)/1e9, have, due)
		// The done count one second before the kill: every record counted then is in the file.
		doneBefore, err := doneAt(progressPath, killAt.Add(-time.Second))
		if err != nil {
			return false, err
		}
		doneLast, _ := doneAt(progressPath, killAt)
		verdict(int64(len(res)) >= doneBefore, "kill -9 then recover: %d records recovered; the replayer had %d done 1 s before the kill (%d at its last count)",
			len(res), doneBefore, doneLast)
	}

	// RSS and goroutines.
	samples, err := readSamples(samplesPath)
	if err != nil {
		return false, err
	}
	runNS := float64(c.duration)
	fmt.Printf("samples every %v (t from the run start; the slopes take those after the first and up to %v, the schedule's end):\n",
		c.sample, c.duration)
	fmt.Printf("  %-6s %8s %9s %10s %9s %8s %9s\n", "phase", "t", "RSS MiB", "goroutines", "heap MiB", "done", "in flight")
	var ts, rss, gor []float64
	var before, after *sample
	nrun := 0
	for i, s := range samples {
		t := float64(s.UnixNS - meta.RunStartUnixNS)
		fmt.Printf("  %-6s %8v %9.1f %10d %9.1f %8d %9d\n", s.Phase, time.Duration(t).Round(time.Second), float64(s.RSSKiB)/1024, s.Goroutines,
			float64(s.HeapKiB)/1024, s.Done, s.InFlight)
		switch s.Phase {
		case "before":
			before = &samples[i]
			continue
		case "after":
			after = &samples[i]
			continue
		}
		if nrun++; nrun == 1 || t > runNS {
			continue
		}
		ts, rss, gor = append(ts, t), append(rss, float64(s.RSSKiB)/1024), append(gor, float64(s.Goroutines))
	}
	if before != nil && after != nil {
		verdict(after.Goroutines <= before.Goroutines, "goroutines after the run (client closed, 5 s to settle): %d; before it: %d",
			after.Goroutines, before.Goroutines)
	}
	if len(ts) >= 3 && c.duration >= 20*c.sample {
		rs, gs := slope(ts, rss)*runNS, slope(ts, gor)*runNS
		rb, gb := math.Max(16, 0.1*median(rss)), math.Max(20, 0.1*median(gor))
		verdict(math.Abs(rs) <= rb, "RSS slope %+.2f MiB over %v (bound ±%.1f MiB; median %.1f MiB)", rs, c.duration, rb, median(rss))
		verdict(math.Abs(gs) <= gb, "goroutine slope %+.1f over %v (bound ±%.1f; median %.0f)", gs, c.duration, gb, median(gor))
	} else {
		// Requests live seconds: over fewer than 20 samples the ramp-up and the Poisson
		// swings of the requests in flight are the slope.
		fmt.Printf("SKIP slopes: %d samples after the first, over %v (want -duration >= 20 x -sample)\n", len(ts), c.duration)
	}

	checkLateness(c, res, meta, hiccupsPath, verdict)
	return ok, nil
}

// dueOffsets returns the due offsets of the trace's requests, in trace order, at speedup 1.
func dueOffsets(tracePath string) ([]int64, error) {
	tr, err := trace.Open(tracePath)
	if err != nil {
		return nil, err
	}
	var dues []int64
	var first int64 = -1
	for tr.Next() {
		q := tr.Request()
		if first < 0 {
			first = int64(q.Arrival)
		}
		dues = append(dues, int64(q.Arrival)-first)
	}
	tr.Close()
	if err := tr.Err(); err != nil {
		return nil, err
	}
	return dues, nil
}

// checkLateness prints the lateness p50, p99 and max per window beside the replayer's
// hiccups, and gives the verdict on the drift of the windows' p99 over the run.
func checkLateness(c config, res []results.Result, meta *results.RunMeta, hiccupsPath string, verdict func(pass bool, format string, a ...any)) {
	runNS := float64(c.duration)
	win := map[int64][]float64{}
	for _, r := range res {
		if r.SentNS != results.Null {
			w := r.ScheduledNS / int64(c.window)
			win[w] = append(win[w], float64(r.SentNS-r.ScheduledNS)/1e6)
		}
	}
	keys := make([]int64, 0, len(win))
	for k := range win {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	hic := hiccupsByWindow(hiccupsPath, meta.RunStartUnixNS, c.window)
	fmt.Printf("lateness per %v window (type 7, ms; hiccup: the latest a 1 ms sleep of the replayer woke, over 5 ms):\n  %10s %7s %8s %8s %8s %8s\n",
		c.window, "window", "sent", "p50", "p99", "max", "hiccup")
	var wt, wp []float64
	for _, k := range keys {
		v := win[k]
		slices.Sort(v)
		p99 := stats.Type7(v, 0.99)
		fmt.Printf("  %10v %7d %8.3f %8.3f %8.3f %8.1f\n", time.Duration(k)*c.window, len(v), stats.Type7(v, 0.5), p99, v[len(v)-1], hic[k])
		if len(v) >= 100 { // a window's p99 from fewer is its max
			wt, wp = append(wt, float64(k)*float64(c.window)), append(wp, p99)
		}
	}
	if len(wt) >= 3 {
		d := slope(wt, wp) * runNS
		b := math.Max(2, 0.5*median(wp))
		verdict(math.Abs(d) <= b, "lateness p99 drift %+.3f ms over %v (bound ±%.3f ms; median window p99 %.3f ms)", d, c.duration, b, median(wp))
	} else {
		fmt.Printf("SKIP drift: %d windows of 100 or more requests (want 3)\n", len(wt))
	}
}

// hiccupsByWindow returns the largest hiccup (ms) of each window of the run clock.
func hiccupsByWindow(path string, runStart int64, window time.Duration) map[int64]float64 {
	out := map[int64]float64{}
	b, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		var ns, late int64
		if _, err := fmt.Sscanf(l, "%d %d", &ns, &late); err == nil {
			w := (ns - runStart) / int64(window)
			out[w] = math.Max(out[w], float64(late)/1e6)
		}
	}
	return out
}

// doneAt returns the replayer's last done count written at or before t.
func doneAt(path string, t time.Time) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var done int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ns, n int64
		if _, err := fmt.Sscanf(sc.Text(), "%d %d", &ns, &n); err != nil {
			continue // a line cut by the kill
		}
		if ns > t.UnixNano() {
			break
		}
		done = n
	}
	return done, sc.Err()
}

func readSamples(path string) ([]sample, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []sample
	for _, l := range strings.Split(string(b), "\n") {
		var s sample
		if json.Unmarshal([]byte(l), &s) == nil && s.UnixNS > 0 {
			out = append(out, s)
		}
	}
	return out, nil
}

// slope is the least-squares slope of y on x.
func slope(x, y []float64) float64 {
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= float64(len(x))
	my /= float64(len(y))
	var sxy, sxx float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return stats.Type7(s, 0.5)
}
