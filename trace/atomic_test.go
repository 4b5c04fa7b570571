package trace

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/internal/atomicfile/atomicfiletest"
)

// TestTraceFilesAtomic: traces written by synth (Create), import and slice are 0644 under
// the umask, leave no temporary file, and a failed import over an existing trace leaves it
// byte for byte as it was.
func TestTraceFilesAtomic(t *testing.T) {
	dir := t.TempDir()
	synth := filepath.Join(dir, "synth.parquet")
	w, err := Create(synth, Meta{Source: "synth"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Synth(context.Background(), baseSpec(), w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	atomicfiletest.Check(t, synth)

	imported := filepath.Join(dir, "azure.parquet")
	if _, err := ImportFile(context.Background(), filepath.Join(tracesDir(t), "AzureLLMInferenceTrace_code.csv"), imported, ImportOptions{Format: FormatAzure}); err != nil {
		t.Fatal(err)
	}
	atomicfiletest.Check(t, imported)

	sliced := filepath.Join(dir, "slice.parquet")
	if _, err := SliceFile(context.Background(), imported, sliced, SliceSpec{Limit: 100}); err != nil {
		t.Fatal(err)
	}
	atomicfiletest.Check(t, sliced)

	// A failed import over the existing trace: the old file stays whole.
	before, err := os.ReadFile(imported)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.csv")
	var b strings.Builder
	b.WriteString("TIMESTAMP,ContextTokens,GeneratedTokens\n")
	for i := 0; i < batchRows+10; i++ {
		b.WriteString("2023-11-16 18:17:03.0000000,10,10\n")
	}
	b.WriteString("2023-11-16 18:17:04.0000000,10,zero\n")
	if err := os.WriteFile(bad, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ImportFile(context.Background(), bad, imported, ImportOptions{Format: FormatAzure}); err == nil {
		t.Fatal("import of a bad row succeeded")
	}
	if after, err := os.ReadFile(imported); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("the existing trace changed after a failed import (%d bytes, was %d; %v)", len(after), len(before), err)
	}
	atomicfiletest.Check(t, imported)

	// Abort: nothing appears.
	w, err = Create(filepath.Join(dir, "aborted.parquet"), Meta{})
	if err != nil {
		t.Fatal(err)
	}
	w.Abort()
	if _, err := os.Stat(filepath.Join(dir, "aborted.parquet")); !os.IsNotExist(err) {
		t.Fatalf("aborted trace: %v", err)
	}
	atomicfiletest.NoTemp(t, dir)
}
