package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/trace"
)

// repeatOf places one run in a repeated run: its 1-based index, the number of repeats and
// the group id (the first repeat's run id; "" for the first repeat, which names it). The
// zero value is a run that is not repeated.
type repeatOf struct {
	index, count int
	group        string
}

// repeatSeedShift spaces the repeats' prompt seeds: repeat r of a run (or of a sweep
// point) replays with the seed + (r−1)·2^32, so repeat 1 is exactly the run without
// --repeat and no repeat sends a prompt an earlier one sent (a server's prefix cache warmed
// by repeat 1 must not serve repeat 2). The sweep's points are 2^40 apart
// (pointSeedShift): up to 256 repeats stay clear of the next point's seeds.
const repeatSeedShift = 32

// maxRepeats bounds --repeat so that the repeats' seeds stay below the next sweep point's.
const maxRepeats = 1 << (pointSeedShift - repeatSeedShift)

// defaultCooldown is the pause between repeats (and, in a sweep, between points): long
// enough for an engine's queues and in-flight requests of the previous run to drain and its
// metrics to settle; the sweep's idle check waits longer when they have not.
const defaultCooldown = 5 * time.Second

// repeatPath names repeat r of n of the results file out: STEM.rK.EXT, K zero-padded to
// the width of n so the repeats sort in order (results.parquet → results.r1.parquet …;
// results.r01.parquet … when n ≥ 10). n ≤ 1 keeps out.
func repeatPath(out string, r, n int) string {
	if n <= 1 {
		return out
	}
	ext := filepath.Ext(out)
	return fmt.Sprintf("%s.r%0*d%s", strings.TrimSuffix(out, ext), len(strconv.Itoa(n)), r, ext)
}

// repeatGlob is a shell pattern matching the n repeat files of out and nothing else beside
// them (STEM.r?.EXT: one ? per digit, so the metrics files STEM.rK.metrics.parquet stay out).
func repeatGlob(out string, n int) string {
	ext := filepath.Ext(out)
	return strings.TrimSuffix(out, ext) + ".r" + strings.Repeat("?", len(strconv.Itoa(n))) + ext
}

// repeatConfig returns repeat r of n of the run cfg (flags: its run-metadata flag map):
// its output named by repeatPath and its prompt seed cfg.Seed + (r−1)·2^32.
func repeatConfig(cfg replay.Config, flags map[string]string, r, n int) (replay.Config, map[string]string) {
	cfg.Output = repeatPath(cfg.Output, r, n)
	cfg.Seed += uint64(r-1) << repeatSeedShift
	flags = maps.Clone(flags)
	flags["output"], flags["seed"] = cfg.Output, strconv.FormatUint(cfg.Seed, 10)
	return cfg, flags
}

// addRepeatFlag defines --repeat on fs (replay and sweep).
func addRepeatFlag(fs *pflag.FlagSet, n *int, what string) {
	fs.IntVar(n, "repeat", 1, fmt.Sprintf("run each %s N times, --cooldown apart, each repeat with fresh prompts (seed + (r-1)*2^32); files STEM.rK.parquet; analyze reports the median and spread across repeats", what))
}

// checkRepeat rejects a --repeat the replay cannot honour. Shards with --start-at start
// together only once: a repeat's length is not known before it ends (the drain after the
// schedule, a closed loop's pace), so the shards' second repeats would not start together
// and their results would not be one run. Run each repeat of a sharded run as its own
// sharded run, each with its own --start-at.
func checkRepeat(cmd string, n int, cfg *replay.Config) error {
	if n < 1 || n > maxRepeats {
		return usagef("%s: --repeat %d: want 1 to %d", cmd, n, maxRepeats)
	}
	if n == 1 {
		return nil
	}
	if cfg.StartAt != "" {
		return usagef("%s: --repeat %d with --start-at: only the first repeat could start at the given instant (a repeat's length is not known before it ends), so the shards' later repeats would not start together; run each repeat as its own run with its own --start-at", cmd, n)
	}
	if sh, err := trace.ParseShard(cfg.Shard); err == nil && sh.Count > 1 {
		return usagef("%s: --repeat %d with --shard %s: the shards' repeats could not start together; run each repeat as its own sharded run with its own --start-at", cmd, n, cfg.Shard)
	}
	return nil
}

