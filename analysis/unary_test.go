package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/duckdbtest"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// embeddingsRun is a synthetic open-loop embeddings run: 20 requests/s for 30 s, request
// i carrying 1 + i%4 inputs of 64 prompt tokens each, answered after a lognormal latency
// around 40 ms times scale (the seed draws it); every 50th request fails with HTTP 503
// after 5 ms and the last one is dropped.
func embeddingsRun(seed uint64, scale float64) []row {
	rng := rand.New(rand.NewPCG(seed, 7))
	var rows []row
	for i := range 600 {
		sent := int64(i) * 50 * ms_
		n := int32(1 + i%4)
		lat := int64(40 * scale * math.Exp(0.3*rng.NormFloat64()) * 1e6)
		r := embeddingsRow(int64(i), sent, lat, n, 64*n)
		switch {
		case i == 599:
			r = row{id: int64(i), scheduled: sent, prompt: 64 * n, status: string(results.StatusDropped), inputs: p32(n)}
		case i%50 == 49:
			r.status, r.httpStatus, r.promptServer, r.end = string(results.StatusHTTPError), p32(503), nil, p64(sent+5*ms_)
		}
		rows = append(rows, r)
	}
	return rows
}

func embeddingsReport(t *testing.T, slo SLO) (*Report, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "embeddings.parquet")
	meta := testRun()
	meta.API = "embeddings"
	writeResults(t, path, meta, embeddingsRun(1, 1))
	d, err := Load(context.Background(), decode.LoadOptions{}, path)
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.SLO = slo
	r, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, path
}

// TestUnaryFigures: a run of embeddings reports latency, inputs and prompt tokens per
// second, overall and in its steady-state window, and goodput on an e2e objective, each
// recomputed here from the rows; and none of the generation figures.
func TestUnaryFigures(t *testing.T) {
	slo := SLO{E2E: 45 * time.Millisecond}
	r, _ := embeddingsReport(t, slo)
	u := r.Unary
	if u == nil {
		t.Fatal("a run of embeddings is reported as generations")
	}
	rows := embeddingsRun(1, 1)
	var lat []float64
	var inputs, tokens, good, goodIn int64
	first, last := int64(math.MaxInt64), int64(0)
	for _, x := range rows {
		if x.sent != nil {
			first = min(first, *x.sent)
		}
		if x.end != nil {
			last = max(last, *x.end)
		}
		if x.status != "ok" {
			continue
		}
		l := *x.end - *x.sent
		lat = append(lat, float64(l)/1e6)
		inputs, tokens = inputs+int64(*x.inputs), tokens+int64(*x.promptServer)
		if l <= int64(slo.E2E) {
			good, goodIn = good+1, goodIn+int64(*x.inputs)
		}
	}
	dur := float64(last-first) / 1e9
	want := stats.Summarize(lat)
	if u.Latency != want || r.E2E != want {
		t.Errorf("latency %+v, want %+v", u.Latency, want)
	}
	if u.Inputs != inputs || u.PromptTokens != tokens || !sameFloat(u.InputsPerS, float64(inputs)/dur) || !sameFloat(u.PromptTokensPerS, float64(tokens)/dur) {
		t.Errorf("inputs %d (%v/s), prompt tokens %d (%v/s); want %d (%v/s), %d (%v/s)", u.Inputs, u.InputsPerS, u.PromptTokens, u.PromptTokensPerS,
			inputs, float64(inputs)/dur, tokens, float64(tokens)/dur)
	}
	// The window as the report decided it; what ended in it, counted here.
	ws, we := int64(math.Round(r.Throughput.WindowStartS*1e9)), int64(math.Round(r.Throughput.WindowEndS*1e9))
	var wReq, wIn, wTok int64
	for _, x := range rows {
		if x.status == "ok" && *x.end >= ws && *x.end < we {
			wReq, wIn, wTok = wReq+1, wIn+int64(*x.inputs), wTok+int64(*x.promptServer)
		}
	}
	w := r.Throughput.WindowEndS - r.Throughput.WindowStartS
	if !(w > 20) || !sameFloat(u.SustainedRequestsPerS, float64(wReq)/w) || !sameFloat(u.SustainedInputsPerS, float64(wIn)/w) ||
		!sameFloat(u.SustainedPromptTokensPerS, float64(wTok)/w) {
		t.Errorf("window %v s: sustained %v req/s, %v inputs/s, %v tok/s; want %v, %v, %v", w, u.SustainedRequestsPerS, u.SustainedInputsPerS,
			u.SustainedPromptTokensPerS, float64(wReq)/w, float64(wIn)/w, float64(wTok)/w)
	}
	g := r.Goodput
	if g == nil || g.Good != good || !sameFloat(g.Attainment, 100*float64(good)/600) || !sameFloat(u.GoodInputsPerS, float64(goodIn)/dur) || good == 0 || good == r.Requests.OK {
		t.Errorf("goodput %+v, good inputs %v/s; want %d good of 600, %v inputs/s", g, u.GoodInputsPerS, good, float64(goodIn)/dur)
	}
	if r.TTFT.N != 0 || r.TPOT.N != 0 || r.ITL.N != 0 || r.ByOutput != nil {
		t.Errorf("generation figures of a run of embeddings: TTFT n %d, TPOT n %d, ITL n %d, by output %v", r.TTFT.N, r.TPOT.N, r.ITL.N, r.ByOutput)
	}

	var text, js bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"TTFT", "TPOT", "ITL (", "output tok/s", "Per-user", "Tokens (ok"} {
		if strings.Contains(text.String(), s) {
			t.Errorf("text report of a run of embeddings shows %q:\n%s", s, text.String())
		}
	}
	for _, s := range []string{"\n  latency  ", "\n  inputs/s  ", "\n  sustained inputs/s  ", "\n  good inputs/s  ", "inputs: " + strconv.FormatInt(inputs, 10)} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, text.String())
		}
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"} {
		if _, ok := doc[k]; ok {
			t.Errorf("JSON of a run of embeddings has %s", k)
		}
	}
	var th map[string]any
	json.Unmarshal(doc["throughput"], &th)
	if v, _ := th["sustained_inputs_per_s"].(float64); v != u.SustainedInputsPerS {
		t.Errorf("JSON throughput.sustained_inputs_per_s %v, want %v", th["sustained_inputs_per_s"], u.SustainedInputsPerS)
	}
	dir := t.TempDir()
	if err := WriteParquetDir(dir, r); err != nil {
		t.Fatal(err)
	}
	sum := readSummary(t, filepath.Join(dir, "summary.parquet"), 0)
	for k, v := range map[string]float64{"latency_ms_p99": want.P99, "inputs_per_s": u.InputsPerS, "sustained_prompt_tokens_per_s": u.SustainedPromptTokensPerS,
		"goodput_inputs_per_s": u.GoodInputsPerS} {
		if sum[k] != v {
			t.Errorf("summary.parquet %s = %v, want %v", k, sum[k], v)
		}
	}
	if sum["ttft_ms_p50"] != nil {
		t.Errorf("summary.parquet ttft_ms_p50 = %v, want null", sum["ttft_ms_p50"])
	}
}

