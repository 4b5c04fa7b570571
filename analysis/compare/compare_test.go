package compare

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/internal/goldenfile"

	"github.com/llmreplay/llmreplay/internal/browsertest"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/stats"
)

const ms_ = int64(time.Millisecond)

// okResult is an ok request sent at sentNS whose chunks arrive at the given offsets from
// sentNS, one token each, as replay records it (first and end the first and last chunks).
func okResult(id, sentNS int64, chunks ...int64) *results.Result {
	r := results.NewResult(id, 0, sentNS, 100, int32(len(chunks)))
	r.SentNS, r.ChunkNS, r.Status = sentNS, chunks, results.StatusOK
	r.FirstTokenNS, r.EndNS = sentNS+chunks[0], sentNS+chunks[len(chunks)-1]
	r.OutputTokens, r.OutputTokensSource = int32(len(chunks)), results.SourceUsage
	return r
}

// cmpRows is a synthetic open-loop run: 20 requests/s for 30 s (the same schedule whatever
// the seed, as two replays of one trace), each with a lognormal TTFT around 80 ms and 16
// one-token chunks whose gaps are a lognormal decode step around 20 ms times decodeScale.
// The seed draws the latencies.
func cmpRows(seed uint64, decodeScale float64) []*results.Result {
	return cmpRowsN(seed, decodeScale, 600)
}

func cmpRowsN(seed uint64, decodeScale float64, n int) []*results.Result {
	rng := rand.New(rand.NewPCG(seed, 99))
	var rows []*results.Result
	for i := range n {
		sent := int64(i) * 50 * ms_
		ttft := int64(80*math.Exp(0.3*rng.NormFloat64())) * ms_
		step := 20 * decodeScale * math.Exp(0.2*rng.NormFloat64())
		chunks := []int64{ttft}
		for k := 1; k < 16; k++ {
			chunks = append(chunks, chunks[k-1]+int64(step*math.Exp(0.05*rng.NormFloat64())*1e6))
		}
		rows = append(rows, okResult(int64(i), sent, chunks...))
	}
	return rows
}

func cmpMeta(runID string) results.RunMeta {
	m := results.RunMeta{ToolVersion: "dev", RunID: runID, Mode: "open", Endpoint: "http://127.0.0.1:8000/v1", API: "completions",
		Backend: "vllm", Model: "m", TraceFile: "t.parquet", Speedup: 1, ShardCount: 1, RunStartUnixNS: 1_700_000_000_000_000_000,
		MaxLatenessMS: 10, Host: "h", Flags: map[string]string{}}
	m.TraceSHA256 = "0123456789abcdef0123456789abcdef"
	m.SLO = "ttft=150ms,tpot=25ms"
	return m
}

// writeRun writes rows as dir/name with meta, through replay's own journal and its
// conversion to Parquet, and returns the path.
func writeRun(tb testing.TB, dir, name string, meta results.RunMeta, rows []*results.Result) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatal(err)
	}
	j, err := results.CreateJournal(p+".journal", &meta)
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range rows {
		if err := j.Add(r); err != nil {
			tb.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		tb.Fatal(err)
	}
	if _, err := results.ConvertJournal(p+".journal", p); err != nil {
		tb.Fatal(err)
	}
	if err := os.Remove(p + ".journal"); err != nil {
		tb.Fatal(err)
	}
	return p
}

