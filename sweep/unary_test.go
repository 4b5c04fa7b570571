package sweep

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/browsertest"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

// embeddingsCapacity is the requests/s the endpoint of embeddingsPoint answers at most:
// 4 requests at a time, each in 100 ms.
const embeddingsCapacity = 40

// embeddingsPoint is a point of an embeddings run at rate requests/s for 30 s, evenly
// spaced, against an endpoint of 4 workers that answer each request in 100 ms, first come
// first served: below 40 requests/s no request waits (latency 100 ms), above it the queue
// grows by (rate − 40) a second, so that completions stay at 40/s and latency grows. Request i
// carries 1 + i%4 inputs of 64 prompt tokens each.
func embeddingsPoint(rate float64) []*results.Result {
	const service = int64(100 * time.Millisecond)
	free := make([]int64, 4)
	var rs []*results.Result
	for i := int64(0); float64(i) < 30*rate; i++ {
		sent := int64(float64(i) * 1e9 / rate)
		w := slices.Index(free, slices.Min(free))
		start := max(sent, free[w])
		free[w] = start + service
		n := int32(1 + i%4)
		r := results.NewResult(i, 0, sent, 64*n, 0)
		r.SentNS, r.EndNS, r.Status, r.HTTPStatus = sent, free[w], results.StatusOK, 200
		r.PromptTokensServer, r.Inputs = 64*n, n
		rs = append(rs, r)
	}
	return rs
}

func embeddingsMeta(rate float64) results.RunMeta {
	m := pointMeta()
	m.API, m.Speedup, m.Rate = "embeddings", 0, rate
	return m
}

// unarySweep analyses embeddings points at the given rates under slo.
func unarySweep(t *testing.T, slo analysis.SLO, rates ...float64) *Report {
	t.Helper()
	dir := t.TempDir()
	opts := analysis.DefaultOptions()
	opts.SLO = slo
	var rows []Row
	for i, rate := range rates {
		file := fmt.Sprintf("point-%02d-rate-%g.parquet", i+1, rate)
		writePoint(t, filepath.Join(dir, file), embeddingsMeta(rate), embeddingsPoint(rate))
		d, err := analysis.Load(context.Background(), decode.LoadOptions{}, filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		row, err := NewRow(Rate, rate, file, d, opts)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, row)
	}
	return NewReport(Rate, rows, stats.KneeOptions{}, nil)
}