// TestUnaryGolden: the text and JSON reports of a run of embeddings, byte for byte.
func TestUnaryGolden(t *testing.T) {
	r, _ := embeddingsReport(t, SLO{E2E: 45 * time.Millisecond})
	var text, js bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden(t, "embeddings.txt", text.Bytes())
	golden(t, "embeddings.json", js.Bytes())
}

// TestUnaryDuckDB: DuckDB recomputes every figure of a run that is not generation from the
// results file: latency p50, p90, p99 and mean, requests, inputs and prompt tokens per
// second over D and over the report's window, good requests and inputs.
func TestUnaryDuckDB(t *testing.T) {
	r, path := embeddingsReport(t, SLO{E2E: 45 * time.Millisecond})
	u := r.Unary
	ws, we := strconv.FormatInt(int64(math.Round(r.Throughput.WindowStartS*1e9)), 10), strconv.FormatInt(int64(math.Round(r.Throughput.WindowEndS*1e9)), 10)
	w := strconv.FormatFloat(r.Throughput.WindowEndS-r.Throughput.WindowStartS, 'g', -1, 64)
	in := `end_ns >= ` + ws + ` AND end_ns < ` + we
	q := duckdbtest.Query(t, `WITH d AS (SELECT (max(end_ns) - min(sent_ns)) / 1e9 AS dur FROM '`+path+`'),
		ok AS (SELECT *, (end_ns - sent_ns) / 1e6 AS lat, coalesce(prompt_tokens_server, prompt_tokens) AS tok FROM '`+path+`' WHERE status = 'ok')
		SELECT quantile_cont(lat, 0.5) AS p50, quantile_cont(lat, 0.9) AS p90, quantile_cont(lat, 0.99) AS p99, avg(lat) AS mean,
			count(*) / any_value(d.dur) AS req_s, sum(inputs) / any_value(d.dur) AS in_s, sum(tok) / any_value(d.dur) AS tok_s,
			count(*) FILTER (`+in+`) / `+w+` AS s_req, sum(inputs) FILTER (`+in+`) / `+w+` AS s_in, sum(tok) FILTER (`+in+`) / `+w+` AS s_tok,
			count(*) FILTER (lat <= 45) AS good, sum(inputs) FILTER (lat <= 45) / any_value(d.dur) AS good_in
		FROM ok, d`)
	for k, want := range map[string]float64{"p50": u.Latency.P50, "p90": u.Latency.P90, "p99": u.Latency.P99, "mean": u.Latency.Mean,
		"req_s": r.Throughput.RequestsPerS, "in_s": u.InputsPerS, "tok_s": u.PromptTokensPerS,
		"s_req": u.SustainedRequestsPerS, "s_in": u.SustainedInputsPerS, "s_tok": u.SustainedPromptTokensPerS,
		"good": float64(r.Goodput.Good), "good_in": u.GoodInputsPerS} {
		got, err := strconv.ParseFloat(toString(q[0][k]), 64)
		if err != nil || !sameFloat(got, want) {
			t.Errorf("%s: DuckDB %v, analyze %.12g", k, q[0][k], want)
		}
	}
}

