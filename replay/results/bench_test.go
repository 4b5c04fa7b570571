package results

import (
	"path/filepath"
	"testing"
)

// benchRecords returns n ok records of 100 one-token chunks each.
func benchRecords(n int) []*Result {
	out := make([]*Result, n)
	for i := range out {
		r := NewResult(int64(i), 0, int64(i)*3_000_000, 100, 100)
		r.Status, r.HTTPStatus = StatusOK, 200
		r.SentNS = r.ScheduledNS + 20_000
		for k := range 100 {
			r.ChunkNS = append(r.ChunkNS, 50_000_000+int64(k)*10_000_000+int64(i%977))
			r.ChunkTokens = append(r.ChunkTokens, 1)
		}
		r.FirstTokenNS, r.EndNS = r.SentNS+r.ChunkNS[0], r.SentNS+r.ChunkNS[99]
		r.OutputTokens, r.OutputTokensSource, r.PromptTokensServer = 100, SourceUsage, 100
		out[i] = r
	}
	return out
}

// BenchmarkJournalAndConvert: cost per record of journaling and converting to Parquet
// (100 chunks per record).
func BenchmarkJournalAndConvert(b *testing.B) {
	recs := benchRecords(3000)
	dir := b.TempDir()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		jp := filepath.Join(dir, "r.journal")
		j, err := CreateJournal(jp, &RunMeta{})
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			j.Add(r)
		}
		j.Close()
		if _, err := ConvertJournal(jp, filepath.Join(dir, "r.parquet")); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// BenchmarkJournalAdd: the per-request cost of appending a record to the journal (100
// chunks a record), flushes included, without the conversion to Parquet.
func BenchmarkJournalAdd(b *testing.B) {
	recs := benchRecords(4096)
	j, err := CreateJournal(filepath.Join(b.TempDir(), "r.journal"), &RunMeta{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := j.Add(recs[i%len(recs)]); err != nil {
			b.Fatal(err)
		}
	}
}
