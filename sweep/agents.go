package sweep

import (
	"fmt"
	"math"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/stats"
	"github.com/llmreplay/llmreplay/trace"
)

// The agents axis (sweep --agents 1,2,4,8): point N is `llmreplay replay --agent-sessions N`,
// the trace's first N agent sessions started at once, and the question it answers is how
// many concurrent agents the deployment carries before a task takes too long: with
// --max-slowdown X a point meets the objective when at least --attainment percent of its
// sessions took at most X times their recorded makespan (SessionAttainment).
//
// Saturation is not judged on this axis. A point is N sessions started together that end
// one by one: its throughput over so short a life is set by how the sessions' lengths
// spread (the tail of one long session lowers it), not by what the endpoint can carry, and
// a gap-bound agent offers no rate to compare it with. The slowdown objective is the knee.

// SessionAttainment is the share of a point's agent sessions (complete and incomplete)
// whose slowdown (makespan / recorded makespan, analysis/agent) is at most maxSlowdown. An
// incomplete session, or a complete one without a recorded makespan, has no slowdown and
// does not meet it. NaN without sessions or without an objective (maxSlowdown 0).
func SessionAttainment(rep *analysis.Report, maxSlowdown float64) float64 {
	a := rep.Agents
	if a == nil || a.Sessions == 0 || !(maxSlowdown > 0) {
		return math.NaN()
	}
	met := 0
	for _, s := range a.Slowdowns { // sorted ascending
		if s > maxSlowdown {
			break
		}
		met++
	}
	return float64(met) / float64(a.Sessions)
}

// agents reports whether the sweep is on the agents axis.
func (s *Report) agents() bool { return s.Axis == Agents }

// judged reports whether the sweep has an objective to find the highest passing load of:
// --slo on the request axes, --max-slowdown on the agents axis.
func (s *Report) judged() bool {
	if s.agents() {
		return s.MaxSlowdown > 0
	}
	return !s.SLO.IsZero()
}

// objectiveText names the objective in the report's first line and its SLO-limit line.
func (s *Report) objectiveText() string {
	return fmt.Sprintf("slowdown <= %sx for %s of the sessions", fmtLoad(s.MaxSlowdown), pct(s.Options.Attainment*100))
}

// writeAgentsText writes an agents sweep's table and its knee.
func (s *Report) writeAgentsText(p func(string, ...any)) {
	s.writePointsTable(p)
	p("\nEach point replays the trace's first N agent sessions, started at once (replay --agent-sessions N).\n")
	p("sessions: complete/incomplete; makespans in s over the complete sessions; slowdown = makespan / recorded\n")
	p("makespan; attain: share of all sessions with slowdown <= --max-slowdown (an incomplete session, or one\n")
	p("without a recorded makespan, does not meet it); cache: prefix-cache hit rate; peak: calls in flight;\n")
	p("latencies in ms; out tok/s over the whole run.\n")
	p("saturation: not judged on the agents axis (a point's throughput is set by how its sessions' lengths spread,\n")
	p("  not by what the endpoint carries): the knee is the slowdown objective\n")
	if s.judged() {
		p("%s\n", s.describe(s.SLOLimit, "highest agents count meeting "+s.objectiveText()))
	}
}

// agentPlots is an agents sweep's plot: the slowdown's p50 and p90 against the count of
// agents, the objective and its limit marked.
func (s *Report) agentPlots() []*analysis.Plot {
	var p50s, p90s, mk [][2]float64
	for _, r := range s.Rows {
		p50s = append(p50s, [2]float64{r.Load, agentQuantile("agent_slowdown", p50)(s, r)})
		p90s = append(p90s, [2]float64{r.Load, agentQuantile("agent_slowdown", p90)(s, r)})
		mk = append(mk, [2]float64{r.Load, 1})
	}
	lo, hi := s.Rows[0].Load, s.Rows[len(s.Rows)-1].Load*1.5
	top := math.Max(analysis.MaxOf(p90s, 1), math.Max(s.MaxSlowdown, 1))
	sp := analysis.NewPlot("plot-sweep-slowdown", "Session slowdown vs concurrent agents", "agents (log scale)", "makespan / recorded", lo, hi, true, 0, top*1.15, false)
	sp.Line(mk, "ref")
	sp.Line(p50s, "s1")
	sp.Line(p90s, "s3")
	sp.Dots(p90s, "dot")
	if s.MaxSlowdown > 0 {
		sp.HLine(s.MaxSlowdown, "slo", "max slowdown "+fmtLoad(s.MaxSlowdown)+"x")
	}
	if s.judged() && s.SLOLimit.Found {
		sp.VLine(s.SLOLimit.Pass, "slo", "limit: agents "+loadText(s.SLOLimit.Pass))
	}
	sp.Legend([2]string{"s1", "slowdown p50"}, [2]string{"s3", "slowdown p90"}, [2]string{"ref", "as recorded (1)"})
	return []*analysis.Plot{sp}
}

