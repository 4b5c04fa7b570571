package analysis

import (
	"github.com/llmreplay/llmreplay/internal/duckdbtest"

	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow/go/v15/parquet/file"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/goldenfile"
)

// update is the shared -update flag: rewrite the golden files.
var update = goldenfile.Update

// mixedRun is a deterministic 40 s run of mixed lengths: TTFT grows with the prompt, some
// requests fail, one is dropped, and a few carry chunk_tokens.
func mixedRun() []row {
	rng := rand.New(rand.NewPCG(7, 11))
	var rows []row
	t := int64(0)
	for i := 0; t < 40e9; i++ {
		t += int64(rng.ExpFloat64() * 40e6) // 25 req/s Poisson
		prompt := int32(math.Exp(4 + 4*rng.Float64()))
		out := int32(math.Exp(2 + 3*rng.Float64()))
		late := int64(rng.ExpFloat64() * 0.3e6)
		sent := t + late
		ttft := int64(30e6 + float64(prompt)*0.05e6 + rng.ExpFloat64()*10e6)
		var chunks []int64
		c := ttft
		for k := int32(0); k < out; k++ {
			chunks = append(chunks, c)
			c += int64(15e6 + rng.ExpFloat64()*5e6)
		}
		r := row{id: int64(i), scheduled: t, sent: p64(sent), chunks: chunks, prompt: prompt, promptServer: p32(prompt),
			outTarget: out, out: p32(out), source: "usage", status: "ok"}
		r.first, r.end = p64(sent+chunks[0]), p64(sent+chunks[len(chunks)-1])
		switch {
		case i%97 == 5:
			r = row{id: int64(i), scheduled: t, sent: p64(sent), prompt: prompt, outTarget: out, status: "http_error", httpStatus: p32(503), err: new(string)}
		case i%211 == 17:
			r = row{id: int64(i), scheduled: t, prompt: prompt, outTarget: out, status: "dropped"}
		case i%50 == 3:
			r.out = p32(out - 1) // stopped one token short
		}
		if i%10 == 1 && r.status == "ok" {
			r.chunkTokens = make([]int32, len(r.chunks))
			for k := range r.chunkTokens {
				r.chunkTokens[k] = 1
			}
			r.chunkTokens[0] = 1 + *r.out - int32(len(r.chunks))
		}
		rows = append(rows, r)
	}
	return rows
}

func mixedReport(t *testing.T) (*Report, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mixed.parquet")
	writeResults(t, path, testRun(), mixedRun())
	d, err := Load(context.Background(), decode.LoadOptions{}, path)
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.SLO = SLO{TTFT: 200 * time.Millisecond, TPOT: 25 * time.Millisecond}
	r, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, path
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldenfile.Check(t, name, got)
}

func TestTextReportGolden(t *testing.T) {
	r, path := mixedReport(t)
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	golden(t, "mixed.txt", b.Bytes())
	if *update {
		// The CLI test reads the same input.
		in, _ := os.ReadFile(path)
		os.WriteFile(filepath.Join("testdata", "mixed.parquet"), in, 0o644)
	}
}