// TestUnaryMixedRefused: a file of embeddings and generations, or two such files pooled,
// is refused, naming the file and a row of each kind; requests never sent do not count.
func TestUnaryMixedRefused(t *testing.T) {
	emb := embeddingsRun(1, 1)[:40]
	gen := okRow(100, 10*ms_, 20*ms_, 30*ms_)
	dropped := row{id: 101, scheduled: 0, prompt: 10, outTarget: 4, status: string(results.StatusDropped)}
	p := tempResults(t, testRun(), append(append([]row{}, emb...), gen))
	_, err := AnalyzeFiles(context.Background(), DefaultOptions(), p)
	if err == nil || !strings.Contains(err.Error(), p+": row 0 has inputs") || !strings.Contains(err.Error(), "row 40 has none") {
		t.Errorf("mixed file: %v, want an error naming %s and rows 0 and 40", err, p)
	}
	meta := testRun()
	meta.ShardCount, meta.ShardIndex = 2, 1
	q := tempResults(t, meta, []row{gen})
	meta.ShardIndex = 0
	p = tempResults(t, meta, emb)
	if _, err := AnalyzeFiles(context.Background(), DefaultOptions(), p, q); err == nil || !strings.Contains(err.Error(), q+" row 0 has none") {
		t.Errorf("mixed shards: %v, want an error naming %s", err, q)
	}
	r, err := AnalyzeFiles(context.Background(), DefaultOptions(), tempResults(t, testRun(), append(append([]row{}, emb...), dropped)))
	if err != nil || r.Unary == nil {
		t.Errorf("embeddings and a request never sent: %v, unary %v; want a run of embeddings", err, r != nil && r.Unary != nil)
	}
	var fe *decode.FieldError
	if errors.As(err, &fe) {
		t.Errorf("%v", err)
	}
}

// TestUnaryHTML: the page of a run of embeddings draws the latency CDF and the requests
// completed over time, not the generation plots, and passes the headless-Chromium check.
func TestUnaryHTML(t *testing.T) {
	r, _ := embeddingsReport(t, SLO{E2E: 45 * time.Millisecond})
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="plot-latency-cdf"`, "Requests completed/s per 1s interval", "<tr><th>sustained inputs/s</th>", "<td>latency</td>"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, bad := range []string{`id="plot-ttft-cdf"`, `id="plot-tpot-cdf"`, `id="plot-ttft-prompt"`, "Per-user speed"} {
		if strings.Contains(page.String(), bad) {
			t.Errorf("page of a run of embeddings has %q", bad)
		}
	}
	renderCheck(t, chromium(t), r)
}

// TestUnaryRepeatsPooled: the repeats of a run of embeddings pool their rates over their
// own durations and windows, not over the absolute time between them (a minute here).
func TestUnaryRepeatsPooled(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	var in, dur, sReq, win float64
	for k, scale := range []float64{1, 1.5} {
		m := testRun()
		m.RunID, m.RepeatGroup, m.Repeat, m.RepeatCount = "rep"+strconv.Itoa(k+1), "rep1", k+1, 2
		m.RunStartUnixNS += int64(k) * 90e9
		p := filepath.Join(dir, "r"+strconv.Itoa(k+1)+".parquet")
		writeResults(t, p, m, embeddingsRun(uint64(k+1), scale))
		paths = append(paths, p)
		one, err := AnalyzeFiles(context.Background(), DefaultOptions(), p)
		if err != nil {
			t.Fatal(err)
		}
		t1, w := one.Throughput, one.Throughput.WindowEndS-one.Throughput.WindowStartS
		in, dur, sReq, win = in+float64(one.Unary.Inputs), dur+t1.DurationS, sReq+one.Unary.SustainedRequestsPerS*w, win+w
	}
	d, err := Load(context.Background(), decode.LoadOptions{AllowMixed: true}, paths...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := AnalyzeRepeats(context.Background(), d, decode.LoadOptions{}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if u := r.Unary; u == nil || !sameFloat(u.InputsPerS, in/dur) || !sameFloat(u.SustainedRequestsPerS, sReq/win) || !(u.SustainedRequestsPerS > 19) {
		t.Errorf("pooled %v, want %v inputs/s and %v sustained req/s", unaryRates(u), in/dur, sReq/win)
	}
}

// unaryRates prints u's rates (nil: none).
func unaryRates(u *Unary) string {
	if u == nil {
		return "no unary figures"
	}
	return fmt.Sprintf("%v inputs/s, %v sustained req/s", u.InputsPerS, u.SustainedRequestsPerS)
}
