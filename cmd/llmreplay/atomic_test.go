package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/atomicfile/atomicfiletest"
)

// TestSweepStateAtomic: the sweep state is 0644 under the umask (it was 0600), is replaced
// whole, and a failed write keeps the previous state.
func TestSweepStateAtomic(t *testing.T) {
	dir := t.TempDir()
	st := &sweepState{Version: 1, Args: []string{"--speedups", "1,2"}, Started: time.Unix(0, 0).UTC()}
	for _, load := range []float64{1, 2} {
		st.Points = append(st.Points, sweepDone{Load: load, File: "x.parquet"})
		if err := writeSweepState(dir, st); err != nil {
			t.Fatal(err)
		}
		atomicfiletest.Check(t, filepath.Join(dir, sweepStateFile))
		got, err := readSweepState(dir)
		if err != nil || len(got.Points) != len(st.Points) {
			t.Fatalf("read back %+v, %v", got, err)
		}
	}
	path := filepath.Join(dir, sweepStateFile)
	before, _ := os.ReadFile(path)
	boom := errors.New("boom")
	if err := writeFileAtomic(path, func(w io.Writer) error { io.WriteString(w, "{half"); return boom }); !errors.Is(err, boom) {
		t.Fatalf("writeFileAtomic = %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatalf("a failed write changed the state: %q", after)
	}
	atomicfiletest.NoTemp(t, dir)
}
