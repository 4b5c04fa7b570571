package sweep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/repeat"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
)

// resultsFile is a real results file: every fake replay writes a copy of it.
const resultsFile = "../analysis/testdata/mixed.parquet"

// fakeReplayer "replays" by copying resultsFile to the output. It refuses a point at
// speedup 13 in Check, and calls during (if set) in the middle of each replay.
type fakeReplayer struct {
	t       *testing.T
	replays []Replay
	during  func(r Replay)
	fail    error
}

func (f *fakeReplayer) Check(cfg *replay.Config) error {
	if cfg.Speedup == 13 {
		return errors.New("--speedup 13: unlucky")
	}
	return nil
}

func (f *fakeReplayer) Replay(ctx context.Context, r Replay) (string, error) {
	f.replays = append(f.replays, r)
	b, err := os.ReadFile(resultsFile)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(r.Config.Output, b, 0o644); err != nil {
		f.t.Fatal(err)
	}
	os.WriteFile(results.MetricsPath(r.Config.Output), nil, 0o644)
	if f.during != nil {
		f.during(r)
	}
	return "run-" + strconv.Itoa(len(f.replays)), f.fail
}

// testConfig is the CLI's default list sweep at speedups 1 and 2 into dir.
func testConfig(dir string, r Replayer) *Config {
	cfg := replay.DefaultConfig()
	cfg.Seed = 5
	return &Config{Replay: cfg, Flags: map[string]string{"seed": "5", "trace": ""}, Args: []string{"--speedups", "1,2", "-o", dir},
		Given: map[string]bool{"speedups": true, "output": true}, Dir: dir, Axis: Speedup, Loads: []float64{1, 2},
		Start: 1, Max: 1024, Resolution: 0.05, MaxPoints: 24, MinRatio: 0.95, MinGain: 0.1, Attainment: 99,
		Repeat: 1, IdleCheck: true, IdleTimeout: time.Minute, Replayer: r, Stdout: new(bytes.Buffer), Stderr: new(bytes.Buffer)}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"default", func(*Config) {}, ""},
		{"auto", func(c *Config) { c.Auto, c.Loads = true, nil }, ""},
		{"no dir", func(c *Config) { c.Dir = "" }, "-o DIR is required"},
		{"axis", func(c *Config) { c.Axis = "users" }, `axis "users"`},
		{"auto and loads", func(c *Config) { c.Auto = true }, "exactly one of"},
		{"no loads", func(c *Config) { c.Loads = nil }, "exactly one of"},
		{"negative load", func(c *Config) { c.Loads = []float64{1, -2} }, "load -2: every point must be positive"},
		{"half a worker", func(c *Config) { c.Axis, c.Loads = Concurrency, []float64{1.5} }, "concurrency 1.5: want whole numbers"},
		{"repeat", func(c *Config) { c.Repeat = 0 }, "--repeat 0"},
		{"repeat with start-at", func(c *Config) { c.Repeat, c.Replay.StartAt = 2, "2099-01-01T00:00:00Z" }, "--start-at"},
		{"cooldown", func(c *Config) { c.Cooldown = -time.Second }, "--cooldown -1s"},
		{"attainment", func(c *Config) { c.Attainment = 0 }, "--attainment 0"},
		{"min gain", func(c *Config) { c.MinGain = 1 }, "--min-gain 1"},
		{"auto max", func(c *Config) { c.Auto, c.Loads, c.Max = true, nil, 0.5 }, "knee: max load 0.5"},
		{"auto closed loop", func(c *Config) { c.Auto, c.Loads, c.Axis, c.Start = true, nil, Concurrency, 1.5 }, "--start 1.5 and --max 1024 must be whole"},
		{"slo", func(c *Config) { c.Replay.SLO = "ttft=fast" }, "sweep: --slo:"},
		{"point replay", func(c *Config) { c.Replay.MaxInflight = 0 }, "sweep: at speedup 1: --max-inflight 0"},
		{"point check", func(c *Config) { c.Loads = []float64{1, 13} }, "sweep: at speedup 13: --speedup 13: unlucky"},
	} {
		c := testConfig(t.TempDir(), &fakeReplayer{t: t})
		tc.edit(c)
		err := c.Validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if !IsConfigError(err) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "sweep: ") {
			t.Errorf("%s: %v, want a ConfigError containing %q", tc.name, err, tc.want)
		}
	}
	if err := (&Config{}).Validate(); err == nil {
		t.Error("a Config without a Replayer passed")
	}
}

