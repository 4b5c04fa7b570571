package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// suite measures the fidelity targets (docs/replay.md, "Fidelity and cost": CPU per token
// beside the floor's, lateness beside the C sleeper's, the replayer's own TTFT error) in
// one sitting: n rounds of floor, the floor client
// with the reactor's io_uring reads and read batching (a figure beside the reference floor,
// not a target's), fidelity unpinned and fidelity pinned (replayer and sim on a core
// each), interleaved so that the machine's
// drift falls on all three alike, then one sweep at 20 output tokens against the sim on
// its own core; it prints every run's lines as they come and the medians at the end.
// Each run is a child replaybench process, so that its getrusage, its goroutines and file
// descriptors and its CPU pinning are its own; it hands its figures back with -summary.
func suite(args []string) error {
	fs := flag.NewFlagSet("suite", flag.ContinueOnError)
	rounds := fs.Int("n", 5, "rounds of floor, fidelity, pinned fidelity")
	pinR := fs.String("pin-replayer", "0", "pinned runs: the replayer's CPUs (-cpus), with -procs 1")
	pinS := fs.String("pin-sim", "1", "pinned runs and the sweep: the sim's CPUs (-sim-cpus)")
	sweepRates := fs.String("sweep-rates", defaultRates, "sweep: offered rates, requests/s")
	sweepTok := fs.Int("sweep-output-tokens", 20, "sweep: output tokens per request")
	sweepDur := fs.Duration("sweep-duration", 10*time.Second, "sweep: schedule length per rate (at most -duration)")
	sweepCPUs := fs.String("sweep-cpus", "", "sweep: the replayer's CPUs (-cpus; default: unpinned, as `sweep -sim-cpus 1`)")
	noSweep := fs.Bool("no-sweep", false, "leave the sweep out")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpus != "" || *simCPUs != "" || *procs != 0 {
		return errors.New("suite: -cpus, -sim-cpus and -procs are the suite's to set per run (suite -pin-replayer and -pin-sim choose the pinned runs' CPUs)")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "replaybench-suite")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	common := passThrough("cpus", "sim-cpus", "procs", "summary", "rates", "cpuprofile")
	sweepCommon := passThrough("cpus", "sim-cpus", "procs", "summary", "rates", "cpuprofile", "duration", "output-tokens")
	sd := min(*sweepDur, *dur)
	nRates := len(strings.Split(*sweepRates, ","))
	est := time.Duration(*rounds*4) * (*dur + 3*time.Second)
	if !*noSweep {
		est += time.Duration(nRates) * (sd + 3*time.Second)
	}
	fmt.Printf("suite: %d rounds of floor, floor with io_uring and read batching, fidelity, fidelity pinned (-cpus %s -procs 1 -sim-cpus %s), %v each", *rounds, *pinR, *pinS, *dur)
	if !*noSweep {
		fmt.Printf(", then a sweep of %d rates at %d output tokens, %v each, sim on CPUs %s", nRates, *sweepTok, sd, *pinS)
	}
	fmt.Printf(": about %v; load average %s\n", est.Round(time.Second), loadavg())

	var failed []string
	k := 0
	run := func(label string, common []string, extra ...string) *runSummary {
		k++
		path := filepath.Join(dir, fmt.Sprintf("run%d.json", k))
		argv := append(append(append([]string{}, common...), "-summary", path), extra...)
		fmt.Printf("\n=== %s: replaybench %s\n", label, strings.Join(append(append([]string{}, common...), extra...), " "))
		cmd := exec.Command(self, argv...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", label, err))
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", label, err))
			return nil
		}
		s := new(runSummary)
		if err := json.Unmarshal(b, s); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", label, err))
			return nil
		}
		return s
	}
	var fl, fm, un, pn []*runSummary
	for i := 1; i <= *rounds; i++ {
		r := fmt.Sprintf("round %d/%d", i, *rounds)
		fl = append(fl, run(r+" floor", common, "floor"))
		fm = append(fm, run(r+" floor with io_uring and read batching", common, "-floor-ring", "-floor-batch", rbatch.String(), "floor"))
		un = append(un, run(r+" fidelity unpinned", common, "fidelity"))
		pn = append(pn, run(r+" fidelity pinned", common, "-cpus", *pinR, "-procs", "1", "-sim-cpus", *pinS, "fidelity"))
	}
	var sw *runSummary
	if !*noSweep {
		a := []string{"-output-tokens", fmt.Sprint(*sweepTok), "-sim-cpus", *pinS, "-duration", sd.String(), "-rates", *sweepRates}
		if *sweepCPUs != "" {
			a = append(a, "-cpus", *sweepCPUs)
		}
		sw = run("sweep", sweepCommon, append(a, "sweep")...)
	}
	fmt.Println()
	printSuite(os.Stdout, fl, fm, un, pn, sw, *sweepTok, *pinS)
	if len(failed) > 0 {
		return fmt.Errorf("suite: %d runs failed: %s", len(failed), strings.Join(failed, "; "))
	}
	return nil
}