// TestUnarySweepKnee: a sweep of embeddings judges its knee on requests/s sustained
// against offered and on the latency objective: the endpoint answers 40 requests/s, so 30
// passes both and 60 fails both; the table, JSON, sweep.parquet and page show latency and
// inputs per second, not TTFT or output tokens.
func TestUnarySweepKnee(t *testing.T) {
	s := unarySweep(t, analysis.SLO{E2E: 200 * time.Millisecond}, 10, 20, 30, 60, 80)
	if b := s.Saturation; !b.Found || b.Pass != 30 || b.Fail != 60 || b.LimitedBy != "endpoint" {
		t.Errorf("saturation %+v, want 30 (fails at 60)", b)
	}
	if b := s.SLOLimit; !b.Found || b.Pass != 30 || b.Fail != 60 {
		t.Errorf("SLO limit %+v, want 30 (fails at 60)", b)
	}
	for _, r := range s.Rows {
		pt := r.Point()
		if r.Load <= 30 && (pt.SustainedTokensPerSecond < 0.95*r.Load || r.Report.Unary.Latency.P99 != 100) {
			t.Errorf("rate %g: sustained %v req/s, latency p99 %v ms; want the rate and 100 ms", r.Load, pt.SustainedTokensPerSecond, r.Report.Unary.Latency.P99)
		}
		if r.Load > 40 && (pt.SustainedTokensPerSecond > 1.01*embeddingsCapacity || !r.Report.Flags.Overloaded) {
			t.Errorf("rate %g: sustained %v req/s, overloaded %v; want at most the capacity, overloaded", r.Load, pt.SustainedTokensPerSecond, r.Report.Flags.Overloaded)
		}
	}
	var txt, js bytes.Buffer
	if err := s.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden(t, "sweep-unary.txt", txt.Bytes())
	golden(t, "sweep-unary.json", js.Bytes())
	for _, bad := range []string{"TTFT", "TPOT", "tok/s output", "offer tok/s", `"ttft_ms"`} {
		if strings.Contains(txt.String()+js.String(), bad) {
			t.Errorf("a sweep of embeddings shows %q", bad)
		}
	}
	var doc struct {
		Points []struct {
			Latency struct{ P99 float64 } `json:"latency_ms"`
			Inputs  float64               `json:"sustained_inputs_per_s"`
		} `json:"points"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil || len(doc.Points) != 5 || doc.Points[0].Latency.P99 != 100 || doc.Points[0].Inputs != s.Rows[0].Report.Unary.SustainedInputsPerS {
		t.Errorf("JSON points %+v (%v)", doc.Points, err)
	}
	if cols, rows := parquetColumns(t, s); rows != 5 || !slices.Contains(cols, "sustained_inputs_per_s") || !slices.Contains(cols, "latency_ms_p99") {
		t.Errorf("sweep.parquet: %d rows, columns %v", rows, cols)
	}
	page := filepath.Join(t.TempDir(), "sweep.html")
	if err := s.WriteHTMLFile(page); err != nil {
		t.Fatal(err)
	}
	browsertest.RenderCheck(t, chromium(t), page, 2) // requests/s against offered, latency against load
}

// embeddingsReplayer "replays" a point by writing embeddingsPoint at the point's rate.
type embeddingsReplayer struct {
	t     *testing.T
	rates []float64
}

func (e *embeddingsReplayer) Check(*replay.Config) error { return nil }

func (e *embeddingsReplayer) Replay(_ context.Context, r Replay) (string, error) {
	e.rates = append(e.rates, r.Config.Rate)
	writePoint(e.t, r.Config.Output, embeddingsMeta(r.Config.Rate), embeddingsPoint(r.Config.Rate))
	return fmt.Sprintf("run-%d", len(e.rates)), nil
}

// TestUnarySweepAuto: sweep --auto over the rate of an embeddings run finds the knee at
// the endpoint's capacity, 40 requests/s, to the search's resolution.
func TestUnarySweepAuto(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sw")
	er := &embeddingsReplayer{t: t}
	c := testConfig(dir, er)
	c.Axis, c.Loads, c.Auto, c.Start, c.Max, c.IdleCheck = Rate, nil, true, 5, 320, false
	c.Args, c.Given = []string{"--auto", "--auto-axis", "rate", "-o", dir}, map[string]bool{"auto": true, "output": true}
	c.JSON = true
	if err := Run(context.Background(), c, nil); err != nil {
		t.Fatalf("%v\n%s", err, c.Stderr)
	}
	var rep struct {
		Saturation struct {
			Found    bool    `json:"found"`
			PassLoad float64 `json:"pass_load"`
			FailLoad float64 `json:"fail_load"`
		} `json:"saturation"`
	}
	if err := json.Unmarshal(c.Stdout.(*bytes.Buffer).Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	b := rep.Saturation
	if !b.Found || b.PassLoad > embeddingsCapacity || b.FailLoad <= embeddingsCapacity || b.FailLoad > b.PassLoad*(1+c.Resolution)+1e-9 {
		t.Errorf("saturation %+v after rates %v, want the capacity %d bracketed to %g", b, er.rates, embeddingsCapacity, c.Resolution)
	}
	if log := c.Stderr.(*bytes.Buffer).String(); !strings.Contains(log, " req/s, sustained ") || !strings.Contains(log, "inputs/s), latency p99 ") {
		t.Errorf("log:\n%s", log)
	}
}

// TestUnaryRepeatedPoint: a repeated point of embeddings resamples the requests its
// repeats completed per second of their windows for its sustained interval, and their
// latencies for the p99 interval (the response comes whole), not output tokens or TTFT,
// which such a run has none of.
func TestUnaryRepeatedPoint(t *testing.T) {
	dir := t.TempDir()
	var rows []Row
	var data []*decode.Data
	for k := range 3 {
		file := fmt.Sprintf("point-01-rate-30.r%d.parquet", k+1)
		writePoint(t, filepath.Join(dir, file), embeddingsMeta(30), embeddingsPoint(30))
		d, err := analysis.Load(context.Background(), decode.LoadOptions{}, filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		row, err := NewRow(Rate, 30, file, d, analysis.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		rows, data = append(rows, row), append(data, d)
	}
	sp := NewRepeatedRow(rows, data).Spread
	want := rows[0].Report.Unary.SustainedRequestsPerS
	if sp.Method != SpreadMethod || !(sp.Sustained.Lo > 28 && sp.Sustained.Lo <= want && want <= sp.Sustained.Hi && sp.Sustained.Hi < 32) {
		t.Errorf("sustained interval %+v, want about %v req/s (%s)", sp.Sustained, want, sp.Method)
	}
	if sp.TTFTP99.Lo != 100 || sp.TTFTP99.Hi != 100 {
		t.Errorf("p99 interval %+v, want the latency's, 100 ms", sp.TTFTP99)
	}
	// The bootstrap intervals themselves (the spread is their hull with the repeats' range).
	reps := []*analysis.Report{rows[0].Report, rows[1].Report, rows[2].Report}
	sus, _, p99, _ := pooledIntervals(reps, data, SpreadBootstrap, "30")
	if !sus.Valid() || !(sus.Lo > 28 && sus.Hi < 32) || !p99.Valid() || p99.Lo != 100 || p99.Hi != 100 {
		t.Errorf("bootstrap intervals: sustained %+v, p99 %+v; want about 30 req/s and 100 ms", sus, p99)
	}
}

// TestUnaryClosedSaturationWords: a closed-loop sweep of a run that is not generation says
// its saturation in requests/s, what its knee is judged on, not in output tok/s.
func TestUnaryClosedSaturationWords(t *testing.T) {
	for _, c := range []struct {
		unary bool
		want  string
	}{{true, "sustained requests/s)"}, {false, "sustained output tok/s)"}} {
		rep := &analysis.Report{}
		if c.unary {
			rep.Unary = &analysis.Unary{}
		}
		s := &Report{Rows: []Row{{Load: 4, Report: rep}}}
		if got := s.describeSaturation(); !strings.Contains(got, c.want) {
			t.Errorf("unary %v: %q; want %q", c.unary, got, c.want)
		}
	}
}
