package analysis

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay/results"
)

const ms_ = int64(time.Millisecond)

func near(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.IsNaN(want) && math.IsNaN(got) {
		return
	}
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %.12g, want %.12g", name, got, want)
	}
}

func load(t *testing.T, rows []row, metas ...results.RunMeta) *decode.Data {
	t.Helper()
	m := testRun()
	if len(metas) > 0 {
		m = metas[0]
	}
	d, err := Load(context.Background(), decode.LoadOptions{BatchSize: 3}, tempResults(t, m, rows))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// smallRun is a hand-built run whose every figure is worked out in the test.
func smallRun() []row {
	a := okRow(1, 1*ms_, 100*ms_, 150*ms_, 200*ms_, 250*ms_) // TTFT 100, E2E 250, TPOT 50, ITL 50,50,50
	a.scheduled = 0
	a.outTarget = 5                         // one short of its target
	b := okRow(2, 10*ms_, 200*ms_, 300*ms_) // TTFT 200, E2E 300, TPOT 100, ITL 100
	b.promptServer = p32(101)
	c := okRow(3, 25*ms_, 50*ms_) // TTFT 50, E2E 50, no TPOT
	c.scheduled = 20 * ms_
	c.prompt = 3000
	d := row{id: 4, scheduled: 30 * ms_, sent: p64(30 * ms_), prompt: 100, outTarget: 10, status: "http_error", httpStatus: p32(503)}
	e := row{id: 5, scheduled: 40 * ms_, prompt: 100, outTarget: 10, status: "dropped"}
	f := row{id: 6, scheduled: 50 * ms_, sent: p64(50 * ms_), first: p64(110 * ms_), end: p64(110 * ms_), chunks: []int64{60 * ms_}, prompt: 100, outTarget: 10, status: "canceled"}
	return []row{a, b, c, d, e, f}
}

func TestSmallRunFigures(t *testing.T) {
	d := load(t, smallRun())
	opts := DefaultOptions()
	opts.SLO = SLO{TTFT: 150 * time.Millisecond, TPOT: 60 * time.Millisecond}
	opts.PromptBuckets = []int64{1000}
	r, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Requests; got.Total != 6 || got.OK != 3 || got.Failed != 1 || got.Dropped != 1 || got.Canceled != 1 {
		t.Errorf("requests = %+v", got)
	}
	near(t, "ttft mean", r.TTFT.Mean, 350.0/3)
	near(t, "ttft p50", r.TTFT.P50, 100)
	near(t, "ttft p90", r.TTFT.P90, 180)
	near(t, "ttft max", r.TTFT.Max, 200)
	near(t, "tpot p50", r.TPOT.P50, 75)
	if r.TPOT.N != 2 {
		t.Errorf("tpot n = %d, want 2 (single-token requests have none)", r.TPOT.N)
	}
	near(t, "itl p50", r.ITL.P50, 50)
	near(t, "itl p90", r.ITL.P90, 85)
	near(t, "itl mean", r.ITL.Mean, 62.5)
	near(t, "e2e p50", r.E2E.P50, 250)
	// Lateness of every sent request: 1, 0, 5, 0, 0 ms.
	near(t, "lateness mean", r.Lateness.Mean, 1.2)
	near(t, "lateness p90", r.Lateness.P90, 3.4)
	near(t, "lateness max", r.Lateness.Max, 5)

	dur := 0.309 // first sent 1 ms, last end 310 ms
	near(t, "duration", r.Throughput.DurationS, dur)
	near(t, "requests/s", r.Throughput.RequestsPerS, 3/dur)
	near(t, "output tok/s", r.Throughput.OutputTokensPerS, 7/dur)
	near(t, "total tok/s", r.Throughput.TotalTokensPerS, (100+101+3000+7)/dur)

	g := r.Goodput
	if g == nil || g.Good != 2 {
		t.Fatalf("goodput = %+v, want 2 good (A and C)", g)
	}
	near(t, "goodput req/s", g.RequestsPerS, 2/dur)
	near(t, "goodput tok/s", g.OutputTokensPerS, 5/dur)
	near(t, "attainment", g.Attainment, 40) // 2 of 5 non-canceled

	k := r.Tokens
	if k.OK != 3 || k.OutputTarget != 5+2+1 || k.Output != 7 || k.Shorter != 1 || k.Longer != 0 || k.PromptMismatch != 1 || k.Chunks != 7 {
		t.Errorf("tokens = %+v", k)
	}
	if r.Flags.ClientLimited {
		t.Error("client-limited with lateness p99 under 10 ms")
	}
	if len(r.ByPrompt) != 2 || r.ByPrompt[0].Requests != 5 || r.ByPrompt[1].Requests != 1 || r.ByPrompt[1].OK != 1 {
		t.Fatalf("by prompt = %+v", r.ByPrompt)
	}
	near(t, "bucket 0 ttft p50", r.ByPrompt[0].TTFT.P50, 150)
	near(t, "bucket 0 attainment", r.ByPrompt[0].Attainment, 25) // A of A,B,D,E
	near(t, "bucket 1 attainment", r.ByPrompt[1].Attainment, 100)
	if !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "ttft p99 and p99.9 from 3 samples") }) {
		t.Errorf("no small-sample warning in %q", r.Warnings)
	}
}