func compareFiles(t *testing.T, opts Options, paths ...string) (*Comparison, error) {
	t.Helper()
	var args []Arg
	for _, p := range paths {
		a, err := ResolveArg(p)
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	return Runs(context.Background(), args, opts)
}

func figRow(c *Comparison, key string) Row {
	for _, r := range c.Sections[0].Rows {
		if r.Key == key {
			return r
		}
	}
	return Row{}
}

// TestCompareSelf: a run compared with itself shows ~ everywhere (no change is significant).
func TestCompareSelf(t *testing.T) {
	dir := t.TempDir()
	a := writeRun(t, dir, "a.parquet", cmpMeta("a"), cmpRows(1, 1))
	c, err := compareFiles(t, Options{}, a, a)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sections[0].Rows) < 16 {
		t.Fatalf("%d figures, want every headline figure", len(c.Sections[0].Rows))
	}
	for _, r := range c.Sections[0].Rows {
		ch := r.Changes[1]
		if ch.Significant() || ch.Delta != 0 || !ch.CI.Valid() {
			t.Errorf("%s: %+v against itself, want 0 and ~", r.Key, ch)
		}
	}
	var b bytes.Buffer
	c.WriteText(&b)
	if n := strings.Count(b.String(), " ~\n"); n != len(c.Sections[0].Rows) {
		t.Errorf("%d rows marked ~ of %d:\n%s", n, len(c.Sections[0].Rows), b.String())
	}
}

// TestCompareSpanOnlyIsNotAChange: two runs of one schedule whose requests land in the same
// windows, B's last request ending 1 ms later (its span 0.003% longer): the overall rates differ (their span does)
// but nothing tells that difference from noise. Paired, these rates had a zero-width
// interval around the span's change and were called significant in 35% of the false-alarm
// script's pairs.
func TestCompareSpanOnlyIsNotAChange(t *testing.T) {
	dir := t.TempDir()
	rows := cmpRows(1, 1)
	a := writeRun(t, dir, "a.parquet", cmpMeta("a"), rows)
	li := 0 // the request that ends last
	for i := range rows {
		if rows[i].EndNS > rows[li].EndNS {
			li = i
		}
	}
	last := rows[li]
	chunks := append([]int64(nil), last.ChunkNS...)
	chunks[len(chunks)-1] += ms_
	rows[li] = okResult(last.RequestID, last.SentNS, chunks...)
	b := writeRun(t, dir, "b.parquet", cmpMeta("b"), rows)
	c, err := compareFiles(t, Options{}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"requests_per_s", "output_tokens_per_s", "total_tokens_per_s"} {
		ch := figRow(c, key).Changes[1]
		if ch.Delta == 0 || ch.Significant() || !(ch.CI.Hi-ch.CI.Lo > 1) {
			t.Errorf("%s: %+v, want a small change whose interval (wider than 1%%) holds zero", key, ch)
		}
	}
}

// TestCompareDetectsSlowdown: B decodes 10% slower than A (another seed): TPOT and E2E
// changes are significant and their intervals hold the true +10% (TPOT) ; TTFT, which did
// not change, is not significant.
func TestCompareDetectsSlowdown(t *testing.T) {
	dir := t.TempDir()
	a := writeRun(t, dir, "a.parquet", cmpMeta("a"), cmpRows(1, 1))
	b := writeRun(t, dir, "b.parquet", cmpMeta("b"), cmpRows(2, 1.1))
	c, err := compareFiles(t, Options{}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"tpot_p50_ms", "tpot_p90_ms"} {
		ch := figRow(c, key).Changes[1]
		if !ch.Significant() || !ch.CI.Contains(10) {
			t.Errorf("%s: %+v, want significant and holding +10%%", key, ch)
		}
	}
	if ch := figRow(c, "ttft_p50_ms").Changes[1]; ch.Significant() {
		t.Errorf("ttft_p50_ms: %+v, want ~ (TTFT did not change)", ch)
	}
	if ch := figRow(c, "slo_attainment_pct").Changes[1]; !ch.Significant() || ch.Delta >= 0 {
		t.Errorf("attainment (tpot 25 ms SLO): %+v, want a significant fall", ch)
	}
}

func writeCompareOutputs(t *testing.T, c *Comparison) (txt, js []byte) {
	var a, b bytes.Buffer
	if err := c.WriteText(&a); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	return a.Bytes(), b.Bytes()
}