// cooldown waits d, or until ctx is done (then it returns false).
func cooldown(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// doReplayRepeats runs n repeats of cfg, cool apart, each printing its report; then the
// report across them. A stop (Ctrl-C) during repeat k keeps repeats 1..k (k's file is
// complete up to the stop, as a stopped replay's) and runs no more.
func doReplayRepeats(ctx context.Context, cfg replay.Config, flags map[string]string, n int, cool time.Duration, stdout, stderr io.Writer) error {
	if err := checkReplayConfig(&cfg); err != nil {
		return err
	}
	if cfg.Output == "" {
		cfg.Output = freeRepeatStem(replay.DefaultOutputName(time.Now(), trace.Shard{Count: 1}), n)
	}
	// Every repeat's output is checked before the first request of the first repeat: a
	// refusal after repeat 1 had run would waste it.
	for r := 1; r <= n; r++ {
		if err := replay.CheckOutput(repeatPath(cfg.Output, r, n), cfg.Force); err != nil {
			return usagef("replay: %v", err)
		}
	}
	first, last := repeatPath(cfg.Output, 1, n), repeatPath(cfg.Output, n, n)
	glob := repeatGlob(cfg.Output, n)
	fmt.Fprintf(stdout, "llmreplay: %d repeats, %v apart: %s … %s (%s)\n", n, cool, first, last, glob)
	var group string
	var strictErr error
	done := 0
	for r := 1; r <= n; r++ {
		if r > 1 && !cooldown(ctx, cool) {
			break
		}
		rcfg, rflags := repeatConfig(cfg, flags, r, n)
		fmt.Fprintf(stderr, "llmreplay: repeat %d of %d -> %s (seed %d)\n", r, n, rcfg.Output, rcfg.Seed)
		id, err := doReplayRepeat(ctx, rcfg, rflags, repeatOf{index: r, count: n, group: group}, stdout, stderr)
		if r == 1 {
			group = id
		}
		if _, isExit := err.(*exitError); err != nil && !isExit {
			if done > 0 {
				fmt.Fprintf(stderr, "llmreplay: repeats 1 to %d are kept (%s)\n", done, glob)
			}
			return err
		} else if err != nil && strictErr == nil {
			strictErr = err // --strict: the exit status once every repeat ran
		}
		done = r
		if ctx.Err() != nil {
			break
		}
	}
	files := make([]string, done)
	for r := range files {
		files[r] = repeatPath(cfg.Output, r+1, n)
	}
	if done < n {
		fmt.Fprintf(stdout, "llmreplay: stopped: repeats 1 to %d of %d kept: %s\n", done, n, strings.Join(files, " "))
	} else {
		fmt.Fprintf(stdout, "llmreplay: %d repeats: %s\n", n, strings.Join(files, " "))
	}
	if done > 1 {
		fmt.Fprintf(stdout, "llmreplay: across the repeats (llmreplay analyze %s):\n", glob)
		if err := writeRepeatsReport(context.WithoutCancel(ctx), files, stdout); err != nil {
			fmt.Fprintf(stderr, "llmreplay: replay: the report across repeats failed: %v\n", err)
		}
	}
	return strictErr
}

// freeRepeatStem returns name, or name with -2, -3, ... before .parquet, the first whose n
// repeat files are all free: the default name of a repeated run is as new as a single
// run's.
func freeRepeatStem(name string, n int) string {
	base := strings.TrimSuffix(name, ".parquet")
	for i := 1; ; i++ {
		stem := name
		if i > 1 {
			stem = base + "-" + strconv.Itoa(i) + ".parquet"
		}
		free := true
		for r := 1; r <= n && free; r++ {
			if _, err := os.Lstat(repeatPath(stem, r, n)); err == nil {
				free = false
			}
		}
		if free {
			return stem
		}
	}
}