// checkAgentTrace reads the sweep's trace and refuses an agents sweep it cannot run: a
// trace without agent sessions (rows with a session_id and the agent columns), or a count
// above the trace's sessions (replay would refuse that point after the earlier ones ran).
// It runs before the sweep makes its folder, so nothing is sent.
func (c *Config) checkAgentTrace() error {
	if c.Axis != Agents {
		return nil
	}
	var r *trace.Reader
	var err error
	if c.Replay.Trace == "" {
		r, err = trace.OpenSample()
	} else {
		r, err = trace.Open(c.Replay.Trace)
	}
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	defer r.Close()
	sessions := map[int64]bool{}
	for r.Next() {
		q := r.Request()
		if q.HasSession && q.Call != nil {
			sessions[q.SessionID] = true
		}
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	if len(sessions) == 0 {
		return configErrorf("sweep: --agents: trace %s has no agent sessions (rows with a %s and the agent columns, docs/trace-format.md \"Agent sessions\"): give an agent trace (llmreplay trace synth --agent-sessions N makes one)",
			r.Name(), trace.ColSessionID)
	}
	top := 0.0
	for _, l := range c.Loads {
		top = math.Max(top, l)
	}
	if int(top) > len(sessions) {
		return configErrorf("sweep: --agents %s: trace %s has %d agent sessions: list counts up to %d", fmtLoad(top), r.Name(), len(sessions), len(sessions))
	}
	return nil
}

// validateAgents checks the flags of the agents axis, and that no other axis has them.
func (c *Config) validateAgents() error {
	if c.Axis != Agents {
		if c.MaxSlowdown != 0 {
			return configErrorf("sweep: --max-slowdown judges agent sessions: it goes with --agents")
		}
		return nil
	}
	switch {
	case c.Auto:
		return configErrorf("sweep: --auto does not search the agents axis: list the counts, such as --agents 1,2,4,8,16")
	case c.MaxSlowdown < 0 || math.IsNaN(c.MaxSlowdown) || math.IsInf(c.MaxSlowdown, 0):
		return configErrorf("sweep: --max-slowdown %v: want a ratio > 0, such as 1.2 for a task taking 20%% longer than recorded", c.MaxSlowdown)
	case c.Replay.SLO != "":
		return configErrorf("sweep: --slo judges requests; the agents axis judges sessions: give --max-slowdown instead")
	}
	return nil
}

// The agents axis's own columns read the agent figures' declarations (analysis/figures.go,
// agent_* keys); their JSON paths are the run report's (agents.makespan_s.p50 ...).

// agentSessionsColumn: complete/incomplete sessions in the text, the complete count in
// the JSON (agentIncompleteColumn the other).
var agentSessionsColumn = sweepColumn{Head: "sessions", Width: 9, Text: onAgents,
	Cell: func(s *Report, r Row) string {
		c, i := sweepFigure("agent_sessions_complete")(s, r), sweepFigure("agent_sessions_incomplete")(s, r)
		return fmt.Sprintf("%.0f/%.0f", c, i)
	},
	JSON: "agents.sessions_complete", OnJSON: onAgents, Value: value(sweepFigure("agent_sessions_complete"))}

var agentIncompleteColumn = sweepColumn{JSON: "agents.sessions_incomplete", OnJSON: onAgents, Value: value(sweepFigure("agent_sessions_incomplete"))}

// agentQuantile is a percentile (p) of a declared agent distribution at a point, NaN when
// it has no sample (no complete session: an empty distribution's quantiles are zeros,
// which would read as a makespan of 0 s).
func agentQuantile(key string, p func(stats.Quantiles) float64) func(*Report, Row) float64 {
	return sweepQuantile(key, func(q stats.Quantiles) float64 {
		if q.N == 0 {
			return math.NaN()
		}
		return p(q)
	})
}

// agentColumn is a percentile (p) of a declared agent distribution, at agents.path.
func agentColumn(key string, p func(stats.Quantiles) float64, path, head string, format func(float64) string) sweepColumn {
	get := agentQuantile(key, p)
	return sweepColumn{Head: head, Width: 10, Text: onAgents, Cell: cell(get, format), JSON: "agents." + path, OnJSON: onAgents, Value: value(get)}
}

// agentScalarColumn is a declared agent scalar, at agents.path.
func agentScalarColumn(key, path, head string, width int, format func(float64) string) sweepColumn {
	get := sweepFigure(key)
	return sweepColumn{Head: head, Width: width, Text: onAgents, Cell: cell(get, format), JSON: "agents." + path, OnJSON: onAgents, Value: value(get)}
}