// The JSON keys are a contract: exactly these, in docs/metrics.md.
func TestJSONKeys(t *testing.T) {
	r, _ := mixedReport(t)
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	keys := func(v any) []string {
		var ks []string
		for k := range v.(map[string]any) {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	want := map[string][]string{
		"":                     {"breakdown", "closed_loop", "e2e_ms", "flags", "goodput", "itl_ms", "per_user", "requests", "schedule_lateness_ms", "throughput", "tpot_ms", "ttft_ms", "warnings"},
		"per_user":             {"inv_tpot_per_s", "tokens_per_s"},
		"requests":             {"canceled", "dropped", "failed", "ok", "total"},
		"throughput":           {"output_tokens_per_s", "peak_output_tokens_per_s", "requests_per_s", "sustained_output_tokens_per_s", "total_tokens_per_s", "window"},
		"goodput":              {"attainment", "output_tokens_per_s", "requests_per_s"},
		"flags":                {"client_limited", "overloaded", "prompt_off_target", "prompt_off_target_evidence", "stream_buffered", "stream_buffered_evidence"},
		"ttft_ms":              {"max", "mean", "p50", "p90", "p95", "p99", "p99_9"},
		"tpot_ms":              {"max", "mean", "p50", "p90", "p95", "p99", "p99_9"},
		"itl_ms":               {"max", "mean", "p50", "p90", "p95", "p99", "p99_9"},
		"e2e_ms":               {"max", "mean", "p50", "p90", "p95", "p99", "p99_9"},
		"schedule_lateness_ms": {"max", "mean", "p50", "p90", "p95", "p99", "p99_9"},
	}
	for k, w := range want {
		v := any(m)
		if k != "" {
			v = m[k]
		}
		if got := keys(v); !slices.Equal(got, w) {
			t.Errorf("keys of %q = %v, want %v", k, got, w)
		}
	}
	if got := keys(m["throughput"].(map[string]any)["window"]); !slices.Equal(got, []string{"end_s", "start_s"}) {
		t.Errorf("window keys = %v", got)
	}
	for _, k := range []string{"tokens_per_s", "inv_tpot_per_s"} {
		if got := keys(m["per_user"].(map[string]any)[k]); !slices.Equal(got, []string{"mean", "min", "n", "p1", "p10", "p50"}) {
			t.Errorf("per_user.%s keys = %v", k, got)
		}
	}
	if m["closed_loop"] != nil {
		t.Errorf("closed_loop of an open-loop run = %v, want null", m["closed_loop"])
	}
	golden(t, "mixed.json", b.Bytes())
}

func TestParquetOutputsRoundTrip(t *testing.T) {
	r, _ := mixedReport(t)
	dir := filepath.Join(t.TempDir(), "out")
	if err := WriteParquetDir(dir, r, r); err != nil {
		t.Fatal(err)
	}
	for name, rows := range map[string]int64{"summary.parquet": 2, "timeseries.parquet": 2 * int64(len(r.Series))} {
		f, err := file.OpenParquetFile(filepath.Join(dir, name), false)
		if err != nil {
			t.Fatal(err)
		}
		if f.NumRows() != rows {
			t.Errorf("%s: %d rows, want %d", name, f.NumRows(), rows)
		}
		f.Close()
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("leftover files in %s: %v", dir, ents)
	}
	// DuckDB reads the summary as written (when available).
	if rows := duckdbtest.Rows(t, "SELECT ttft_ms_p99 AS p, requests_ok AS ok FROM '"+filepath.Join(dir, "summary.parquet")+"' LIMIT 1"); rows != nil {
		if got, _ := strconv.ParseFloat(toString(rows[0]["p"]), 64); math.Abs(got-r.TTFT.P99) > 1e-9 {
			t.Errorf("summary ttft_ms_p99 via DuckDB = %v, want %v", got, r.TTFT.P99)
		}
	}
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return ""
}

// DuckDB recomputes the ok count and TTFT p50/p99 from the same Parquet file with
// quantile_cont (type-7 linear interpolation), and must agree with --json.
func TestDuckDBAgreesWithJSON(t *testing.T) {
	r, path := mixedReport(t)
	var b bytes.Buffer
	r.WriteJSON(&b)
	var j struct {
		Requests struct{ OK int64 } `json:"requests"`
		TTFT     struct{ P50, P99 float64 }
	}
	var raw map[string]json.RawMessage
	json.Unmarshal(b.Bytes(), &raw)
	json.Unmarshal(raw["requests"], &j.Requests)
	var ttft map[string]float64
	json.Unmarshal(raw["ttft_ms"], &ttft)
	rows := duckdbtest.Query(t, `SELECT count(*) AS ok,
		quantile_cont((first_token_ns - sent_ns) / 1e6, 0.5) AS p50,
		quantile_cont((first_token_ns - sent_ns) / 1e6, 0.99) AS p99
		FROM '`+path+`' WHERE status = 'ok'`)
	gotOK, _ := strconv.ParseInt(toString(rows[0]["ok"]), 10, 64)
	if gotOK != j.Requests.OK || gotOK < 900 {
		t.Errorf("ok: DuckDB %d, --json %d", gotOK, j.Requests.OK)
	}
	for _, k := range []string{"p50", "p99"} {
		d, _ := strconv.ParseFloat(toString(rows[0][k]), 64)
		if math.Abs(d-ttft[k]) > 1e-9*math.Abs(d) {
			t.Errorf("ttft %s: DuckDB %.12g, --json %.12g", k, d, ttft[k])
		}
	}
	t.Logf("ok=%d ttft p50=%v p99=%v (DuckDB and --json agree)", gotOK, ttft["p50"], ttft["p99"])
}

func TestHTMLSelfContained(t *testing.T) {
	r, _ := mixedReport(t)
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	for _, id := range []string{"plot-throughput", "plot-inflight", "plot-ttft-cdf", "plot-tpot-cdf", "plot-ttft-prompt", "plot-att-prompt", "plot-att-output"} {
		if !strings.Contains(s, `id="`+id+`"`) {
			t.Errorf("HTML lacks plot %s", id)
		}
	}
	for _, bad := range []string{"src=", "href=", "@import", "url(", "<link", "<img", "<iframe", "fetch("} {
		if strings.Contains(s, bad) {
			t.Errorf("HTML refers to something outside the page: %q", bad)
		}
	}
}
