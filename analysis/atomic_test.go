package analysis

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/llmreplay/llmreplay/internal/atomicfile/atomicfiletest"
)

// TestReportFilesAtomic: summary.parquet, timeseries.parquet and the HTML report are 0644
// under the umask (they were 0600) with no temporary file left, and a report whose writing
// fails midway leaves the previous file as it was.
func TestReportFilesAtomic(t *testing.T) {
	r, _ := mixedReport(t)
	dir := t.TempDir()
	if err := WriteParquetDir(dir, r); err != nil {
		t.Fatal(err)
	}
	atomicfiletest.Check(t, filepath.Join(dir, "summary.parquet"))
	atomicfiletest.Check(t, filepath.Join(dir, "timeseries.parquet"))
	html := filepath.Join(dir, "report.html")
	if err := r.WriteHTMLFile(html); err != nil {
		t.Fatal(err)
	}
	atomicfiletest.Check(t, html)

	before, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err = writeAtomic(html, func(w io.Writer) error {
		if err := r.WriteHTML(w); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("writeAtomic = %v, want the writer's error", err)
	}
	if after, _ := os.ReadFile(html); string(after) != string(before) {
		t.Fatal("a failed rewrite changed the report")
	}
	atomicfiletest.NoTemp(t, dir)
}
