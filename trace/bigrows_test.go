package trace

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/parquet/file"
)

// TestLongBlockListsBounded: rows of 1,000 prefix blocks (a recording's 16,000-token
// prompts, 8 KB a row, incompressible salted ids) end row groups by size and read in
// batches of about batchBlocks ids, not batchRows rows: so neither the writer nor the
// reader holds a row count's worth of such rows. Every row reads back as written.
func TestLongBlockListsBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	reqs := make([]Request, 3000)
	for i := range reqs {
		b := make([]int64, 1000)
		for k := range b {
			b[k] = int64(rng.Uint64())
		}
		reqs[i] = Request{ID: int64(i), Arrival: time.Duration(i) * time.Millisecond, PromptTokens: 16000, OutputTokens: 1, PrefixBlocks: b}
	}
	path := filepath.Join(t.TempDir(), "long.parquet")
	writeFile(t, path, Meta{BlockTokens: 16}, reqs)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := file.NewParquetReader(f)
	if err != nil {
		t.Fatal(err)
	}
	// 24 MB of ids in row groups of about rowGroupBytes: two at least.
	if n := pf.NumRowGroups(); n < 2 {
		t.Errorf("%d row groups for %d MB of block ids, want them cut at %d MiB", n, 3000*1000*8>>20, rowGroupBytes>>20)
	}
	pf.Close()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []Request
	most := 0
	for r.Next() {
		got = append(got, r.Request())
		most = max(most, int(r.rec.NumRows()))
	}
	if r.Err() != nil || !reflect.DeepEqual(got, reqs) {
		t.Fatalf("read back %d rows, %v", len(got), r.Err())
	}
	if most*1000 > batchBlocks+1000 || most < 64 {
		t.Errorf("read batches of up to %d rows (%d ids), want about %d ids", most, most*1000, batchBlocks)
	}
}
