package analysis

import (
	"github.com/llmreplay/llmreplay/stats"

	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFigureDeclaredOnce adds one figure to the declaration, and nowhere else, and finds it
// in the text, JSON, summary.parquet, HTML and compare outputs.
func TestFigureDeclaredOnce(t *testing.T) {
	saved := slices.Clone(reportFigures)
	t.Cleanup(func() { reportFigures = saved })
	twice := func(r *Report) float64 { return 2 * r.TTFT.P50 }
	reportFigures = append(reportFigures, Figure{
		Key: "test_twice_ttft_p50_ms", Unit: "ms", JSON: "throughput.test_twice_ttft_p50_ms", Column: "test_twice_ttft_p50_ms",
		Section: "throughput", Text: "test: twice TTFT p50", HTML: "test: twice TTFT p50", Format: f3,
		Compare: &CompareSpec{Name: "test: twice TTFT p50 ms", Relative: true},
		Value:   func(r *Report) any { return twice(r) },
	})

	r, _ := mixedReport(t)
	want := twice(r)
	if math.IsNaN(want) || want == 0 {
		t.Fatalf("the test figure is %v: pick one the run defines", want)
	}
	var text, page, js bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if line := fmt.Sprintf("\n  %-30s %12s\n", "test: twice TTFT p50", f3(want)); !strings.Contains(text.String(), line) {
		t.Errorf("text report lacks %q:\n%s", line, text.String())
	}
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if cell := "<tr><th>test: twice TTFT p50</th><td>" + f3(want) + "</td></tr>"; !strings.Contains(page.String(), cell) {
		t.Errorf("HTML report lacks %q", cell)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Throughput map[string]any `json:"throughput"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if got, ok := doc.Throughput["test_twice_ttft_p50_ms"].(float64); !ok || got != want {
		t.Errorf("JSON throughput.test_twice_ttft_p50_ms = %v, want %v", doc.Throughput["test_twice_ttft_p50_ms"], want)
	}
	dir := t.TempDir()
	if err := WriteParquetDir(dir, r); err != nil {
		t.Fatal(err)
	}
	if got := readSummary(t, filepath.Join(dir, "summary.parquet"), 0)["test_twice_ttft_p50_ms"]; got != want {
		t.Errorf("summary.parquet test_twice_ttft_p50_ms = %v, want %v", got, want)
	}

	// Compare: each run's own value, in the table and its text.
	dir = t.TempDir()
	a := writeRun(t, dir, "a.parquet", cmpMeta("a"), cmpRows(1, 1))
	b := writeRun(t, dir, "b.parquet", cmpMeta("b"), cmpRows(2, 1.1))
	c, err := compareFiles(t, CompareOptions{Bootstrap: stats.Bootstrap{Resamples: 100}}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	row := figRow(c, "test_twice_ttft_p50_ms")
	if len(row.Values) != 2 {
		t.Fatalf("compare has no row test_twice_ttft_p50_ms: %+v", row)
	}
	for i, rep := range c.Reports() {
		if row.Values[i] != twice(rep) {
			t.Errorf("compare run %d: %v, want %v", i, row.Values[i], twice(rep))
		}
	}
	var ct bytes.Buffer
	if err := c.WriteText(&ct); err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`test: twice TTFT p50 ms +` + regexp.QuoteMeta(fmtValue(row.Values[0])) + ` +` + regexp.QuoteMeta(fmtValue(row.Values[1])) + ` `)
	if !line.MatchString(ct.String()) {
		t.Errorf("compare text lacks the figure:\n%s", ct.String())
	}
}
