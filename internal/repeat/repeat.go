// Package repeat names and seeds the repeats of a repeated run, so that `replay --repeat`
// and each point of `sweep --repeat` lay out their files and choose their prompts the same
// way: repeat r of n of OUT.parquet is OUT.rK.parquet, replayed with the seed + (r−1)·2^32.
package repeat

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/trace"
)

// SeedShift spaces the repeats' prompt seeds: repeat r of a run (or of a sweep point)
// replays with the seed + (r−1)·2^32, so repeat 1 is exactly the run without --repeat and
// no repeat sends a prompt an earlier one sent (a server's prefix cache warmed by repeat 1
// must not serve repeat 2).
const SeedShift = 32

// Max bounds --repeat so that the repeats' seeds stay below the next sweep point's: the
// sweep spaces its points' seeds 2^40 apart, which leaves room for 2^(40−32) repeats (the
// sweep's tests hold the two together).
const Max = 1 << 8

// Path names repeat r of n of the results file out: STEM.rK.EXT, K zero-padded to the
// width of n so the repeats sort in order (results.parquet → results.r1.parquet …;
// results.r01.parquet … when n ≥ 10). n ≤ 1 keeps out.
func Path(out string, r, n int) string {
	if n <= 1 {
		return out
	}
	ext := filepath.Ext(out)
	return fmt.Sprintf("%s.r%0*d%s", strings.TrimSuffix(out, ext), len(strconv.Itoa(n)), r, ext)
}

// Glob is a shell pattern matching the n repeat files of out and nothing else beside them
// (STEM.r?.EXT: one ? per digit, so the metrics files STEM.rK.metrics.parquet stay out).
func Glob(out string, n int) string {
	ext := filepath.Ext(out)
	return strings.TrimSuffix(out, ext) + ".r" + strings.Repeat("?", len(strconv.Itoa(n))) + ext
}

// Config returns repeat r of n of the run cfg (flags: its run-metadata flag map): its
// output named by Path and its prompt seed cfg.Seed + (r−1)·2^32.
func Config(cfg replay.Config, flags map[string]string, r, n int) (replay.Config, map[string]string) {
	cfg.Output = Path(cfg.Output, r, n)
	cfg.Seed += uint64(r-1) << SeedShift
	flags = maps.Clone(flags)
	flags["output"], flags["seed"] = cfg.Output, strconv.FormatUint(cfg.Seed, 10)
	return cfg, flags
}

// Check returns why n repeats of cfg cannot run, in the words of the flags, or nil. Shards
// with --start-at start together only once: a repeat's length is not known before it ends
// (the drain after the schedule, a closed loop's pace), so the shards' second repeats
// would not start together and their results would not be one run. Run each repeat of a
// sharded run as its own sharded run, each with its own --start-at.
func Check(n int, cfg *replay.Config) error {
	if n < 1 || n > Max {
		return fmt.Errorf("--repeat %d: want 1 to %d", n, Max)
	}
	if n == 1 {
		return nil
	}
	if cfg.StartAt != "" {
		return fmt.Errorf("--repeat %d with --start-at: only the first repeat could start at the given instant (a repeat's length is not known before it ends), so the shards' later repeats would not start together; run each repeat as its own run with its own --start-at", n)
	}
	if sh, err := trace.ParseShard(cfg.Shard); err == nil && sh.Count > 1 {
		return fmt.Errorf("--repeat %d with --shard %s: the shards' repeats could not start together; run each repeat as its own sharded run with its own --start-at", n, cfg.Shard)
	}
	return nil
}

// Cooldown waits d, or until ctx is done (then it returns false).
func Cooldown(ctx context.Context, d time.Duration) bool {
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
