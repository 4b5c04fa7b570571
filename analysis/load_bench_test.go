package analysis

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmreplay/llmreplay/analysis/decode"
)

// BenchmarkLoad1M decodes the 1-million-request file of BenchmarkAnalyze1M without
// analysing it: the decoding layer alone, whose per-chunk loop dominates a large analysis.
func BenchmarkLoad1M(b *testing.B) {
	path := filepath.Join(os.TempDir(), "llmreplay-bench-1m.parquet")
	if _, err := os.Stat(path); err != nil {
		writeBenchResults(b, path, 1_000_000)
	}
	b.ReportAllocs()
	for b.Loop() {
		d, err := Load(context.Background(), decode.LoadOptions{}, path)
		if err != nil {
			b.Fatal(err)
		}
		if d.N() != 1_000_000 {
			b.Fatalf("loaded %d requests, want 1000000", d.N())
		}
	}
}
