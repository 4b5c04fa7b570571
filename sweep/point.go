package sweep

import (
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"

	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/internal/repeat"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
)

// sweeper is one run of a sweep: its finished points' rows and what it runs next.
type sweeper struct {
	ctx   context.Context
	cfg   *Config
	state *State
	aopts analysis.Options
	ko    stats.KneeOptions
	rows  map[float64]Row
	ran   int // replays run by this process (for the cooldown)
}

// runPoints runs the sweep's points: the list, or the Auto search.
func (sw *sweeper) runPoints() (*stats.KneeResult, error) {
	if sw.cfg.Auto {
		probe := func(ctx context.Context, load float64) (stats.SweepPoint, error) {
			row, err := sw.point(load)
			if err != nil {
				return stats.SweepPoint{}, err
			}
			return row.Point(), nil
		}
		if sw.cfg.Axis == Concurrency {
			return stats.SearchConcurrency(sw.ctx, probe, sw.ko)
		}
		return stats.SearchKnee(sw.ctx, probe, sw.ko)
	}
	for _, l := range sw.cfg.Loads {
		if _, err := sw.point(l); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// point returns the row at load, running a replay for it (one per repeat) unless a
// finished one is kept.
func (sw *sweeper) point(load float64) (Row, error) {
	if r, ok := sw.rows[load]; ok {
		return r, nil
	}
	if err := sw.ctx.Err(); err != nil {
		return Row{}, err
	}
	c := sw.cfg
	n := len(sw.state.Points) + 1
	file := fmt.Sprintf("point-%02d-%s-%s.parquet", n, c.Axis, fmtLoad(load))
	started := time.Now()
	repeats, err := sw.replays(load, n, file)
	if err != nil {
		return Row{}, err
	}
	row, err := sw.analyse(load, file, repeats...)
	if err != nil {
		return Row{}, err
	}
	sw.rows[load] = row
	sw.state.Points = append(sw.state.Points, Finished{Load: load, File: file, Repeats: repeats})
	if err := sw.state.Write(c.Dir); err != nil {
		return Row{}, err
	}
	sw.logPoint(row, n, time.Since(started))
	return row, nil
}

// replays runs point n's replays at load into file (its repeats: files named after it,
// which it returns), each after the cooldown and the idle check. A stop drops the point's
// files: an interrupted point is not a measurement of its load, and a resume reruns it.
func (sw *sweeper) replays(load float64, n int, file string) (repeats []string, _ error) {
	c := sw.cfg
	path := filepath.Join(c.Dir, file)
	cfg, flags := c.pointConfig(load, path, n)
	count := max(c.Repeat, 1)
	group := ""
	for r := 1; r <= count; r++ {
		if sw.ran > 0 && !repeat.Cooldown(sw.ctx, c.Cooldown) {
			sw.removeAll(repeats)
			return nil, sw.ctx.Err()
		}
		sw.ran++
		if c.IdleCheck && c.Replay.Endpoint != "" {
			waitIdle(sw.ctx, c.Replay.Endpoint, c.IdleTimeout, c.Stderr)
		}
		rp := Replay{Config: cfg, Flags: flags}
		if count > 1 {
			rp.Config, rp.Flags = repeat.Config(cfg, flags, r, count)
			rp.Repeat, rp.Repeats, rp.Group = r, count, group
			repeats = append(repeats, filepath.Base(rp.Config.Output))
			fmt.Fprintf(c.Stderr, "llmreplay: sweep: point %d: %s %s, repeat %d of %d -> %s\n", n, c.Axis, fmtLoad(load), r, count, rp.Config.Output)
		} else {
			fmt.Fprintf(c.Stderr, "llmreplay: sweep: point %d: %s %s -> %s\n", n, c.Axis, fmtLoad(load), path)
		}
		id, err := c.Replayer.Replay(sw.ctx, rp)
		if r == 1 {
			group = id
		}
		if sw.ctx.Err() != nil {
			os.Remove(rp.Config.Output)
			os.Remove(results.MetricsPath(rp.Config.Output))
			sw.removeAll(repeats)
			return nil, sw.ctx.Err()
		}
		if err != nil {
			return nil, fmt.Errorf("sweep: %s %s: %w", c.Axis, fmtLoad(load), err)
		}
	}
	return repeats, nil
}

// logPoint says what finished point n measured, in took.
func (sw *sweeper) logPoint(row Row, n int, took time.Duration) {
	c := sw.cfg
	pt := row.Point()
	if sp := row.Spread; sp != nil {
		fmt.Fprintf(c.Stderr, "llmreplay: sweep: point %d, %d repeats: sustained %.1f - %.1f tok/s, TTFT p99 %.1f - %.1f ms (intervals: docs/metrics.md, \"Sweep\"); the row is the median repeat's\n",
			n, sp.Repeats, sp.Sustained.Lo, sp.Sustained.Hi, sp.TTFTP99.Lo, sp.TTFTP99.Hi)
	}
	if c.Axis == Agents {
		a, att := row.Report.Agents, pt.Attainment
		var complete, incomplete int64
		if a != nil {
			complete, incomplete = a.Complete, a.Incomplete
		}
		fmt.Fprintf(c.Stderr, "llmreplay: sweep: point %d done in %s: %d sessions complete, %d incomplete, slowdown p50 %s p90 %s, %s within --max-slowdown%s\n",
			n, took.Round(time.Second), complete, incomplete, f2(agentQuantile("agent_slowdown", p50)(nil, row)),
			f2(agentQuantile("agent_slowdown", p90)(nil, row)), pct(100*att), flagsNote(row.Report))
		return
	}
	if u := row.Report.Unary; u != nil {
		fmt.Fprintf(c.Stderr, "llmreplay: sweep: point %d done in %s: offered %.2f req/s, sustained %.2f req/s (%.1f inputs/s), latency p99 %.1f ms%s\n",
			n, took.Round(time.Second), row.Offered.WindowRequestsPerS, u.SustainedRequestsPerS, u.SustainedInputsPerS, u.Latency.P99, flagsNote(row.Report))
		return
	}
	if c.Axis == Concurrency {
		fmt.Fprintf(c.Stderr, "llmreplay: sweep: point %d done in %s: sustained %.1f tok/s, %.1f tok/s per user (mean), TTFT p99 %.1f ms%s\n",
			n, took.Round(time.Second), pt.SustainedTokensPerSecond, row.Report.PerUser.TokensPerS.Mean,
			row.Report.TTFT.P99, flagsNote(row.Report))
		return
	}
	fmt.Fprintf(c.Stderr, "llmreplay: sweep: point %d done in %s: offered %.1f tok/s, sustained %.1f tok/s, TTFT p99 %.1f ms%s\n",
		n, took.Round(time.Second), pt.OfferedTokensPerSecond, pt.SustainedTokensPerSecond,
		row.Report.TTFT.P99, flagsNote(row.Report))
}

// pointSeedShift spaces the points' prompt seeds (pointConfig): 2^40 apart, room for
// repeat.Max repeats of 2^32 each between two points.
const pointSeedShift = 40

// pointConfig returns the replay of point n (1-based): a copy of the sweep's options with
// the load set on the axis (replay's flags: --speedup, --rate, --concurrency, and
// --agent-sessions on the agents axis),
// the output, and the prompt seed --seed + (n−1)·2^40, and its flag map with the same flags
// as the command line would give them. Each point sends prompt text no earlier point sent:
// the points replay the same trace, and an engine with automatic prefix caching (vLLM's and
// SGLang's default, the simulated engine's) would otherwise serve a later point's prompts
// from the blocks an earlier point left in its cache, and measure cache hits, not the load.
// The prompt builder offsets request and block ids by the seed (docs/prompts.md), so seeds
// 2^40 apart share no prompt unless the trace's ids span more than 2^40.
func (c *Config) pointConfig(load float64, path string, n int) (replay.Config, map[string]string) {
	cfg := c.Replay
	// The sweep owns its folder: a point's file or journal left by an interrupted or killed
	// sweep is not a measurement, and a resume reruns that point over it.
	cfg.Output, cfg.Quiet, cfg.Force = path, true, true
	cfg.Seed += uint64(n-1) << pointSeedShift
	value := fmtLoad(load)
	switch c.Axis {
	case Speedup:
		cfg.Speedup, cfg.SpeedupSet = load, true
	case Rate:
		cfg.Rate, cfg.RateSet = load, true
	case Concurrency:
		cfg.Concurrency, cfg.ConcurrencySet = int(load), true
		value = strconv.Itoa(cfg.Concurrency)
	case Agents:
		cfg.AgentSessions = int(load)
		value = strconv.Itoa(cfg.AgentSessions)
	}
	flags := maps.Clone(c.Flags)
	if flags == nil {
		flags = map[string]string{}
	}
	flag := c.Axis
	if c.Axis == Agents {
		flag = "agent-sessions"
	}
	flags[flag], flags["output"], flags["seed"] = value, path, strconv.FormatUint(cfg.Seed, 10)
	return cfg, flags
}

// flagsNote is a point's progress line's note of its flags (flagNames, buffered aside).
func flagsNote(r *analysis.Report) string {
	s := flagNames(r, false)
	if len(s) == 0 {
		return ""
	}
	return " [" + strings.Join(s, ", ") + "]"
}

// analyse returns the row of the point at load: its file's, or, for a repeated point (its
// repeats' files given), NewRepeatedRow of its repeats' rows and data: its
// median repeat's row, with the intervals across the repeats.
func (sw *sweeper) analyse(load float64, file string, repeats ...string) (Row, error) {
	files := repeats
	if len(files) == 0 {
		files = []string{file}
	}
	rows := make([]Row, 0, len(files))
	data := make([]*decode.Data, 0, len(files))
	for _, f := range files {
		d, err := analysis.Load(sw.ctx, decode.LoadOptions{AllowPartial: true}, filepath.Join(sw.cfg.Dir, f))
		if err != nil {
			return Row{}, err
		}
		row, err := NewRow(sw.cfg.Axis, load, f, d, sw.aopts)
		if err != nil {
			return Row{}, err
		}
		row.MaxSlowdown = sw.cfg.MaxSlowdown
		rows, data = append(rows, row), append(data, d)
	}
	if len(repeats) == 0 {
		return rows[0], nil
	}
	return NewRepeatedRow(rows, data), nil
}

// removeAll removes files of the sweep's folder, with their metrics files.
func (sw *sweeper) removeAll(files []string) {
	for _, f := range files {
		os.Remove(filepath.Join(sw.cfg.Dir, f))
		os.Remove(results.MetricsPath(filepath.Join(sw.cfg.Dir, f)))
	}
}

// fmtLoad formats a load exactly (shortest round-trip form), for flags and file names.
func fmtLoad(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
