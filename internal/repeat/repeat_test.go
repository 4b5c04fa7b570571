package repeat

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay"
)

func TestPath(t *testing.T) {
	for _, c := range []struct {
		out  string
		r, n int
		want string
	}{
		{"results.parquet", 1, 1, "results.parquet"},
		{"results.parquet", 1, 3, "results.r1.parquet"},
		{"x/run.parquet", 3, 3, "x/run.r3.parquet"},
		{"run.parquet", 2, 12, "run.r02.parquet"},
		{"run.parquet", 12, 12, "run.r12.parquet"},
		{"run", 2, 3, "run.r2"},
	} {
		if got := Path(c.out, c.r, c.n); got != c.want {
			t.Errorf("Path(%q, %d, %d) = %q, want %q", c.out, c.r, c.n, got, c.want)
		}
	}
	// The glob matches every repeat and not the metrics files beside them; the names sort
	// in repeat order.
	for _, n := range []int{3, 12} {
		glob := Glob("d/results.parquet", n)
		var names []string
		for r := 1; r <= n; r++ {
			p := Path("d/results.parquet", r, n)
			names = append(names, p)
			if ok, _ := filepath.Match(glob, p); !ok {
				t.Errorf("glob %q does not match %q", glob, p)
			}
			if ok, _ := filepath.Match(glob, strings.TrimSuffix(p, ".parquet")+".metrics.parquet"); ok {
				t.Errorf("glob %q matches the metrics file of %q", glob, p)
			}
		}
		if !slices.IsSorted(names) {
			t.Errorf("repeat files do not sort in order: %v", names)
		}
	}
}

// TestConfigSeeds: repeat 1 is the run without --repeat (same seed), repeat r adds
// (r−1)·2^32 and is written to its own file.
func TestConfigSeeds(t *testing.T) {
	cfg := replay.DefaultConfig()
	cfg.Seed, cfg.Output = 7, "o.parquet"
	for r := 1; r <= 3; r++ {
		c, flags := Config(cfg, map[string]string{"seed": "7"}, r, 3)
		want := 7 + uint64(r-1)<<32
		if c.Seed != want || flags["seed"] != strconv.FormatUint(want, 10) {
			t.Errorf("repeat %d: seed %d (flag %s), want %d", r, c.Seed, flags["seed"], want)
		}
		if c.Output != Path("o.parquet", r, 3) || flags["output"] != c.Output {
			t.Errorf("repeat %d: output %q (flag %q)", r, c.Output, flags["output"])
		}
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		n              int
		startAt, shard string
		want           string
	}{
		{1, "", "0/1", ""},
		{Max, "", "0/1", ""},
		{0, "", "0/1", "--repeat 0: want 1 to 256"},
		{Max + 1, "", "0/1", "--repeat 257"},
		{1, "2099-01-01T00:00:00Z", "1/2", ""}, // one repeat starts together like any run
		{2, "2099-01-01T00:00:00Z", "0/1", "--start-at"},
		{2, "", "0/2", "--shard 0/2"},
	} {
		cfg := replay.DefaultConfig()
		cfg.StartAt, cfg.Shard = c.startAt, c.shard
		err := Check(c.n, &cfg)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Check(%d, start-at %q, shard %s) = %v, want %q", c.n, c.startAt, c.shard, err, c.want)
		}
	}
}

func TestCooldown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if !Cooldown(ctx, 0) || !Cooldown(ctx, time.Millisecond) {
		t.Error("a cooldown with the context live did not finish")
	}
	cancel()
	if Cooldown(ctx, 0) || Cooldown(ctx, time.Hour) {
		t.Error("a cooldown after the stop went on")
	}
}
