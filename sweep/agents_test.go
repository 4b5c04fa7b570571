package sweep

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/agent"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/browsertest"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
	"github.com/llmreplay/llmreplay/trace"
)

// The agents axis's fixture: at point N, N agent sessions of three chained calls each,
// recorded as calls of 1 s with gaps of 1 s (a recorded makespan of 5 s), replayed with
// every session started at 0 and session k's calls taking c = 1 + agentStretch[N] + 0.01·k
// seconds (the gaps kept): a makespan of 3c + 2, a slowdown of (3c + 2) / 5 = 1 + 0.6·(c − 1).
// At N = 4 the last session's last call fails (an incomplete session).
var agentStretch = map[int]float64{1: 0, 2: 0.1, 4: 0.3, 8: 0.6}

// agentSlowdown is session k's slowdown at point n, by the formula above.
func agentSlowdown(n, k int) float64 { return 1 + 0.6*(agentStretch[n]+0.01*float64(k)) }

// agentRun is point n's calls.
func agentRun(n int) []*results.Result {
	const s = int64(time.Second)
	var rs []*results.Result
	id := int64(0)
	for k := range n {
		c := int64((1 + agentStretch[n] + 0.01*float64(k)) * float64(s))
		for j := range int64(3) {
			sent := j * (c + s)
			prompt := int32(1000 * (j + 1))
			chunks := make([]int64, 10)
			for i := range chunks {
				chunks[i] = c / 10 * int64(i+1)
			}
			r := okResult(id, sent, sent, prompt, 10, chunks)
			if n == 4 && k == 3 && j == 2 {
				r = results.NewResult(id, 0, sent, prompt, 10)
				r.SentNS, r.Status, r.HTTPStatus = sent, results.StatusHTTPError, 503
			}
			r.SessionID, r.Turn = int64(100+k), int32(j)
			r.RecordedArrivalNS, r.RecordedDurationNS = int64(k)*10*s+j*2*s, s
			if j > 0 {
				r.GapNS = s
			}
			if r.Status == results.StatusOK {
				r.PromptTokensCached = prompt - 1000
			}
			rs = append(rs, r)
			id++
		}
	}
	return rs
}