func TestChunkTokensPerTokenITLAndAttribution(t *testing.T) {
	r1 := okRow(1, 0, 100*ms_, 130*ms_, 150*ms_)
	r1.chunkTokens = []int32{1, 3, 2}
	r1.out = p32(6)
	r1.outTarget = 6
	r2 := okRow(2, 0, 100*ms_, 200*ms_) // no chunk_tokens: output_tokens 4 spread over 2 chunks
	r2.out = p32(4)
	r2.outTarget = 4
	d := load(t, []row{r1, r2})
	r, err := Analyze(d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "itl per chunk p50", r.ITL.P50, 30) // samples 30, 20, 100
	if r.ITLPerToken.N != 5 {
		t.Fatalf("per-token ITL samples = %d, want 5 tokens", r.ITLPerToken.N)
	}
	near(t, "per-token itl p50", r.ITLPerToken.P50, 10)
	near(t, "per-token itl max", r.ITLPerToken.Max, 10)
	// Tokens by arrival bin: 1 @100, 3 @130, 2 @150 ms; 2 @100, 2 @200 ms.
	want := map[int]float64{10: 3, 13: 3, 15: 2, 20: 2}
	for b, v := range d.TokenBins {
		if v != want[b] {
			t.Errorf("bin %d: %v tokens, want %v", b, v, want[b])
		}
	}
}

// steadyRun: a request every 10 ms for dur, 10 one-token chunks 20 ms apart starting
// firstMS(i) after the send: 1000 tok/s in steady state, each request in flight
// firstMS(i)+180 ms.
func steadyRun(dur time.Duration, firstMS func(i int) int64) []row {
	var rows []row
	for i := 0; int64(i)*10*ms_ < int64(dur); i++ {
		f := firstMS(i)
		var chunks []int64
		for k := int64(0); k < 10; k++ {
			chunks = append(chunks, (f+20*k)*ms_)
		}
		rows = append(rows, okRow(int64(i), int64(i)*10*ms_, chunks...))
	}
	return rows
}

func TestSustainedPeakInflight(t *testing.T) {
	d := load(t, steadyRun(20*time.Second, func(int) int64 { return 100 }))
	opts := DefaultOptions()
	opts.Warmup = time.Second
	r, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	tp := r.Throughput
	near(t, "window start", tp.WindowStartS, 1)
	near(t, "window end", tp.WindowEndS, 19.99) // last send
	near(t, "sustained", tp.SustainedOutputTokensPerS, 1000)
	near(t, "peak", tp.PeakOutputTokensPerS, 1000)
	// Little's law: 100 req/s * 0.28 s.
	near(t, "inflight at 10 s", r.Series[10].Inflight, 28)
	if r.Series[10].Sent != 100 || r.Series[10].Completed != 100 {
		t.Errorf("interval 10: %+v", r.Series[10])
	}
	near(t, "interval ttft p50", r.Series[10].TTFTP50, 100)
	near(t, "interval tok/s", r.Series[10].OutputTokensPerS, 1000)
	if r.Flags.Overloaded {
		t.Errorf("steady run flagged overloaded: %+v", r.Flags)
	}
	// Overall output rate: 20000 tokens over 0 .. 19.99 s + 0.28 s.
	near(t, "overall tok/s", tp.OutputTokensPerS, 20000/20.27)
}

