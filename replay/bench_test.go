package replay

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
)

// benchRecords returns n ok records of 100 one-token chunks each.
func benchRecords(n int) []*Result {
	out := make([]*Result, n)
	for i := range out {
		r := newResult(int64(i), 0, int64(i)*3_000_000, 100, 100)
		r.Status, r.HTTPStatus = results.StatusOK, 200
		r.SentNS = r.ScheduledNS + 20_000
		for k := range 100 {
			r.ChunkNS = append(r.ChunkNS, 50_000_000+int64(k)*10_000_000+int64(i%977))
			r.ChunkTokens = append(r.ChunkTokens, 1)
		}
		r.FirstTokenNS, r.EndNS = r.SentNS+r.ChunkNS[0], r.SentNS+r.ChunkNS[99]
		r.OutputTokens, r.OutputTokensSource, r.PromptTokensServer = 100, results.SourceUsage, 100
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
		j, err := CreateJournal(jp, &results.RunMeta{})
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

// BenchmarkReadStream: the client's cost per streamed chunk (vLLM completions chunks with
// continuous usage), SSE parsing and chunk decoding, no network.
func BenchmarkReadStream(b *testing.B) {
	var body bytes.Buffer
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&body, "data: {\"id\":\"cmpl-8c3f1e2a\",\"object\":\"text_completion\",\"created\":1733140000,\"model\":\"sim-fixed\",\"choices\":[{\"index\":0,\"text\":\" the\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":{\"prompt_tokens\":100,\"total_tokens\":%d,\"completion_tokens\":%d}}\n\n", 100+i, i)
	}
	body.WriteString("data: {\"id\":\"cmpl-8c3f1e2a\",\"object\":\"text_completion\",\"created\":1733140000,\"model\":\"sim-fixed\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"total_tokens\":200,\"completion_tokens\":100}}\n\ndata: [DONE]\n\n")
	raw := body.Bytes()
	c := &Client{}
	s := newSSEReader(nil, func() int64 { return 1 }, 32<<10, 0)
	res := newResult(1, 0, 0, 100, 100)
	ctx := context.Background()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.reset(bytes.NewReader(raw))
		res.ChunkNS, res.ChunkTokens, res.FirstTokenNS = res.ChunkNS[:0], nil, results.Null
		c.readStream(ctx, ctx, s, res, nil)
		if res.Status != results.StatusOK || len(res.ChunkNS) != 100 {
			b.Fatalf("%s %s %d", res.Status, res.Error, len(res.ChunkNS))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/chunk")
}

// BenchmarkJournalAdd: the per-request cost of appending a record to the journal (100
// chunks a record), flushes included, without the conversion to Parquet.
func BenchmarkJournalAdd(b *testing.B) {
	recs := benchRecords(4096)
	j, err := CreateJournal(filepath.Join(b.TempDir(), "r.journal"), &results.RunMeta{})
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
