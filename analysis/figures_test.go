package analysis

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFigureDeclaredOnce adds one figure to the declaration, and nowhere else, and finds it
// in the text, JSON, summary.parquet and HTML outputs (compare_test.go, TestFigureDeclaredOnceInCompare, in compare's).
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

}