// TestSustainedWithoutChunkTokens: a stream without chunk_tokens (a server that sends no
// per-chunk usage, or per-chunk usage the client did not believe, as Ollama's all-zero
// placeholder) has its output_tokens spread over its chunks, so sustained and peak
// output tok/s are the tokens the server reported: here 2 a chunk, 2000 tok/s.
func TestSustainedWithoutChunkTokens(t *testing.T) {
	rows := steadyRun(20*time.Second, func(int) int64 { return 100 })
	for i := range rows {
		rows[i].out, rows[i].outTarget = p32(20), 20
	}
	d := load(t, rows)
	opts := DefaultOptions()
	opts.Warmup = time.Second
	r, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "sustained", r.Throughput.SustainedOutputTokensPerS, 2000)
	near(t, "peak", r.Throughput.PeakOutputTokensPerS, 2000)
	if k := r.Tokens; k.WithChunkTokens != 0 || k.Output != 20*int64(len(rows)) {
		t.Errorf("tokens = %+v, want no chunk_tokens and 20 a request", k)
	}
}

// TestSustainedZeroChunkTokens: a file whose chunk_tokens are all zero for answers the
// server counted (recorded from Ollama's zero usage placeholders before the client stopped
// believing them) is read as having none: sustained and peak output tok/s are those of
// its output_tokens spread over its chunks, not 0.
func TestSustainedZeroChunkTokens(t *testing.T) {
	rows := steadyRun(20*time.Second, func(int) int64 { return 100 })
	for i := range rows {
		rows[i].out, rows[i].outTarget = p32(20), 20
		rows[i].chunkTokens = make([]int32, len(rows[i].chunks))
	}
	d := load(t, rows)
	opts := DefaultOptions()
	opts.Warmup = time.Second
	r, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "sustained", r.Throughput.SustainedOutputTokensPerS, 2000)
	near(t, "peak", r.Throughput.PeakOutputTokensPerS, 2000)
	if k := r.Tokens; k.ChunkTokensMismatch != int64(len(rows)) {
		t.Errorf("tokens = %+v; the file's chunk_tokens still disagree with output_tokens, and the report says so", k)
	}
}