// TestCompareGolden: three runs (B decodes 10% slower, C is another seed of A), and two
// sweep folders point by point, as text and JSON, byte for byte.
func TestCompareGolden(t *testing.T) {
	dir := t.TempDir()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	writeRun(t, ".", "a.parquet", cmpMeta("a"), cmpRows(1, 1))
	writeRun(t, ".", "b.parquet", cmpMeta("b"), cmpRows(2, 1.1))
	writeRun(t, ".", "c.parquet", cmpMeta("c"), cmpRows(3, 1))
	c, err := compareFiles(t, Options{}, "a.parquet", "b.parquet", "c.parquet")
	if err != nil {
		t.Fatal(err)
	}
	txt, js := writeCompareOutputs(t, c)
	t.Chdir(wd)
	goldenfile.Check(t, "compare-runs.txt", txt)
	goldenfile.Check(t, "compare-runs.json", js)

	t.Chdir(dir)
	makeSweep(t, "sweep-a", 1, 1, 2)
	makeSweep(t, "sweep-b", 1.1, 1, 2)
	c, err = compareFiles(t, Options{Bootstrap: stats.Bootstrap{Resamples: 500}}, "sweep-a", "sweep-b")
	if err != nil {
		t.Fatal(err)
	}
	txt, js = writeCompareOutputs(t, c)
	t.Chdir(wd)
	goldenfile.Check(t, "compare-sweeps.txt", txt)
	goldenfile.Check(t, "compare-sweeps.json", js)
}

// makeSweep writes a sweep folder of rate points (the rate in each file's metadata).
func makeSweep(t *testing.T, dir string, decodeScale float64, rates ...float64) {
	t.Helper()
	for i, rate := range rates {
		m := cmpMeta(dir + "-" + analysis.FormatLoad(rate))
		m.Speedup, m.Rate = 0, rate
		writeRun(t, dir, "point-0"+string(rune('1'+i))+"-rate-"+analysis.FormatLoad(rate)+".parquet", m, cmpRows(uint64(10*i)+uint64(decodeScale*100), decodeScale))
	}
}

// TestCompareBadInput: each refusal names the file or folder at fault.
func TestCompareBadInput(t *testing.T) {
	dir := t.TempDir()
	a := writeRun(t, dir, "a.parquet", cmpMeta("a"), cmpRows(1, 1))
	notResults := filepath.Join(dir, "notes.parquet")
	os.WriteFile(notResults, []byte("not parquet"), 0o644)
	other := cmpMeta("o")
	other.TraceSHA256 = "fedcba9876543210fedcba9876543210"
	other.Speedup = 2
	o := writeRun(t, dir, "other.parquet", other, cmpRows(2, 1))
	sa, sb := filepath.Join(dir, "sweep-a"), filepath.Join(dir, "sweep-b")
	makeSweep(t, sa, 1, 1, 2)
	makeSweep(t, sb, 1, 1)
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	for _, c := range []struct {
		name  string
		paths []string
		want  string
	}{
		{"one run", []string{a}, a + ": one run only"},
		{"not a results file", []string{a, notResults}, notResults},
		{"missing file", []string{a, filepath.Join(dir, "nope.parquet")}, "nope.parquet"},
		{"empty folder", []string{a, empty}, empty + ": a folder with no results files"},
		{"sweep missing a point", []string{sa, sb}, sb + ": sweep folder has no point at rate 2"},
		{"sweep against a run", []string{sa, a}, "a sweep folder compares only with sweep folders"},
		{"different runs", []string{a, o}, "B trace_sha256 fedcba987654, A 0123456789ab"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := compareFiles(t, Options{}, c.paths...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one naming %q", err, c.want)
			}
		})
	}
	_, err := compareFiles(t, Options{}, a, o)
	if !errors.Is(err, ErrDifferentRuns) {
		t.Errorf("different runs: %v, want ErrDifferentRuns", err)
	}
	c, err := compareFiles(t, Options{AllowDifferent: true}, a, o)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	c.WriteText(&b)
	if !strings.HasPrefix(b.String(), "DIFFERENT RUNS (compared with --allow-different):\n  B trace_sha256") || !strings.Contains(b.String(), "B speedup 2, A 1") {
		t.Errorf("--allow-different: the differences are not on top:\n%s", b.String())
	}
}

