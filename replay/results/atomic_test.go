package results

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/llmreplay/llmreplay/internal/atomicfile/atomicfiletest"
)

// TestResultsFileMode: the journal and the results file ConvertJournal makes of it are
// 0644 under the umask (parquet was 0600, unreadable by a notebook server running
// as another user), replacing an existing results file leaves no temporary file, and a
// conversion whose rename fails leaves none either.
func TestResultsFileMode(t *testing.T) {
	dir := t.TempDir()
	jpath := filepath.Join(dir, "parquet"+JournalSuffix)
	j, err := CreateJournal(jpath, &RunMeta{RunID: "abc", Mode: ModeOpen, Flags: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range testRecords(25) {
		if err := j.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	atomicfiletest.Check(t, jpath)

	out := filepath.Join(dir, "parquet")
	for range 2 { // absent, then present
		if _, err := ConvertJournal(jpath, out); err != nil {
			t.Fatal(err)
		}
		atomicfiletest.Check(t, out)
		if got, _, err := ReadFile(out); err != nil || len(got) != 25 {
			t.Fatalf("read back %d rows, %v", len(got), err)
		}
	}

	busy := filepath.Join(dir, "busy")
	if err := os.MkdirAll(filepath.Join(busy, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ConvertJournal(jpath, busy); err == nil {
		t.Fatal("ConvertJournal over a non-empty folder succeeded")
	}
	atomicfiletest.NoTemp(t, dir)
}