func TestWarmupDetected(t *testing.T) {
	// For 4 s every request waits an extra 400 ms for its first token, then none: the
	// token rate dips at the start and MSER-5 must cut about there.
	d := load(t, steadyRun(30*time.Second, func(i int) int64 {
		if i < 400 {
			return 100 + int64(400-i)
		}
		return 100
	}))
	r, err := Analyze(d, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	tp := r.Throughput
	if !tp.WarmupDetected || tp.WarmupS < 0.5 || tp.WarmupS > 5 {
		t.Errorf("warm-up %v s (detected %v), want about 4 s", tp.WarmupS, tp.WarmupDetected)
	}
	if math.Abs(tp.SustainedOutputTokensPerS-1000) > 20 {
		t.Errorf("sustained = %v, want about 1000", tp.SustainedOutputTokensPerS)
	}
	flat := load(t, steadyRun(30*time.Second, func(int) int64 { return 100 }))
	rf, _ := Analyze(flat, DefaultOptions())
	if rf.Throughput.WarmupS > 0.5 {
		t.Errorf("flat run: warm-up %v s, want at most the 0.5 s ramp", rf.Throughput.WarmupS)
	}
}

func TestOverloadedAndClientLimited(t *testing.T) {
	// The queue grows: each request waits 2 ms longer than the one before for its first token.
	d := load(t, steadyRun(30*time.Second, func(i int) int64 { return 100 + 2*int64(i) }))
	opts := DefaultOptions()
	opts.Warmup = 0
	r, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Flags.Overloaded || !r.Flags.InflightTrend.Up || !r.Flags.TTFTTrend.Up {
		t.Errorf("growing queue not flagged overloaded: %+v", r.Flags)
	}
	rows := steadyRun(15*time.Second, func(int) int64 { return 100 })
	for i := range rows {
		if i%50 == 10 {
			rows[i].scheduled -= 20 * ms_ // 2% of sends 20 ms late
		}
	}
	rl, err := Analyze(load(t, rows), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !rl.Flags.ClientLimited {
		t.Errorf("lateness p99 %v ms not flagged client-limited", rl.Lateness.P99)
	}
}

func TestFitTrend(t *testing.T) {
	var ts, flat, up []float64
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200; i++ {
		ts = append(ts, float64(i))
		flat = append(flat, 10+rng.NormFloat64())
		up = append(up, 10+0.2*float64(i)+rng.NormFloat64())
	}
	if tr := fitTrend(ts, flat, 200); tr.Up {
		t.Errorf("noise flagged as trend: %+v", tr)
	}
	tr := fitTrend(ts, up, 200)
	if !tr.Up || math.Abs(tr.Slope-0.2) > 0.02 {
		t.Errorf("trend 0.2/s: %+v", tr)
	}
	if tr := fitTrend(ts[:5], up[:5], 5); tr.Points != 0 {
		t.Errorf("5 points tested: %+v", tr)
	}
}

func TestShardsMergeAndMixedRuns(t *testing.T) {
	dir := t.TempDir()
	m0, m1 := testRun(), testRun()
	m0.ShardCount, m1.ShardCount = 2, 2
	m1.ShardIndex = 1
	writeResults(t, dir+"/s0.parquet", m0, []row{okRow(1, 0, 100*ms_)})
	writeResults(t, dir+"/s1.parquet", m1, []row{okRow(2, 50*ms_, 100*ms_)})
	d, err := Load(context.Background(), decode.LoadOptions{}, dir+"/s0.parquet", dir+"/s1.parquet")
	if err != nil {
		t.Fatal(err)
	}
	r, _ := Analyze(d, Options{})
	if r.Requests.OK != 2 || r.Mixed {
		t.Errorf("merged shards: %+v mixed=%v", r.Requests, r.Mixed)
	}
	near(t, "merged duration", r.Throughput.DurationS, 0.15)
	if _, err := Load(context.Background(), decode.LoadOptions{}, dir+"/s0.parquet"); !errors.Is(err, decode.ErrPartialRun) || !strings.Contains(err.Error(), "1/2") {
		t.Errorf("shard 0/2 alone: got %v, want ErrPartialRun naming shard 1/2", err)
	}
	if d, err := Load(context.Background(), decode.LoadOptions{AllowPartial: true}, dir+"/s0.parquet"); err != nil {
		t.Fatal(err)
	} else if len(d.MissingShards()) != 1 {
		t.Error("missing shard 1/2 not noticed")
	} else if r, err := Analyze(d, DefaultOptions()); err != nil || !strings.Contains(strings.Join(r.Warnings, "\n"), "shards missing: 1/2") {
		t.Errorf("partial analysis: %v, warnings %q", err, r.Warnings)
	}
	if _, err := Load(context.Background(), decode.LoadOptions{}, dir+"/s0.parquet", dir+"/s0.parquet"); err == nil {
		t.Error("same file twice accepted")
	}

	other := testRun()
	other.RunID = "run2"
	other.RunStartUnixNS += int64(time.Second)
	writeResults(t, dir+"/other.parquet", other, []row{okRow(3, 0, 100*ms_)})
	_, err = Load(context.Background(), decode.LoadOptions{}, dir+"/s0.parquet", dir+"/other.parquet")
	if !errors.Is(err, decode.ErrMixedRuns) {
		t.Fatalf("mixed runs: err = %v", err)
	}
	d, err = Load(context.Background(), decode.LoadOptions{AllowMixed: true, AllowPartial: true}, dir+"/s0.parquet", dir+"/other.parquet")
	if err != nil {
		t.Fatal(err)
	}
	r, _ = Analyze(d, Options{})
	// The second run started 1 s later: its request ends at 1.1 s on the common axis.
	near(t, "pooled last end", r.Throughput.LastEndS, 1.1)
	if !r.Mixed || !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "different runs") }) {
		t.Errorf("pooled runs not flagged: %v", r.Warnings)
	}
}

