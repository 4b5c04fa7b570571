package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/llmreplay/llmreplay/internal/repeat"
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

// defaultCooldown is the pause between repeats (and, in a sweep, between points): long
// enough for an engine's queues and in-flight requests of the previous run to drain and its
// metrics to settle; the sweep's idle check waits longer when they have not.
const defaultCooldown = 5 * time.Second

// addRepeatFlag defines --repeat on fs (replay and sweep).
func addRepeatFlag(fs *pflag.FlagSet, n *int, what string) {
	fs.IntVar(n, "repeat", 1, fmt.Sprintf("run each %s N times, --cooldown apart, each repeat with fresh prompts (seed + (r-1)*2^32); files STEM.rK.parquet; analyze reports the median and spread across repeats", what))
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
		if err := replay.CheckOutput(repeat.Path(cfg.Output, r, n), cfg.Force); err != nil {
			return usagef("replay: %v", err)
		}
	}
	first, last := repeat.Path(cfg.Output, 1, n), repeat.Path(cfg.Output, n, n)
	glob := repeat.Glob(cfg.Output, n)
	fmt.Fprintf(stdout, "llmreplay: %d repeats, %v apart: %s … %s (%s)\n", n, cool, first, last, glob)
	var group string
	var strictErr error
	done := 0
	for r := 1; r <= n; r++ {
		if r > 1 && !repeat.Cooldown(ctx, cool) {
			break
		}
		rcfg, rflags := repeat.Config(cfg, flags, r, n)
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
		files[r] = repeat.Path(cfg.Output, r+1, n)
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
			if _, err := os.Lstat(repeat.Path(stem, r, n)); err == nil {
				free = false
			}
		}
		if free {
			return stem
		}
	}
}
