package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mixed.parquet and its golden report are written by the analysis package's tests
// (go test ./analysis -update).
var mixedFile = filepath.Join("..", "..", "analysis", "testdata", "mixed.parquet")

func TestAnalyzeTextMatchesGolden(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"analyze", mixedFile, "--slo", "ttft=200ms,tpot=25ms"}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "analysis", "testdata", "mixed.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("analyze output differs from analysis/testdata/mixed.txt:\n%s", out.String())
	}
}

func TestAnalyzeJSONHTMLParquet(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	args := []string{"analyze", mixedFile, "--json", "--html", filepath.Join(dir, "r.html"), "--parquet", filepath.Join(dir, "pq"),
		"--warmup", "5s", "--buckets", "prompt=256,1024", "--interval", "500ms"}
	if err := run(context.Background(), args, &out, &errb); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Throughput struct {
			Window struct {
				StartS float64 `json:"start_s"`
			} `json:"window"`
		} `json:"throughput"`
		Breakdown struct {
			ByPrompt []json.RawMessage `json:"by_prompt_tokens"`
		} `json:"breakdown"`
	}
	if err := json.Unmarshal(out.Bytes(), &j); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if len(j.Breakdown.ByPrompt) != 3 {
		t.Errorf("--buckets prompt=256,1024 gave %d buckets", len(j.Breakdown.ByPrompt))
	}
	if s := j.Throughput.Window.StartS; s < 5 || s > 5.1 {
		t.Errorf("--warmup 5s: window starts at %v s", s)
	}
	for _, f := range []string{"r.html", "pq/summary.parquet", "pq/timeseries.parquet"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
}

func TestAnalyzeErrors(t *testing.T) {
	var out, errb bytes.Buffer
	for _, c := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"analyze"}, true, "no results files"},
		{[]string{"analyze", mixedFile, "--slo", "ttft=fast"}, true, "--slo"},
		{[]string{"analyze", mixedFile, "--warmup", "-1s"}, true, "--warmup"},
		{[]string{"analyze", mixedFile, "--interval", "15ms"}, true, "multiple of 10ms"},
		{[]string{"analyze", mixedFile, "--buckets", "9,3"}, true, "ascending"},
		{[]string{"analyze", "no-such.parquet"}, false, "no-such.parquet"},
		{[]string{"analyze", mixedFile, mixedFile}, false, "given twice"},
	} {
		err := run(context.Background(), c.args, &out, &errb)
		var ue *usageError
		if err == nil || errors.As(err, &ue) != c.usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v (usage error %v), want one naming %q", c.args, err, errors.As(err, &ue), c.want)
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"analyze", "--help"}, &out, &errb); err == nil || !strings.Contains(out.String(), "Examples:") {
		t.Errorf("--help: %v\n%s", err, out.String())
	}
}