func TestBadInputNamesRowAndField(t *testing.T) {
	rows := smallRun()
	rows[4].status = "exploded"
	_, err := Load(context.Background(), decode.LoadOptions{BatchSize: 2}, tempResults(t, testRun(), rows))
	var fe *decode.FieldError
	if !errors.As(err, &fe) || fe.Row != 4 || fe.Field != "status" || !strings.Contains(err.Error(), "results.parquet row 4: status") {
		t.Fatalf("err = %v", err)
	}
	rows = smallRun()
	rows[1].chunks = []int64{300 * ms_, 200 * ms_}
	_, err = Load(context.Background(), decode.LoadOptions{}, tempResults(t, testRun(), rows))
	if !errors.As(err, &fe) || fe.Row != 1 || fe.Field != "chunk_ns" {
		t.Fatalf("err = %v", err)
	}
	rows = smallRun()
	rows[0].chunks = []int64{100 * ms_, 310 * ms_, 200 * ms_, 250 * ms_} // the max in the middle
	_, err = Load(context.Background(), decode.LoadOptions{}, tempResults(t, testRun(), rows))
	if !errors.As(err, &fe) || fe.Row != 0 || fe.Field != "chunk_ns" || !strings.Contains(err.Error(), "entry 2") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseSLOAndBuckets(t *testing.T) {
	s, err := ParseSLO("ttft=2s, tpot=100ms,e2e:30000")
	if err != nil || s != (SLO{TTFT: 2 * time.Second, TPOT: 100 * time.Millisecond, E2E: 30 * time.Second}) {
		t.Fatalf("ParseSLO = %+v, %v", s, err)
	}
	if back, _ := ParseSLO(s.String()); back != s {
		t.Errorf("round trip %q -> %+v", s.String(), back)
	}
	for _, bad := range []string{"ttft", "ttft=-1s", "foo=1s", "ttft=1s,ttft=2s", "ttft=abc"} {
		if _, err := ParseSLO(bad); err == nil {
			t.Errorf("ParseSLO(%q) accepted", bad)
		}
	}
	p, o, err := ParseBuckets("prompt=512,2k", nil, nil)
	if err != nil || !slices.Equal(p, []int64{512, 2048}) || o != nil {
		t.Errorf("ParseBuckets = %v %v %v", p, o, err)
	}
	if _, _, err := ParseBuckets("3,2", nil, nil); err == nil {
		t.Error("descending edges accepted")
	}
	if e := defaultEdges(3, 100000); len(e) > 7 || e[0] <= 3 {
		t.Errorf("defaultEdges = %v", e)
	}
}

// Row groups decoded in parallel must give exactly what one reader gives, and errors must
// still name the file's row.
func TestRowGroupsInParallel(t *testing.T) {
	rows := mixedRun()
	one := tempResults(t, testRun(), rows)
	defer func(n int64) { fixtureRowGroup = n }(fixtureRowGroup)
	fixtureRowGroup = 97
	many := tempResults(t, testRun(), rows)
	var texts []string
	for _, c := range []struct {
		path    string
		workers int
	}{{one, 1}, {many, 1}, {many, 3}} {
		d, err := Load(context.Background(), decode.LoadOptions{Workers: c.workers, BatchSize: 10}, c.path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Analyze(d, DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		r.WriteJSON(&b)
		texts = append(texts, b.String())
	}
	if texts[0] != texts[1] || texts[0] != texts[2] {
		t.Errorf("reports differ between one row group, 97-row groups and 3 workers")
	}
	rows[500].status = "bogus"
	_, err := Load(context.Background(), decode.LoadOptions{Workers: 3}, tempResults(t, testRun(), rows))
	var fe *decode.FieldError
	if !errors.As(err, &fe) || fe.Row != 500 {
		t.Errorf("err = %v, want row 500", err)
	}
}

// A load that rises through the whole run never settles: MSER-5 cuts at its limit and the
// report says there was no steady state.
func TestNoSteadyStateWarning(t *testing.T) {
	var rows []row
	for i := 0; ; i++ {
		sent := int64(math.Sqrt(float64(i)) * 0.4e9) // arrival rate grows linearly in time
		if sent > 30e9 {
			break
		}
		rows = append(rows, okRow(int64(i), sent, 50*ms_, 70*ms_, 90*ms_))
	}
	r, err := Analyze(load(t, rows), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "no steady state") }) {
		t.Errorf("rising load: warm-up %v s, warnings %q", r.Throughput.WarmupS, r.Warnings)
	}
	if slices.ContainsFunc(mustAnalyze(t, steadyRun(20*time.Second, func(int) int64 { return 100 })).Warnings, func(w string) bool { return strings.Contains(w, "no steady state") }) {
		t.Error("steady run warned of no steady state")
	}
}

func mustAnalyze(t *testing.T, rows []row) *Report {
	t.Helper()
	r, err := Analyze(load(t, rows), DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return r
}