// agentRows analyses the fixture's points 1, 2, 4 and 8, judged by maxSlowdown.
func agentRows(t *testing.T, maxSlowdown float64) []Row {
	t.Helper()
	dir := t.TempDir()
	var rows []Row
	for _, n := range []int{1, 2, 4, 8} {
		meta := pointMeta()
		meta.Flags = map[string]string{"agent-sessions": fmt.Sprint(n), "sessions": "dag"}
		f := fmt.Sprintf("point-agents-%d.parquet", n)
		writePoint(t, filepath.Join(dir, f), meta, agentRun(n))
		d, err := analysis.Load(context.Background(), decode.LoadOptions{}, filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		row, err := NewRow(Agents, float64(n), f, d, analysis.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		row.MaxSlowdown = maxSlowdown
		rows = append(rows, row)
	}
	return rows
}

// TestAgentSweepKnee: the highest count of agents meeting the slowdown objective, against
// the fixture's slowdowns computed by hand: at 1.2x every session of points 1, 2 and 4 is
// within it (4: 1.18 to 1.192) and none of 8 (1.36 up); point 4's incomplete session does
// not meet it, so 4 has 3 of 4 sessions (75%) and passes at 75% attainment, not at 90%; at
// 1.1x point 4's sessions are all too slow.
func TestAgentSweepKnee(t *testing.T) {
	for _, tc := range []struct {
		maxSlowdown, attainment float64
		pass, fail              float64
		bracketed               bool
	}{
		{1.2, 0.75, 4, 8, true},
		{1.2, 0.90, 2, 4, true},
		{1.1, 0.75, 2, 4, true},
		{1.5, 0.75, 8, 0, false},
	} {
		name := fmt.Sprintf("%gx at %g", tc.maxSlowdown, tc.attainment)
		rows := agentRows(t, tc.maxSlowdown)
		for _, r := range rows {
			n := int(r.Load)
			met, all := 0, n
			for k := range n {
				if !(n == 4 && k == 3) && agentSlowdown(n, k) <= tc.maxSlowdown {
					met++
				}
			}
			want := float64(met) / float64(all)
			if got := r.Point().Attainment; math.Abs(got-want) > 1e-12 {
				t.Errorf("%s: agents %d: attainment %v, want %v", name, n, got, want)
			}
		}
		s := NewReport(Agents, rows, stats.KneeOptions{Attainment: tc.attainment}, nil)
		b := s.SLOLimit
		if !b.Found || b.Pass != tc.pass || b.Bracketed != tc.bracketed || (tc.bracketed && b.Fail != tc.fail) {
			t.Errorf("%s: limit %+v, want %g (fails at %g)", name, b, tc.pass, tc.fail)
		}
		if s.Saturation.Found || s.SaturationBracket != nil {
			t.Errorf("%s: saturation %+v judged on the agents axis", name, s.Saturation)
		}
	}
}

// TestSessionAttainment: an incomplete session and one without a recorded makespan count
// against the objective; no sessions or no objective leave it undefined.
func TestSessionAttainment(t *testing.T) {
	rows := agentRows(t, 1.2)
	r4 := rows[2].Report
	if a := r4.Agents; a.Sessions != 4 || a.Incomplete != 1 || len(a.Slowdowns) != 3 {
		t.Fatalf("point 4: %d sessions, %d incomplete, %d slowdowns: the fixture changed", a.Sessions, a.Incomplete, len(a.Slowdowns))
	}
	if got := SessionAttainment(r4, 1.2); got != 0.75 {
		t.Errorf("point 4 at 1.2x: %v, want 0.75 (the incomplete session fails)", got)
	}
	if got := SessionAttainment(r4, 0); !math.IsNaN(got) {
		t.Errorf("without an objective: %v, want NaN", got)
	}
	if got := SessionAttainment(&analysis.Report{}, 1.2); !math.IsNaN(got) {
		t.Errorf("without agents: %v, want NaN", got)
	}
	// Every session incomplete: no makespan or slowdown ("-"), not 0 s, and none meets it.
	failed := Row{Axis: Agents, Load: 2, MaxSlowdown: 1.2, Report: &analysis.Report{Agents: &agent.Report{Sessions: 2, Incomplete: 2}}}
	for _, c := range sweepColumns {
		if strings.HasPrefix(c.JSON, "agents.makespan_s.") || strings.HasPrefix(c.JSON, "agents.slowdown.") {
			if got := c.Cell(nil, failed); got != "-" {
				t.Errorf("%s with no complete session: %q, want -", c.JSON, got)
			}
		}
	}
	if got := failed.Point().Attainment; got != 0 {
		t.Errorf("every session incomplete: attainment %v, want 0", got)
	}
}

// TestAgentSweepGolden: an agents sweep's text, JSON and page, byte for byte, its
// sweep.parquet's columns, and no open- or closed-loop column in any of them.
func TestAgentSweepGolden(t *testing.T) {
	s := NewReport(Agents, agentRows(t, 1.2), stats.KneeOptions{Attainment: 0.75}, nil)
	outs := map[string]*bytes.Buffer{}
	for name, write := range map[string]func(*bytes.Buffer) error{
		"sweep-agents.txt":  func(b *bytes.Buffer) error { return s.WriteText(b) },
		"sweep-agents.json": func(b *bytes.Buffer) error { return s.WriteJSON(b) },
		"sweep-agents.html": func(b *bytes.Buffer) error { return writeHTMLNoStyle(b, s) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		outs[name] = &b
		golden(t, name, b.Bytes())
	}
	for _, bad := range []string{"offer", "sustain", "user mean", "goodput", "TPOT", `"min_ratio"`, `"min_gain"`, `"per_user"`} {
		for name, b := range outs {
			if strings.Contains(b.String(), bad) {
				t.Errorf("%s shows %q", name, bad)
			}
		}
	}
	for _, want := range []string{"highest agents count meeting slowdown <= 1.2x for 75.0% of the sessions: agents 4 (fails at 8)", "saturation: not judged"} {
		if !strings.Contains(outs["sweep-agents.txt"].String(), want) {
			t.Errorf("text: no %q", want)
		}
	}
	cols, rows := parquetColumns(t, s)
	for _, c := range []string{"session_attainment", "max_slowdown", "agent_slowdown_p90", "agent_sessions_incomplete"} {
		if !slices.Contains(cols, c) {
			t.Errorf("sweep.parquet: no %s in %v", c, cols)
		}
	}
	if rows != 4 || slices.ContainsFunc(cols, func(c string) bool { return strings.HasPrefix(c, "offered_") }) {
		t.Errorf("sweep.parquet: %d rows, columns %v: want 4, no offered load", rows, cols)
	}
}

// TestAgentsValidate: the agents axis's bad flags and combinations are refused before
// anything is made.
func TestAgentsValidate(t *testing.T) {
	for _, tc := range []struct {
		set  func(c *Config)
		want string
	}{
		{func(c *Config) { c.Axis, c.Loads = Agents, []float64{1, 2.5} }, "agents 2.5: want whole numbers"},
		{func(c *Config) { c.Axis, c.Loads, c.Auto = Agents, nil, true }, "--auto does not search the agents axis"},
		{func(c *Config) { c.Axis, c.MaxSlowdown = Agents, -1 }, "--max-slowdown -1"},
		{func(c *Config) { c.Axis, c.MaxSlowdown = Agents, math.NaN() }, "--max-slowdown NaN"},
		{func(c *Config) { c.Axis, c.Replay.SLO = Agents, "ttft=1s" }, "give --max-slowdown instead"},
		{func(c *Config) { c.MaxSlowdown = 1.2 }, "it goes with --agents"},
		{func(c *Config) { c.Axis, c.Replay.Duration = Agents, time.Minute }, "drop --limit, --duration"},
	} {
		c := testConfig(t.TempDir(), &fakeReplayer{t: t})
		tc.set(c)
		err := c.Validate()
		if err == nil || !IsConfigError(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want a config error containing %q", err, tc.want)
		}
	}
	c := testConfig(t.TempDir(), &fakeReplayer{t: t})
	c.Axis, c.MaxSlowdown = Agents, 1.2
	if err := c.Validate(); err != nil {
		t.Errorf("agents 1,2 at 1.2x: %v", err)
	}
	cfg, flags := c.pointConfig(2, "p.parquet", 2)
	if cfg.AgentSessions != 2 || flags["agent-sessions"] != "2" || flags["agents"] != "" {
		t.Errorf("point at agents 2: --agent-sessions %d, flags %v", cfg.AgentSessions, flags)
	}
}

// TestAgentsNeedAgentTrace: an agents sweep of a trace without agent sessions (the bundled
// sample), or of more agents than the trace has, is refused before the folder is made and
// anything is sent.
func TestAgentsNeedAgentTrace(t *testing.T) {
	agentTrace := writeAgentTrace(t, 3)
	for _, tc := range []struct {
		trace string
		loads []float64
		want  string
	}{
		{"", []float64{1, 2}, "has no agent sessions"},
		{agentTrace, []float64{1, 4}, "agents.parquet has 3 agent sessions: list counts up to 3"},
	} {
		dir := filepath.Join(t.TempDir(), "sweep")
		fr := &fakeReplayer{t: t}
		c := testConfig(dir, fr)
		c.Axis, c.Loads, c.Replay.Trace = Agents, tc.loads, tc.trace
		err := Run(context.Background(), c, nil)
		if err == nil || !IsConfigError(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("trace %q: got %v, want a config error containing %q", tc.trace, err, tc.want)
		}
		if _, serr := os.Stat(dir); !os.IsNotExist(serr) || len(fr.replays) > 0 {
			t.Errorf("trace %q: made %s or replayed %d points before refusing", tc.trace, dir, len(fr.replays))
		}
	}
}

// TestAgentSweepHTMLRendersInChromium: an agents sweep's page draws its two plots (the
// slowdown against the count of agents with the objective and its limit, latency), with a
// silent console.
func TestAgentSweepHTMLRendersInChromium(t *testing.T) {
	bin := chromium(t)
	s := NewReport(Agents, agentRows(t, 1.2), stats.KneeOptions{Attainment: 0.75}, nil)
	page := filepath.Join(t.TempDir(), "sweep.html")
	if err := s.WriteHTMLFile(page); err != nil {
		t.Fatal(err)
	}
	dom := browsertest.RenderCheck(t, bin, page, 2)
	for _, want := range []string{`id="plot-sweep-slowdown"`, "limit: agents 4", "max slowdown 1.2x"} {
		if !strings.Contains(dom, want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// TestAgentSweepRepeats: a repeated agents point's row is its median repeat by slowdown
// p50, its attainment's interval the range of its repeats', and the SLO limit's bracket
// judges the points at its ends; no saturation bracket. The fixture's points stand in as
// repeats: agents 2 repeats points 1 and 2 (attainment 1 and 1), agents 4 repeats points 4
// and 8 (0.75 and 0, slowdown p50 1.19 and 1.38).
func TestAgentSweepRepeats(t *testing.T) {
	rows := agentRows(t, 1.2)
	at := func(load float64, rs ...Row) Row {
		for i := range rs {
			rs[i].Load = load
		}
		return NewRepeatedRow(rs, nil)
	}
	two, four := at(2, rows[0], rows[1]), at(4, rows[2], rows[3])
	if four.File != "point-agents-4.parquet" || four.Spread.Attainment != (Span{0, 0.75}) {
		t.Errorf("agents 4: the row of %s, attainment %+v: want point 4's, [0, 0.75]", four.File, four.Spread.Attainment)
	}
	s := NewReport(Agents, []Row{two, four}, stats.KneeOptions{Attainment: 0.75}, nil)
	if s.SLOLimit.Pass != 4 || s.SLOBracket == nil || s.SLOBracket.Low.Pass != 2 || s.SLOBracket.Low.Fail != 4 || s.SLOBracket.High.Pass != 4 {
		t.Errorf("limit %+v, bracket %+v: want 4, from 2 (fails at 4) to 4", s.SLOLimit, s.SLOBracket)
	}
	if s.SaturationBracket != nil {
		t.Errorf("saturation bracket %+v on the agents axis", s.SaturationBracket)
	}
	var b bytes.Buffer
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "median repeat by slowdown p50") {
		t.Errorf("text: no median by slowdown p50:\n%s", b.String())
	}
	if k := (Row{Axis: Agents, Report: &analysis.Report{}}).medianKey(); !math.IsInf(k, 1) {
		t.Errorf("a repeat without a slowdown sorts at %v, want last (+Inf)", k)
	}
}

// writeAgentTrace writes a trace of n agent sessions of 2 calls each, and returns its path.
func writeAgentTrace(t *testing.T, n int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agents.parquet")
	w, err := trace.Create(path, trace.Meta{Source: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 * n {
		c := trace.NewCall()
		if i >= n {
			c.Parents, c.Gap, c.GapKind = []int64{i - n}, time.Second, trace.GapTool
		}
		if err := w.Write(trace.Request{ID: i, Arrival: time.Duration(i) * time.Second, PromptTokens: 100, OutputTokens: 10,
			SessionID: i % n, HasSession: true, Call: c}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// agentReplayer "replays" point N by writing the fixture's point N (agentRun).
type agentReplayer struct {
	t       *testing.T
	replays []Replay
}

func (f *agentReplayer) Check(*replay.Config) error { return nil }

func (f *agentReplayer) Replay(_ context.Context, r Replay) (string, error) {
	f.replays = append(f.replays, r)
	meta := pointMeta()
	meta.Flags = r.Flags
	writePoint(f.t, r.Config.Output, meta, agentRun(r.Config.AgentSessions))
	return fmt.Sprintf("run-%d", len(f.replays)), nil
}

// TestRunAgents: a whole agents sweep through Run: each point replays --agent-sessions N
// with its own seed, and the reports in the folder give the limit the fixture's slowdowns
// do (4, failing at 8, at 1.2x for 75%).
func TestRunAgents(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sweep")
	fr := &agentReplayer{t: t}
	c := testConfig(dir, fr)
	c.Axis, c.Loads, c.Replay.Trace, c.MaxSlowdown, c.Attainment, c.Cooldown = Agents, []float64{1, 2, 4, 8}, writeAgentTrace(t, 8), 1.2, 75, 0
	if err := Run(context.Background(), c, nil); err != nil {
		t.Fatal(err)
	}
	seeds := map[uint64]bool{}
	for i, r := range fr.replays {
		want := int(c.Loads[i])
		if r.Config.AgentSessions != want || r.Flags["agent-sessions"] != fmt.Sprint(want) || !strings.Contains(r.Config.Output, fmt.Sprintf("agents-%d.parquet", want)) {
			t.Errorf("point %d: --agent-sessions %d (flag %q), output %s: want %d", i+1, r.Config.AgentSessions, r.Flags["agent-sessions"], r.Config.Output, want)
		}
		seeds[r.Config.Seed] = true
	}
	if len(fr.replays) != 4 || len(seeds) != 4 {
		t.Errorf("%d replays, %d seeds: want 4 of each", len(fr.replays), len(seeds))
	}
	b, err := os.ReadFile(filepath.Join(dir, "sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Axis     string
		SLOLimit struct {
			PassLoad float64 `json:"pass_load"`
			FailLoad float64 `json:"fail_load"`
		} `json:"slo_limit"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Axis != Agents || got.SLOLimit.PassLoad != 4 || got.SLOLimit.FailLoad != 8 {
		t.Errorf("sweep.json: axis %q, limit %+v: want agents, 4 (fails at 8)", got.Axis, got.SLOLimit)
	}
}
