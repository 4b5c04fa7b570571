package sweep

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/parquet/file"

	"github.com/llmreplay/llmreplay/analysis"
)

// writeHTMLNoStyle writes s's page with the shared style sheet and render-check script
// (analysis's, not the sweep's) left out, so that the golden page holds the sweep's own
// markup and plots only.
func writeHTMLNoStyle(b *bytes.Buffer, s *Report) error {
	var page bytes.Buffer
	if err := s.WriteHTML(&page); err != nil {
		return err
	}
	out := strings.Replace(page.String(), string(analysis.PageStyle), "/* htmlStyle */", 1)
	out = strings.Replace(out, string(analysis.PageScript), "/* htmlScript */", 1)
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

// TestClosedSweepGolden: a closed-loop sweep's table and JSON, byte for byte, and the knee
// they state: saturation at the engine's batch cap (8), the SLO's TTFT failing once
// requests queue (16), the client-limited point at 32 neither passing nor failing.
func TestClosedSweepGolden(t *testing.T) {
	s := closedSweep(t, analysis.SLO{TTFT: 500 * time.Millisecond, TPOT: 25 * time.Millisecond})
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
	cols, rows := parquetColumns(t, s)
	if rows != 6 || !slices.Contains(cols, "error_rate") || !slices.Contains(cols, "sustained_output_tokens_per_s") ||
		slices.ContainsFunc(cols, func(c string) bool { return strings.HasPrefix(c, "offered_") }) {
		t.Errorf("sweep.parquet: %d rows, columns %v: want 6, no offered load", rows, cols)
	}
}

// parquetColumns writes s's sweep.parquet and returns its column names and row count.
func parquetColumns(t *testing.T, s *Report) ([]string, int64) {
	t.Helper()
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
	return cols, f.NumRows()
}
