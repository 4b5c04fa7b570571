package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestParseBusy(t *testing.T) {
	page := `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 2
vllm:num_requests_waiting_by_reason{reason="capacity"} 7
sglang:num_queue_reqs 1
`
	busy, known := parseBusy(strings.NewReader(page))
	if !known || busy != 6 {
		t.Errorf("parseBusy = %v, %v; want 6, true (the _by_reason gauge is not a match)", busy, known)
	}
	if _, known := parseBusy(strings.NewReader("# nothing\nfoo 1\n")); known {
		t.Error("a page without the gauges was taken as known")
	}
}

func TestSweepUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--speedups", "1,2"}, "-o DIR is required"},
		{[]string{"-o", dir}, "exactly one of"},
		{[]string{"-o", dir, "--speedups", "1,2", "--rates", "3"}, "exactly one of"},
		{[]string{"-o", dir, "--speedups", "1,-2"}, "must be positive"},
		{[]string{"-o", dir, "--speedup", "2", "--speedups", "1"}, "give --speedups"},
		{[]string{"-o", dir, "--auto", "--auto-axis", "concurrency"}, "--auto-axis"},
		{[]string{"-o", dir, "--auto", "--start", "10", "--max", "5"}, "max load"},
		{[]string{"-o", dir, "--rates", "1", "--attainment", "0"}, "--attainment"},
	} {
		err := runSweep(context.Background(), tc.args, io.Discard, io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sweep %q: got %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
	if err := runSweep(context.Background(), []string{"--resume", t.TempDir()}, io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "sweep-state.json") {
		t.Errorf("resume of an empty dir: got %v, want an error naming the state file", err)
	}
}
