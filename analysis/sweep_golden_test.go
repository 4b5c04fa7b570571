package analysis

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/parquet/file"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// writeHTMLNoStyle writes s's page with the shared style sheet and render-check script
// (html.go's, not the sweep's) left out, so that the golden page holds the sweep's own
// markup and plots only.
func writeHTMLNoStyle(b *bytes.Buffer, s *SweepReport) error {
	var page bytes.Buffer
	if err := s.WriteHTML(&page); err != nil {
		return err
	}
	out := strings.Replace(page.String(), htmlStyle, "/* htmlStyle */", 1)
	out = strings.Replace(out, htmlScript, "/* htmlScript */", 1)
	b.WriteString(out)
	return nil
}

// TestOpenSweepGolden: an open-loop sweep's text, JSON and page, byte for byte.
func TestOpenSweepGolden(t *testing.T) {
	s := sweepOf(t)
	for name, write := range map[string]func(*bytes.Buffer) error{
		"sweep-open.txt":  func(b *bytes.Buffer) error { return s.WriteText(b) },
		"sweep-open.json": func(b *bytes.Buffer) error { return s.WriteJSON(b) },
		"sweep-open.html": func(b *bytes.Buffer) error { return writeHTMLNoStyle(b, s) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		golden(t, name, b.Bytes())
	}
}

// closedSweepRun is a deterministic closed loop of c workers for 30 s against a model engine
// that decodes at most 8 sequences at once, in steps of 10 ms + 1 ms per sequence: above 8
// users a request waits in the queue for (c/8 − 1) mean service times before its prefill.
// Throughput grows with c up to 8 and stays flat after: the saturation is 8. Each worker
// sends its next request when its last one ends (scheduled = that end), late by a fraction
// of a millisecond, or by 30 ms when slowClient. One request in 50 fails at c = 16.
func closedSweepRun(c int, slowClient bool) []row {
	rng := rand.New(rand.NewPCG(uint64(c), 3))
	b := min(c, 8)
	step := int64(10e6 + float64(b)*1e6)
	const meanOut = 40
	service := 15e6 + (meanOut-1)*float64(step)
	wait := int64(math.Max(0, float64(c)/8-1) * service)
	var rows []row
	id := int64(0)
	free := make([]int64, c)
	for {
		w := 0 // the worker free first takes the next request
		for i := range free {
			if free[i] < free[w] {
				w = i
			}
		}
		sched := free[w]
		if sched >= 30e9 {
			break
		}
		late := int64(rng.ExpFloat64() * 0.2e6)
		if slowClient {
			late += 30e6
		}
		sent := sched + late
		prompt := int32(50 + rng.IntN(400))
		out := int32(20 + rng.IntN(41))
		ttft := wait + int64(15e6+float64(prompt)*20e3)
		chunks := []int64{ttft}
		for k := int32(1); k < out; k++ {
			chunks = append(chunks, chunks[k-1]+step+int64(rng.NormFloat64()*0.5e6))
		}
		r := row{id: id, scheduled: sched, sent: p64(sent), chunks: chunks, prompt: prompt, promptServer: p32(prompt),
			outTarget: out, out: p32(out), source: "usage", status: "ok"}
		r.first, r.end = p64(sent+chunks[0]), p64(sent+chunks[len(chunks)-1])
		if c == 16 && id%50 == 7 {
			r = row{id: id, scheduled: sched, sent: p64(sent), prompt: prompt, outTarget: out, status: "http_error", httpStatus: p32(503), err: new(string)}
			r.end = nil
			free[w] = sent + 2e6
		} else {
			free[w] = *r.end
		}
		rows = append(rows, r)
		id++
	}
	return rows
}

// closedSweep analyses closed loops at 1 … 32 users; 32 is client-limited.
func closedSweep(t *testing.T, slo SLO) *SweepReport {
	t.Helper()
	dir := t.TempDir()
	opts := DefaultOptions()
	opts.SLO = slo
	var rows []SweepRow
	for _, c := range []int{1, 2, 4, 8, 16, 32} {
		meta := testRun()
		meta.Mode, meta.Concurrency, meta.Speedup = results.ModeClosed, c, 0
		file := fmt.Sprintf("point-concurrency-%d.parquet", c)
		writeResults(t, filepath.Join(dir, file), meta, closedSweepRun(c, c == 32))
		d, err := Load(context.Background(), decode.LoadOptions{}, filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		row, err := NewSweepRow("concurrency", float64(c), file, d, opts)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	return NewSweepReport("concurrency", rows, stats.KneeOptions{}, nil)
}

// TestClosedSweepGolden: a closed-loop sweep's table and JSON, byte for byte, and the knee
// they state: saturation at the engine's batch cap (8), the SLO's TTFT failing once
// requests queue (16), the client-limited point at 32 neither passing nor failing.
func TestClosedSweepGolden(t *testing.T) {
	s := closedSweep(t, SLO{TTFT: 500 * time.Millisecond, TPOT: 25 * time.Millisecond})
	if b := s.Saturation; !b.Found || b.Pass != 8 || b.Fail != 16 || b.LimitedBy != "endpoint" {
		t.Errorf("saturation %+v, want 8 (to 16)", b)
	}
	if b := s.SLOLimit; !b.Found || b.Pass != 8 || b.Fail != 16 {
		t.Errorf("SLO limit %+v, want 8 (fails at 16)", b)
	}
	for _, r := range s.Rows {
		if got := r.Report.Flags.ClientLimited; got != (r.Load == 32) {
			t.Errorf("concurrency %g: client-limited %v", r.Load, got)
		}
	}
	var txt, js bytes.Buffer
	if err := s.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden(t, "sweep-closed.txt", txt.Bytes())
	golden(t, "sweep-closed.json", js.Bytes())
	for _, bad := range []string{"offer r/s", "offer tok/s", " ratio ", `"offered_`, `"min_ratio"`} {
		if strings.Contains(txt.String(), bad) || strings.Contains(js.String(), bad) {
			t.Errorf("a closed-loop sweep shows %q", bad)
		}
	}
	path := filepath.Join(t.TempDir(), "sweep.parquet")
	if err := s.WriteParquet(path); err != nil {
		t.Fatal(err)
	}
	f, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cols []string
	for i := 0; i < f.MetaData().Schema.NumColumns(); i++ {
		cols = append(cols, f.MetaData().Schema.Column(i).Name())
	}
	if f.NumRows() != 6 || !slices.Contains(cols, "error_rate") || !slices.Contains(cols, "sustained_output_tokens_per_s") ||
		slices.ContainsFunc(cols, func(c string) bool { return strings.HasPrefix(c, "offered_") }) {
		t.Errorf("sweep.parquet: %d rows, columns %v: want 6, no offered load", f.NumRows(), cols)
	}
}