// TestPointConfig: each point replays with the load on its axis, into its own file, with
// a prompt seed 2^40 from the previous point's, and its flag map says so; the repeats of a
// point (2^32 apart) never reach the next point's seeds.
func TestPointConfig(t *testing.T) {
	c := testConfig("d", &fakeReplayer{t: t})
	for n, load := range []float64{0.5, 3} {
		cfg, flags := c.pointConfig(load, "d/p.parquet", n+1)
		want := 5 + uint64(n)<<40
		if cfg.Seed != want || flags["seed"] != strconv.FormatUint(want, 10) || cfg.Speedup != load || !cfg.SpeedupSet ||
			flags["speedup"] != strconv.FormatFloat(load, 'g', -1, 64) || cfg.Output != "d/p.parquet" || flags["output"] != cfg.Output ||
			!cfg.Force || !cfg.Quiet {
			t.Errorf("point %d: %+v, flags %v", n+1, cfg, flags)
		}
	}
	if c.Flags["seed"] != "5" || c.Replay.Seed != 5 {
		t.Errorf("pointConfig changed the sweep's own options: %v", c.Flags)
	}
	c.Axis = Concurrency
	if cfg, flags := c.pointConfig(8, "p", 1); cfg.Concurrency != 8 || !cfg.ConcurrencySet || flags["concurrency"] != "8" {
		t.Errorf("concurrency point: %d, flags %v", cfg.Concurrency, flags)
	}
	if uint64(repeat.Max-1)<<repeat.SeedShift >= 1<<pointSeedShift {
		t.Errorf("the last repeat's seed offset reaches the next sweep point's")
	}
}

// sweepJSON is the part of the sweep's JSON report the tests read.
type sweepJSON struct {
	Points []struct {
		Load float64 `json:"load"`
		File string  `json:"file"`
	} `json:"points"`
}

// TestRun: a list sweep runs a replay per point into its folder, records each finished
// point in its state, writes the reports and prints one; the folder then refuses a new
// sweep, and a resume of a sweep interrupted after its first point runs only the second.
func TestRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sw")
	fr := &fakeReplayer{t: t}
	c := testConfig(dir, fr)
	c.JSON = true
	if err := Run(context.Background(), c, nil); err != nil {
		t.Fatalf("%v\n%s", err, c.Stderr)
	}
	if len(fr.replays) != 2 || fr.replays[0].Config.Speedup != 1 || fr.replays[1].Config.Speedup != 2 || fr.replays[1].Flags["seed"] != strconv.FormatUint(5+1<<40, 10) ||
		fr.replays[0].Repeats != 0 {
		t.Errorf("replays %+v", fr.replays)
	}
	st, err := ReadState(dir)
	if err != nil || len(st.Points) != 2 || st.Points[1].File != "point-02-speedup-2.parquet" || strings.Join(st.Args, " ") != "--speedups 1,2 -o "+dir {
		t.Fatalf("state %+v, %v", st, err)
	}
	for _, f := range []string{"sweep.parquet", "sweep.json", "sweep.txt", "sweep.html", "point-01-speedup-1.parquet"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	var rep sweepJSON
	if err := json.Unmarshal(c.Stdout.(*bytes.Buffer).Bytes(), &rep); err != nil || len(rep.Points) != 2 {
		t.Errorf("printed report: %+v, %v", rep, err)
	}
	if log := c.Stderr.(*bytes.Buffer).String(); !strings.Contains(log, "llmreplay: sweep: point 2: speedup 2 -> "+filepath.Join(dir, "point-02-speedup-2.parquet")) ||
		!strings.Contains(log, "llmreplay: sweep: point 2 done in ") || !strings.Contains(log, " tok/s, sustained ") {
		t.Errorf("log:\n%s", log)
	}

	// The folder holds a sweep: a new one is refused, and sends nothing.
	fr2 := &fakeReplayer{t: t}
	if err := Run(context.Background(), testConfig(dir, fr2), nil); err == nil || !strings.Contains(err.Error(), "already holds a sweep") || len(fr2.replays) != 0 {
		t.Errorf("a second sweep into %s: %v, %d replays", dir, err, len(fr2.replays))
	}

	// As if it had stopped after its first point: the resume keeps it, runs the second.
	st.Points = st.Points[:1]
	if err := st.Write(dir); err != nil {
		t.Fatal(err)
	}
	c = testConfig(dir, fr2)
	if err := Run(context.Background(), c, st); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if len(fr2.replays) != 1 || fr2.replays[0].Config.Speedup != 2 || !strings.Contains(c.Stderr.(*bytes.Buffer).String(), "kept speedup 1 from point-01-speedup-1.parquet") {
		t.Errorf("resume replayed %+v\n%s", fr2.replays, c.Stderr)
	}
	if !strings.Contains(c.Stdout.(*bytes.Buffer).String(), "sweep over speedup: 2 points") {
		t.Errorf("the resumed sweep's text report:\n%s", c.Stdout)
	}
}