// TestCompareClientLimitedMarked: a run whose replayer sent late is marked in the table's
// run lines, the warnings and the JSON.
func TestCompareClientLimitedMarked(t *testing.T) {
	dir := t.TempDir()
	a := writeRun(t, dir, "a.parquet", cmpMeta("a"), cmpRows(1, 1))
	late := cmpRows(2, 1)
	for i := range late {
		// Every request sent 50 ms after it was due.
		late[i].SentNS, late[i].FirstTokenNS, late[i].EndNS = late[i].SentNS+50*ms_, late[i].FirstTokenNS+50*ms_, late[i].EndNS+50*ms_
	}
	b := writeRun(t, dir, "b.parquet", cmpMeta("b"), late)
	c, err := compareFiles(t, Options{}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	txt, js := writeCompareOutputs(t, c)
	if !regexp.MustCompile(`(?m)^B  .*CLIENT-LIMITED\)$`).Match(txt) || bytes.Contains(txt, []byte("A  a.parquet  (open loop, speedup 1, trace 0123456789ab, model m  CLIENT")) {
		t.Errorf("client-limited run not marked (or A marked):\n%s", txt)
	}
	if !bytes.Contains(txt, []byte("warning: run B is client-limited")) || !bytes.Contains(js, []byte(`"client_limited": true`)) {
		t.Errorf("client-limited warning or JSON flag missing:\n%s", txt)
	}
}

// TestCompareRepeats: a folder of three repeats of one run is one run; the between-repeat
// spread widens the interval beyond that of one repeat.
func TestCompareRepeats(t *testing.T) {
	dir := t.TempDir()
	a := writeRun(t, dir, "a.parquet", cmpMeta("a"), cmpRows(1, 1))
	for r := 1; r <= 3; r++ {
		m := cmpMeta("rep" + string(rune('0'+r)))
		m.Repeat, m.RepeatCount, m.RepeatGroup = r, 3, "rep1"
		// The repeats drift: each decodes 4% slower than the one before.
		writeRun(t, filepath.Join(dir, "rep"), "results-r"+string(rune('0'+r))+".parquet", m, cmpRows(uint64(10+r), 1+0.04*float64(r-1)))
	}
	one := writeRun(t, dir, "one.parquet", cmpMeta("one"), cmpRows(11, 1))
	c3, err := compareFiles(t, Options{}, a, filepath.Join(dir, "rep"))
	if err != nil {
		t.Fatal(err)
	}
	c1, err := compareFiles(t, Options{}, a, one)
	if err != nil {
		t.Fatal(err)
	}
	if got := c3.Sections[0].Runs[1].Repeats; got != 3 {
		t.Fatalf("repeats %d, want 3", got)
	}
	w3, w1 := figRow(c3, "tpot_p50_ms").Changes[1].CI, figRow(c1, "tpot_p50_ms").Changes[1].CI
	if !(w3.Hi-w3.Lo > w1.Hi-w1.Lo) {
		t.Errorf("TPOT p50 interval with drifting repeats %v is not wider than one repeat's %v", w3, w1)
	}
	mixed := filepath.Join(dir, "mixed")
	writeRun(t, mixed, "x.parquet", cmpMeta("x"), cmpRows(1, 1))
	writeRun(t, mixed, "y.parquet", cmpMeta("y"), cmpRows(2, 1))
	if _, err := compareFiles(t, Options{}, a, mixed); err == nil || !strings.Contains(err.Error(), "belong to different runs") {
		t.Errorf("a folder of two runs: %v, want a refusal", err)
	}
}

func TestCompareParquetAndHTML(t *testing.T) {
	dir := t.TempDir()
	a := writeRun(t, dir, "a.parquet", cmpMeta("a"), cmpRows(1, 1))
	b := writeRun(t, dir, "b.parquet", cmpMeta("b"), cmpRows(2, 1.1))
	c, err := compareFiles(t, Options{Bootstrap: stats.Bootstrap{Resamples: 200}}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := c.WriteParquetDir(out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"compare.parquet", "summary.parquet", "timeseries.parquet"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	var page bytes.Buffer
	if err := c.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="plot-ttft-cdf-0"`, `id="plot-tpot-cdf-0"`, `id="plot-throughput-0"`, "<th>B vs A</th>", "TPOT p50 ms"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %s", want)
		}
	}
}

// TestCompareHTMLRendersInChromium: the page's own check passes in headless Chromium.
func TestCompareHTMLRendersInChromium(t *testing.T) {
	bin := browsertest.Chromium(t)
	dir := t.TempDir()
	a := writeRun(t, dir, "a.parquet", cmpMeta("a"), cmpRows(1, 1))
	b := writeRun(t, dir, "b.parquet", cmpMeta("b"), cmpRows(2, 1.1))
	c, err := compareFiles(t, Options{Bootstrap: stats.Bootstrap{Resamples: 200}}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "compare.html")
	if err := c.WriteHTMLFile(page); err != nil {
		t.Fatal(err)
	}
	browsertest.RenderCheck(t, bin, page, 3)
}

// BenchmarkCompareRuns: two runs of 100k requests (cmpRowsN: 20 req/s, 16 chunks each),
// every figure with 2000 resamples, loading and analysing included.
func BenchmarkRuns(b *testing.B) {
	dir := b.TempDir()
	p := filepath.Join(dir, "a.parquet")
	writeRun(b, dir, "a.parquet", cmpMeta("a"), cmpRowsN(1, 1, 100_000))
	a, err := ResolveArg(p)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Runs(context.Background(), []Arg{a, a}, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestComparePromptOffWarned: a run whose server counted its prompts far off their targets
// (here a tenth: prompts truncated) is warned of in the comparison; its match is not.
func TestComparePromptOffWarned(t *testing.T) {
	dir := t.TempDir()
	counted := func(rows []*results.Result, share float64) []*results.Result {
		for i := range rows {
			rows[i].PromptTokensServer = int32(float64(rows[i].PromptTokens) * share)
		}
		return rows
	}
	a := writeRun(t, dir, "a.parquet", cmpMeta("a"), counted(cmpRows(1, 1), 1))
	b := writeRun(t, dir, "b.parquet", cmpMeta("b"), counted(cmpRows(2, 1), 0.1))
	c, err := compareFiles(t, Options{}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	txt, _ := writeCompareOutputs(t, c)
	if !bytes.Contains(txt, []byte("warning: run B's prompts were counted more than 5.0% off their targets")) || bytes.Contains(txt, []byte("run A's prompts")) {
		t.Errorf("prompt-off warning missing for B (or given for A):\n%s", txt)
	}
}

// embeddingsRows is a run of embeddings (not streamed: no chunks, no first token, no
// output): 20 requests/s for 30 s, request i with 1 + i%4 inputs of 64 prompt tokens,
// answered after a lognormal latency around 40 ms times scale.
func embeddingsRows(seed uint64, scale float64) []*results.Result {
	rng := rand.New(rand.NewPCG(seed, 7))
	var rows []*results.Result
	for i := range 600 {
		sent := int64(i) * 50 * ms_
		n := int32(1 + i%4)
		r := results.NewResult(int64(i), 0, sent, 64*n, 0)
		r.SentNS, r.Status, r.HTTPStatus = sent, results.StatusOK, 200
		r.EndNS = sent + int64(40*scale*math.Exp(0.3*rng.NormFloat64())*1e6)
		r.PromptTokensServer, r.Inputs = 64*n, n
		rows = append(rows, r)
	}
	return rows
}

// TestCompareUnary: two runs of embeddings, B answering 20% slower: compare shows their
// latency percentiles (B's change significant, its interval holding +20%) and their
// inputs and prompt tokens per second with intervals, and none of the generation figures.
func TestCompareUnary(t *testing.T) {
	dir := t.TempDir()
	meta := func(id string) results.RunMeta {
		m := cmpMeta(id)
		m.API, m.SLO = "embeddings", "e2e=50ms"
		return m
	}
	a := writeRun(t, dir, "a.parquet", meta("a"), embeddingsRows(1, 1))
	b := writeRun(t, dir, "b.parquet", meta("b"), embeddingsRows(2, 1.2))
	c, err := compareFiles(t, Options{}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"latency_p50_ms", "latency_p90_ms"} {
		ch := figRow(c, key).Changes[1]
		if !ch.Significant() || !ch.CI.Contains(20) {
			t.Errorf("%s: %+v, want significant and holding +20%%", key, ch)
		}
	}
	for _, key := range []string{"inputs_per_s", "prompt_tokens_per_s", "sustained_requests_per_s", "sustained_inputs_per_s", "sustained_prompt_tokens_per_s", "requests_per_s"} {
		r := figRow(c, key)
		if len(r.Values) != 2 || !(r.Values[0] > 0) || !r.Changes[1].CI.Valid() || r.Changes[1].Significant() {
			t.Errorf("%s: %+v, want both runs' values and an interval holding no change (the same schedule)", key, r)
		}
	}
	if ch := figRow(c, "slo_attainment_pct").Changes[1]; !ch.Significant() || ch.Delta >= 0 {
		t.Errorf("attainment (e2e 50 ms): %+v, want a significant fall", ch)
	}
	for _, r := range c.Sections[0].Rows {
		if strings.HasPrefix(r.Key, "ttft") || strings.HasPrefix(r.Key, "tpot") || strings.HasPrefix(r.Key, "itl") || strings.Contains(r.Key, "output_tokens") {
			t.Errorf("compare of runs of embeddings shows %s", r.Key)
		}
	}
	var page bytes.Buffer
	if err := c.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="plot-latency-cdf-0"`, "Requests completed/s over time"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(page.String(), `id="plot-ttft-cdf-0"`) {
		t.Errorf("page of runs of embeddings draws a TTFT CDF")
	}
	path := filepath.Join(dir, "compare.html")
	if err := c.WriteHTMLFile(path); err != nil {
		t.Fatal(err)
	}
	browsertest.RenderCheck(t, browsertest.Chromium(t), path, 2) // the latency CDF, requests over time
}

// TestCompareImages: runs where every other request sends two images, B's waiting 30%
// longer for its first token: compare shows TTFT with images up about 30%, significant, and
// TTFT without images unchanged.
func TestCompareImages(t *testing.T) {
	dir := t.TempDir()
	withImages := func(seed uint64, scale float64) []*results.Result {
		rows := cmpRows(seed, 1)
		for i, r := range rows {
			if i%2 == 0 {
				continue
			}
			shift := int64(float64(r.FirstTokenNS-r.SentNS) * (scale - 1))
			r.FirstTokenNS, r.EndNS = r.FirstTokenNS+shift, r.EndNS+shift
			for k := range r.ChunkNS {
				r.ChunkNS[k] += shift
			}
			r.Images, r.ImageTokens = 2, 512
		}
		return rows
	}
	a := writeRun(t, dir, "a.parquet", cmpMeta("a"), withImages(1, 1))
	b := writeRun(t, dir, "b.parquet", cmpMeta("b"), withImages(1, 1.3))
	c, err := compareFiles(t, Options{}, a, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"ttft_images_p50_ms", "ttft_images_p90_ms"} {
		if ch := figRow(c, key).Changes[1]; !ch.Significant() || ch.Delta < 25 || ch.Delta > 35 {
			t.Errorf("%s: %+v, want about +30%%, significant", key, ch)
		}
	}
	if ch := figRow(c, "ttft_no_images_p50_ms").Changes[1]; ch.Delta != 0 || ch.Significant() || !ch.CI.Valid() {
		t.Errorf("ttft_no_images_p50_ms: %+v, want no change", ch)
	}
}