// passThrough returns the top-level flags the user set, as arguments for a child, except
// the named ones.
func passThrough(except ...string) []string {
	var a []string
	flag.Visit(func(f *flag.Flag) {
		for _, e := range except {
			if f.Name == e {
				return
			}
		}
		a = append(a, "-"+f.Name+"="+f.Value.String())
	})
	return a
}

// suiteRow is one figure across the rounds: its values (NaN where a run gave none), and
// the target its median is held to (check nil: none).
type suiteRow struct {
	name   string
	vals   []float64
	target string
	check  func(median float64) bool
	format string
}

func figure(runs []*runSummary, f func(*runSummary) float64) []float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = math.NaN()
		if r != nil {
			v[i] = f(r)
		}
	}
	return v
}

// own returns a server-joined figure, NaN when the run had no server record.
func own(f func(*serverJoin) float64) func(*runSummary) float64 {
	return func(r *runSummary) float64 {
		if r.ServerRecord != "" {
			return math.NaN()
		}
		return f(&r.Server)
	}
}

func finite(v []float64) []float64 {
	var out []float64
	for _, x := range v {
		if !math.IsNaN(x) {
			out = append(out, x)
		}
	}
	return out
}

// printSuite prints the median table of the suite's runs (fl, fm, un, pn by round, fm
// the floor client with io_uring and read batching; sw the sweep).
func printSuite(out io.Writer, fl, fm, un, pn []*runSummary, sw *runSummary, sweepTok int, pinS string) {
	// over gives, per round, a figure of the unpinned run over the same round's floor.
	over := func(floor []*runSummary, f func(*runSummary) float64) []float64 {
		v := make([]float64, len(un))
		for i := range un {
			v[i] = math.NaN()
			if i < len(floor) && un[i] != nil && floor[i] != nil && floor[i].FloorPerChnk > 0 && f(un[i]) > 0 {
				v[i] = f(un[i]) / floor[i].FloorPerChnk
			}
		}
		return v
	}
	reactor := func(r *runSummary) float64 { return r.ReactorPerTk }
	floorCPU := func(r *runSummary) float64 { return r.FloorPerChnk }
	le := func(b float64) func(float64) bool { return func(m float64) bool { return m <= b } }
	cpu := func(r *runSummary) float64 { return r.CPUPerToken }
	late := func(r *runSummary) float64 { return r.LateP99 }
	slp := func(r *runSummary) float64 { return r.SleeperP99 }
	lateOver := func(r *runSummary) float64 { return r.LateP99 - r.SleeperP99 }
	ownP99 := own(func(j *serverJoin) float64 { return j.OwnTTFTErr.P99 })
	simLate := own(func(j *serverJoin) float64 { return j.SimFirstLate.P99 })
	itlErr := own(func(j *serverJoin) float64 { return j.ITLErr.P99 })
	nom := func(r *runSummary) float64 { return r.TTFTNomP99 }
	hic := func(r *runSummary) float64 { return r.HiccupP99 }
	rows := []suiteRow{
		{name: "floor: minimal epoll client CPU, µs/chunk", vals: figure(fl, floorCPU), format: "%.2f"},
		{name: "floor with io_uring and read batching, µs/chunk", vals: figure(fm, floorCPU), format: "%.2f"},
		{name: "unpinned: replayer CPU, µs/token", vals: figure(un, cpu), format: "%.2f"},
		{name: "unpinned: CPU per token / floor per chunk (same round)", vals: over(fl, cpu), target: "<= 1.3", check: le(1.3), format: "%.2f"},
		{name: "unpinned: reactor threads' CPU, µs/token", vals: figure(un, reactor), format: "%.2f"},
		{name: "unpinned: reactor per token / floor per chunk", vals: over(fl, reactor), format: "%.2f"},
		{name: "unpinned: CPU per token / io_uring+batching floor", vals: over(fm, cpu), format: "%.2f"},
		{name: "unpinned: reactor per token / io_uring+batching floor", vals: over(fm, reactor), format: "%.2f"},
		{name: "unpinned: schedule lateness p99, ms", vals: figure(un, late)},
		{name: "unpinned: C-like sleeper late p99, ms", vals: figure(un, slp)},
		{name: "unpinned: lateness p99 - sleeper p99, ms", vals: figure(un, lateOver), target: "<= +0.2", check: le(0.2)},
		{name: "unpinned: 1 ms goroutine sleep late p99, ms", vals: figure(un, hic)},
		{name: "unpinned: replayer's own TTFT error p99, ms", vals: figure(un, ownP99), target: "<= 1", check: le(1)},
		{name: "unpinned: ITL error per server write p99, ms", vals: figure(un, itlErr)},
		{name: "unpinned: TTFT - nominal p99, ms", vals: figure(un, nom)},
		{name: "unpinned: sim first-write lateness p99, ms", vals: figure(un, simLate)},
		{name: "pinned: replayer CPU, µs/token", vals: figure(pn, cpu), format: "%.2f"},
		{name: "pinned: schedule lateness p99, ms", vals: figure(pn, late), target: "<= 1", check: le(1)},
		{name: "pinned: C-like sleeper late p99, ms", vals: figure(pn, slp)},
		{name: "pinned: replayer's own TTFT error p99, ms", vals: figure(pn, ownP99), target: "<= 1", check: le(1)},
		{name: "pinned: ITL error per server write p99, ms", vals: figure(pn, itlErr)},
		{name: "pinned: TTFT - nominal p99, ms", vals: figure(pn, nom), target: "<= 3", check: le(3)},
		{name: "pinned: sim first-write lateness p99, ms", vals: figure(pn, simLate)},
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "figure\truns, in round order\tmedian\ttarget\t\n")
	for _, r := range rows {
		f := r.format
		if f == "" {
			f = "%.3f"
		}
		var vs []string
		for _, v := range r.vals {
			if math.IsNaN(v) {
				vs = append(vs, "-")
			} else {
				vs = append(vs, fmt.Sprintf(f, v))
			}
		}
		m := median(finite(r.vals))
		ms, verdict := "-", ""
		if !math.IsNaN(m) {
			ms = fmt.Sprintf(f, m)
			if r.check != nil {
				verdict = "met"
				if !r.check(m) {
					verdict = "NOT met"
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s %s\t\n", r.name, strings.Join(vs, " "), ms, r.target, verdict)
	}
	for _, g := range []struct {
		name string
		runs []*runSummary
	}{{"unpinned", un}, {"pinned", pn}} {
		var oks, leaks []string
		allOK, allBack := true, true
		for _, r := range g.runs {
			if r == nil {
				// A failed run fails "all ok"; its goroutines are unknown, not a leak.
				oks, leaks, allOK = append(oks, "-"), append(leaks, "-"), false
				continue
			}
			oks = append(oks, fmt.Sprintf("%d/%d/%d", r.OK, r.Sent, r.Requests))
			allOK = allOK && r.OK == r.Requests && r.Sent == r.Requests
			leaks = append(leaks, fmt.Sprintf("%d>%d,%d>%d", r.Goroutines[0], r.Goroutines[1], r.FDs[0], r.FDs[1]))
			allBack = allBack && r.Goroutines[1] <= r.Goroutines[0] && r.FDs[1] <= r.FDs[0]
		}
		fmt.Fprintf(tw, "%s: ok/sent/requests\t%s\t\tall ok %s\t\n", g.name, strings.Join(oks, " "), yes(allOK))
		fmt.Fprintf(tw, "%s: goroutines start>end, fds start>end\t%s\t\tback to start %s\t\n", g.name, strings.Join(leaks, " "), yes(allBack))
	}
	if sw != nil {
		fmt.Fprintf(tw, "sweep: highest rate, lateness p99 < 5 ms, all ok, req/s\t\t%.0f\t>= 1500 %s\t\n", sw.SweepBest, yes(sw.SweepBest >= 1500))
	}
	tw.Flush()
	if sw != nil {
		var pts []string
		for _, p := range sw.Sweep {
			pts = append(pts, fmt.Sprintf("%.0f:%.3f%s", p.Rate, p.LateP99, map[bool]string{true: "", false: "(not all ok)"}[p.OK == p.N && p.N > 0]))
		}
		fmt.Fprintf(out, "sweep at %d output tokens, sim on CPUs %s, req/s:lateness p99 ms: %s\n", sweepTok, pinS, strings.Join(pts, " "))
	}
	for i, r := range append(append([]*runSummary{}, un...), pn...) {
		if r != nil && r.ServerRecord != "" {
			fmt.Fprintf(out, "note: server record unavailable (run %d of the fidelity runs): %s\n", i+1, r.ServerRecord)
			break
		}
	}
	fmt.Fprintln(out, "The C-like sleeper is a thread outside the Go runtime sleeping to absolute deadlines (clock_nanosleep TIMER_ABSTIME) one mean gap of the offered rate apart, in the replayer's process: the floor for schedule lateness. The 1 ms goroutine sleep is Go's timers, another floor. CPU ratio: each round's fidelity CPU per streamed token over the same round's floor CPU per chunk (one token a chunk). The reference floor reads each ready socket with one read(2) a wake-up; the replayer's reactor reads the sockets it finds ready in one io_uring submission and waits --read-batch after each wake, which the second floor does too: the replayer's cost beside a client that reads as it does but parses nothing.")
}

func yes(b bool) string {
	if b {
		return "met"
	}
	return "NOT met"
}
