package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
)

// TestWrongKindOfFileSaysWhatItIs: a file of the wrong kind given to any command gets one
// printable line saying what the file is and what was probably meant, never its binary
// content (`trace import --from azure x.parquet` once printed the Parquet header into the
// terminal as the "bad CSV line").
func TestWrongKindOfFileSaysWhatItIs(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(tracesDir(t), "AzureLLMInferenceTrace_code.csv")
	jsonl := filepath.Join(tracesDir(t), "mooncake_conversation_trace.jsonl")
	traceFile := filepath.Join("..", "..", "trace", "testdata", "azure-code-busy.parquet")
	binary := filepath.Join(dir, "blob.bin")
	os.WriteFile(binary, []byte("\x7fELF\x02\x01\x01\x00\x00\x00,\"\xff\xfe\n\x01\x02"), 0o644)
	out := filepath.Join(dir, "out.parquet")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"trace", "import", "--from", "azure", mixedFile, "-o", out}, "this is a Parquet file, not azure CSV text; did you mean `llmreplay trace info"},
		{[]string{"trace", "import", "--from", "mooncake", traceFile, "-o", out}, "this is a Parquet file, not mooncake JSON text"},
		{[]string{"trace", "import", "--from", "azure", binary, "-o", out}, "this is a binary file, not azure CSV text"},
		{[]string{"trace", "import", "--from", "azure", jsonl, "-o", out}, "this is JSON text, not azure CSV"},
		{[]string{"trace", "import", "--from", "mooncake", csv, "-o", out}, "not mooncake JSON; --from azure, azure-lmm, burstgpt or csv read CSV"},
		{[]string{"trace", "info", csv}, "this is text, not a Parquet trace; a recorded trace in CSV or JSON is imported first"},
		{[]string{"trace", "info", binary}, "this is a binary file, not a Parquet trace"},
		{[]string{"analyze", csv}, "this is text, not a results file (Parquet)"},
		{[]string{"analyze", traceFile}, "this is a trace (llmreplay.format = \"trace/v1\"), not a replay's results file"},
		{[]string{"recover", traceFile, "-o", out}, "this is a Parquet file, not a replay's journal"},
		{[]string{"replay", "--trace", mixedFile, "-o", out}, "this is a replay's results file, not a trace"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), c.args, &stdout, &stderr)
		if err == nil {
			t.Errorf("%v: no error", c.args)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%v:\n got %s\nwant it to contain %q", c.args, msg, c.want)
		}
		if strings.Contains(msg, "\n") || strings.IndexFunc(msg, func(r rune) bool { return !unicode.IsPrint(r) || r == unicode.ReplacementChar }) >= 0 {
			t.Errorf("%v: the message is not one printable line: %q", c.args, msg)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a refused command left an output file")
	}
}

// TestImportGzip: a gzip-compressed CSV imports as the plain one does.
func TestImportGzip(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(tracesDir(t), "AzureLLMInferenceTrace_code.csv"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gz := filepath.Join(dir, "azure.csv.gz")
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(src)
	zw.Close()
	os.WriteFile(gz, b.Bytes(), 0o644)
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"trace", "import", "--from", "azure", gz, "-o", filepath.Join(dir, "t.parquet")}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "8819 rows read, 8819 written") {
		t.Errorf("import of the gzip file: %s", stdout.String())
	}
}