// TestRunRepeats: a repeated point runs its repeats into their own files, each a
// replay with its place in the group, and the state lists them.
func TestRunRepeats(t *testing.T) {
	dir := t.TempDir()
	fr := &fakeReplayer{t: t}
	c := testConfig(dir, fr)
	c.Loads, c.Repeat = []float64{4}, 3
	if err := Run(context.Background(), c, nil); err != nil {
		t.Fatal(err)
	}
	if len(fr.replays) != 3 {
		t.Fatalf("%d replays, want 3", len(fr.replays))
	}
	for i, r := range fr.replays {
		if r.Repeat != i+1 || r.Repeats != 3 || r.Group != map[bool]string{true: "", false: "run-1"}[i == 0] ||
			r.Config.Output != repeat.Path(filepath.Join(dir, "point-01-speedup-4.parquet"), i+1, 3) ||
			r.Config.Seed != 5+uint64(i)<<repeat.SeedShift {
			t.Errorf("repeat %d: %d of %d, group %q, %s, seed %d", i+1, r.Repeat, r.Repeats, r.Group, r.Config.Output, r.Config.Seed)
		}
	}
	st, err := ReadState(dir)
	if err != nil || len(st.Points) != 1 || strings.Join(st.Points[0].Repeats, " ") != "point-01-speedup-4.r1.parquet point-01-speedup-4.r2.parquet point-01-speedup-4.r3.parquet" {
		t.Fatalf("state %+v, %v", st, err)
	}
	if !strings.Contains(c.Stderr.(*bytes.Buffer).String(), "point 1, 3 repeats: sustained") {
		t.Errorf("log:\n%s", c.Stderr)
	}
}

// TestRunStopped: a stop during the second point drops that point's files (all its
// repeats'), keeps the first in the state and the reports, and says how to resume.
func TestRunStopped(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fr := &fakeReplayer{t: t}
	fr.during = func(r Replay) {
		if r.Config.Speedup == 2 && r.Repeat == 2 {
			cancel()
		}
	}
	c := testConfig(dir, fr)
	c.Repeat = 2
	err := Run(ctx, c, nil)
	if err == nil || !strings.Contains(err.Error(), "sweep: interrupted after 1 points; they are kept in "+dir+": continue with llmreplay sweep --resume "+dir) {
		t.Fatalf("stopped sweep: %v", err)
	}
	st, err := ReadState(dir)
	if err != nil || len(st.Points) != 1 {
		t.Fatalf("state %+v, %v", st, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "point-02-*"))
	if len(files) != 0 {
		t.Errorf("the stopped point left %v", files)
	}
	if _, err := os.Stat(filepath.Join(dir, "sweep.json")); err != nil {
		t.Errorf("no report of the finished point: %v", err)
	}
}

// TestRunFails: a replay's error ends the sweep with the load it failed at, after the
// report of the points before it; a sweep that finished no point writes no report.
func TestRunFails(t *testing.T) {
	dir := t.TempDir()
	boom := errors.New("boom")
	fr := &fakeReplayer{t: t}
	fr.during = func(r Replay) {
		if r.Config.Speedup == 2 {
			fr.fail = boom
		}
	}
	c := testConfig(dir, fr)
	if err := Run(context.Background(), c, nil); !errors.Is(err, boom) || !strings.Contains(err.Error(), "sweep: speedup 2: boom") {
		t.Errorf("failed sweep: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sweep.json")); err != nil {
		t.Errorf("no report of the finished point: %v", err)
	}
	dir = t.TempDir()
	c = testConfig(dir, &fakeReplayer{t: t, fail: boom})
	if err := Run(context.Background(), c, nil); !errors.Is(err, boom) {
		t.Errorf("failed first point: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sweep.json")); err == nil {
		t.Error("a report without a point")
	}
}

// TestRunChecksFirst: a bad point, or a resume without its withheld secrets, is refused
// before the sweep makes its folder or replays anything.
func TestRunChecksFirst(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "never-made")
	fr := &fakeReplayer{t: t}
	c := testConfig(dir, fr)
	c.Loads = []float64{2, 13}
	if err := Run(context.Background(), c, nil); !IsConfigError(err) {
		t.Errorf("bad point: %v", err)
	}
	c = testConfig(dir, fr)
	if err := Run(context.Background(), c, &State{Version: 1, Args: c.Args, Withheld: []string{"header"}}); !IsConfigError(err) || !strings.Contains(err.Error(), "--header") {
		t.Errorf("resume without the header: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) || len(fr.replays) != 0 {
		t.Errorf("made %s (%v) or replayed %d", dir, err, len(fr.replays))
	}
}
