package sweep

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/internal/parquettest"
	"github.com/llmreplay/llmreplay/stats"
)

// TestSweepServerFigures: a sweep point carries its server figures in the text table, the
// JSON (points[].server, absent for the point that scraped nothing) and sweep.parquet.
func TestSweepServerFigures(t *testing.T) {
	s := serverSweep(t)
	var buf bytes.Buffer
	if err := s.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	txt := buf.String()
	if !strings.Contains(txt, "Server at each point") || !strings.Contains(txt, "26.2%") || !strings.Contains(txt, " 17 ") {
		t.Errorf("text lacks the server table or its figures:\n%s", txt)
	}
	buf.Reset()
	if err := s.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Points []struct {
			Server *struct {
				KV          float64 `json:"kv_cache_usage_mean"`
				WaitingMax  float64 `json:"waiting_requests_max"`
				Preemptions float64 `json:"preemptions"`
			} `json:"server"`
		} `json:"points"`
	}
	if err := json.Unmarshal(buf.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	if len(j.Points) != 2 || j.Points[0].Server == nil || j.Points[1].Server != nil {
		t.Fatalf("points %s", buf.String())
	}
	if p := j.Points[0].Server; math.Abs(p.KV-10.5/40) > 1e-9 || p.WaitingMax != 38 || p.Preemptions != 17 {
		t.Errorf("point 1 server %+v", *p)
	}
	path := filepath.Join(t.TempDir(), "sweep.parquet")
	if err := s.WriteParquet(path); err != nil {
		t.Fatal(err)
	}
	if row := parquettest.Row(t, path, 0); row["server_preemptions"] != 17.0 || row["server_scrapes"] != int64(21) {
		t.Errorf("sweep.parquet row 0: server_preemptions %v, server_scrapes %v", row["server_preemptions"], row["server_scrapes"])
	}
	if row := parquettest.Row(t, path, 1); row["server_preemptions"] != nil || row["server_scrapes"] != int64(0) {
		t.Errorf("sweep.parquet row 1 (not scraped): server_preemptions %v, server_scrapes %v", row["server_preemptions"], row["server_scrapes"])
	}
}

// TestSweepServerKeysDocumented: every key of a sweep point's server object is named in
// docs/metrics.md.
func TestSweepServerKeysDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(sweepServerOf(serverSweep(t).Rows[0].Report))
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(b, &keys); err != nil || len(keys) == 0 {
		t.Fatalf("server object %s: %v", b, err)
	}
	for k := range keys {
		if !bytes.Contains(doc, []byte("`"+k+"`")) {
			t.Errorf("sweep point server key %s is not in docs/metrics.md", k)
		}
	}
}

// TestSweepExplainsKnee: the knee's passing and failing points are described by the
// engine's figures there.
func TestSweepExplainsKnee(t *testing.T) {
	srv := func(kv, wait, pre float64) *analysis.Report {
		return &analysis.Report{Server: &analysis.Server{KVUsage: analysis.GaugeStats{N: 1, Mean: kv, Max: kv},
			Waiting: analysis.GaugeStats{N: 1, Mean: wait, Max: wait}, Preemptions: pre}}
	}
	s := &Report{Axis: "rate", Rows: []Row{{Load: 10, Report: srv(0.4, 0, 0)}, {Load: 20, Report: srv(0.99, 35, 12)}},
		Saturation: stats.Bound{Found: true, Bracketed: true, Pass: 10, Fail: 20}}
	got := s.explainBound(s.Saturation, "saturation")
	want := "  engine at the saturation: at rate 10 (passes): KV cache 40.0% mean, 40.0% max; 0.0 waiting (mean), 0.0 max; 0 preemptions; at rate 20 (fails): KV cache 99.0% mean, 99.0% max; 35.0 waiting (mean), 35.0 max; 12 preemptions"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := s.explainBound(stats.Bound{}, "SLO limit"); got != "" {
		t.Errorf("a bound not found is explained: %q", got)
	}
}
