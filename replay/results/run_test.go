package results

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
)

// TestRunMetaJSON: the llmreplay.run bytes, key for key and in this order, as results files
// have carried them since results/v1 (docs/results-format.md).
func TestRunMetaJSON(t *testing.T) {
	m := RunMeta{ToolVersion: "dev", RunID: "48ab9150de323e0d", Mode: ModeOpen, Endpoint: "http://127.0.0.1:8000/v1",
		API: "completions", Backend: "vllm", Model: "m", TraceFile: "t.parquet", TraceSHA256: "ab", Speedup: 2,
		ShardCount: 1, RunStartUnixNS: 1796212147839590974, MaxLatenessMS: 10, Host: "h", Flags: map[string]string{"speedup": "2", "api": "completions"}}
	js, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"tool_version":"dev","run_id":"48ab9150de323e0d","mode":"open","endpoint":"http://127.0.0.1:8000/v1",` +
		`"api":"completions","backend":"vllm","model":"m","simulated":false,"sim_profile":"","trace_file":"t.parquet",` +
		`"trace_sha256":"ab","speedup":2,"rate":0,"concurrency":0,"shard_index":0,"shard_count":1,` +
		`"run_start_unix_ns":1796212147839590974,"max_lateness_ms":10,"slo":"","host":"h","flags":{"api":"completions","speedup":"2"}}`
	if string(js) != want {
		t.Errorf("RunMeta JSON\n got %s\nwant %s", js, want)
	}

	sc, err := SchemaWithRun(&m)
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Metadata().Values()[sc.Metadata().FindKey(MetaRun)]; got != want {
		t.Errorf("schema metadata %s = %s", MetaRun, got)
	}
	back, err := ParseRunMeta(sc)
	if err != nil || back.RunStartUnixNS != m.RunStartUnixNS || back.Flags["api"] != "completions" {
		t.Errorf("ParseRunMeta: %+v, %v", back, err)
	}
	for _, md := range []arrow.Metadata{
		arrow.NewMetadata([]string{MetaFormat, MetaRun}, []string{"trace/v1", want}),
		arrow.NewMetadata([]string{MetaFormat}, []string{Format}),
		arrow.NewMetadata([]string{MetaFormat, MetaRun}, []string{Format, "{"}),
	} {
		if _, err := ParseRunMeta(arrow.NewSchema(nil, &md)); err == nil || !strings.Contains(err.Error(), "llmreplay.") {
			t.Errorf("metadata %v: error %v", md, err)
		}
	}
}

// TestRunID: the id is a function of start, trace and shard count, the same for every shard.
func TestRunID(t *testing.T) {
	a := RunID(1796212147839590974, "ab", 4)
	if a != "8fca5c12f499fb08" { // as replay.RunID derived it before the contract moved here
		t.Errorf("RunID = %q, want 8fca5c12f499fb08", a)
	}
	for _, b := range []string{RunID(1796212147839590975, "ab", 4), RunID(1796212147839590974, "ac", 4), RunID(1796212147839590974, "ab", 3)} {
		if b == a {
			t.Errorf("RunID ignores one of its inputs: %s", b)
		}
	}
}
