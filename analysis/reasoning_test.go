package analysis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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

// servedReasoning is what the test's server served of one request: 300 reasoning tokens
// then 100 answer tokens, one a chunk; the first chunk ttft after the send, the reasoning
// chunks itl apart, the answer chunks answerITL apart (the first of them itl after the
// last reasoning chunk).
type servedReasoning struct {
	sent, ttft, itl, answerITL int64
	reasoning, answer          int
}

func (s servedReasoning) chunks() []int64 {
	var cs []int64
	t := s.ttft
	for k := range s.reasoning + s.answer {
		if k > 0 {
			if k > s.reasoning {
				t += s.answerITL
			} else {
				t += s.itl
			}
		}
		cs = append(cs, t)
	}
	return cs
}

// The figures as docs/metrics.md defines them, from the served times.
func (s servedReasoning) ttfaMS() float64 { return float64(s.chunks()[s.reasoning]) / 1e6 }
func (s servedReasoning) answerTPOTMS() float64 {
	cs := s.chunks()
	return float64(cs[len(cs)-1]-cs[s.reasoning]) / 1e6 / float64(s.answer-1)
}

// reasoningRows is a run of n such requests, 50 ms apart, their TTFT and ITL varied by
// request; answerScale slows the answer's decode. Every fifth request did not reason (no
// reasoning count; its first answer is its first token): its answer is its whole output.
func reasoningRows(n int, answerScale float64) ([]row, []servedReasoning) {
	var rows []row
	var served []servedReasoning
	for i := range n {
		s := servedReasoning{sent: int64(i) * 50 * ms_, ttft: (40 + int64(i%7)) * ms_, itl: 2*ms_ + int64(i%5)*ms_/4,
			reasoning: 300, answer: 100}
		if i%5 == 4 {
			s.reasoning = 0
		}
		s.answerITL = int64(float64(s.itl) * answerScale)
		r := okRow(int64(i), s.sent, s.chunks()...)
		r.firstAnswer = p64(s.sent + s.chunks()[s.reasoning])
		if s.reasoning > 0 {
			r.reasoning, r.reasoningSource = p32(int32(s.reasoning)), results.SourceUsage
		}
		rows, served = append(rows, r), append(served, s)
	}
	return rows, served
}

// want are the reasoning figures' distributions over what was served.
func wantReasoning(served []servedReasoning) (ttfa, tpot, tok stats.Quantiles) {
	var a, b, c []float64
	for _, s := range served {
		a, b = append(a, s.ttfaMS()), append(b, s.answerTPOTMS())
		if s.reasoning > 0 {
			c = append(c, float64(s.reasoning))
		}
	}
	return stats.Summarize(a), stats.Summarize(b), stats.Summarize(c)
}

func analyzeFile(t *testing.T, path string, opts Options) *Report {
	t.Helper()
	d, err := Load(context.Background(), decode.LoadOptions{}, path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Analyze(d, opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sameFloat(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestReasoningFiguresEveryOutput: a reasoning run (300 reasoning tokens then 100 answer
// tokens) reports TTFT, TTFA, reasoning tokens and answer TPOT as served, in the text
// report, JSON, summary.parquet and HTML, and DuckDB recomputes TTFA and answer TPOT from
// the results file with SQL.
func TestReasoningFiguresEveryOutput(t *testing.T) {
	rows, served := reasoningRows(200, 1)
	path := filepath.Join(t.TempDir(), "r.parquet")
	writeResults(t, path, testRun(), rows)
	r := analyzeFile(t, path, DefaultOptions())
	ttfa, tpot, tok := wantReasoning(served)
	if !r.Reasoned {
		t.Fatal("the run is not seen to reason")
	}
	var ttft []float64
	for _, s := range served {
		ttft = append(ttft, float64(s.ttft)/1e6)
	}
	for _, c := range []struct {
		name      string
		got, want stats.Quantiles
	}{{"TTFT", r.TTFT, stats.Summarize(ttft)}, {"TTFA", r.TTFA, ttfa}, {"answer TPOT", r.AnswerTPOT, tpot}, {"reasoning tokens", r.ReasoningTokens, tok}} {
		if c.got.N != c.want.N || !sameFloat(c.got.Mean, c.want.Mean) || !sameFloat(c.got.P50, c.want.P50) || !sameFloat(c.got.P99, c.want.P99) || !sameFloat(c.got.Max, c.want.Max) {
			t.Errorf("%s: %+v, want %+v", c.name, c.got, c.want)
		}
	}
	if tok.N != 160 || tok.P50 != 300 || ttfa.P50 <= r.TTFT.P50 {
		t.Fatalf("the served run is not what the test means: %d reasoning requests, p50 %v; TTFA p50 %v, TTFT p50 %v", tok.N, tok.P50, ttfa.P50, r.TTFT.P50)
	}

	// Text: the rows beside TTFT and TPOT, the reasoning section.
	var txt strings.Builder
	if err := r.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	row := func(name string, q stats.Quantiles) string {
		want.Reset()
		latencyRow(func(f string, a ...any) { fmt.Fprintf(&want, f, a...) }, name, q)
		return want.String()
	}
	for _, line := range []string{row("TTFA (first answer)", ttfa), row("TPOT (answer)", tpot), row("reasoning tokens", tok),
		"\nReasoning, tokens per ok request (answer tokens = output_tokens - reasoning_tokens; counted by usage 160, none 40)\n"} {
		if !strings.Contains(txt.String(), line) {
			t.Errorf("text report lacks %q:\n%s", line, txt.String())
		}
	}
	if i, j := strings.Index(txt.String(), "  TTFT "), strings.Index(txt.String(), "  TTFA (first answer)"); i < 0 || j < i {
		t.Errorf("TTFA does not follow TTFT in the latency table")
	}

	// JSON.
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var j map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	for key, q := range map[string]stats.Quantiles{"ttfa_ms": ttfa, "answer_tpot_ms": tpot, "reasoning_tokens": tok} {
		var got map[string]float64
		if err := json.Unmarshal(j[key], &got); err != nil {
			t.Fatalf("%s: %v in %s", key, err, j[key])
		}
		if !sameFloat(got["p50"], q.P50) || !sameFloat(got["p99"], q.P99) || !sameFloat(got["mean"], q.Mean) {
			t.Errorf("JSON %s = %v, want p50 %v p99 %v mean %v", key, got, q.P50, q.P99, q.Mean)
		}
	}

	var by map[string]int64
	if err := json.Unmarshal(j["reasoning_tokens_source"], &by); err != nil || len(by) != 4 || by["usage"] != 160 || by["none"] != 40 {
		t.Errorf("JSON reasoning_tokens_source = %s, want usage 160, none 40 of four sources", j["reasoning_tokens_source"])
	}

	// summary.parquet.
	dir := t.TempDir()
	if err := WriteParquetDir(dir, r); err != nil {
		t.Fatal(err)
	}
	sum := readSummary(t, filepath.Join(dir, "summary.parquet"), 0)
	for col, w := range map[string]float64{"ttfa_ms_p50": ttfa.P50, "ttfa_ms_p99": ttfa.P99, "answer_tpot_ms_p50": tpot.P50,
		"answer_tpot_ms_p99": tpot.P99, "reasoning_tokens_p50": tok.P50, "reasoning_tokens_n": float64(tok.N)} {
		got, ok := sum[col]
		var g float64
		switch v := got.(type) {
		case float64:
			g = v
		case int64:
			g = float64(v)
		default:
			ok = false
		}
		if !ok || !sameFloat(g, w) {
			t.Errorf("summary %s = %v, want %v", col, got, w)
		}
	}

	// HTML: the TTFA plot beside TTFT's and the rows of its latency table.
	b.Reset()
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	h := b.String()
	if i, k := strings.Index(h, `id="plot-ttft-cdf"`), strings.Index(h, `id="plot-ttfa-cdf"`); i < 0 || k < i || k > strings.Index(h, `id="plot-tpot-cdf"`) {
		t.Errorf("HTML: the TTFA plot is not between TTFT's and TPOT's")
	}
	for _, cell := range []string{"<td>TTFA (first answer)</td><td>" + strconv.FormatInt(ttfa.N, 10) + "</td><td>" + f3(ttfa.Mean) + "</td><td>" + f3(ttfa.P50),
		"<td>TPOT (answer)</td><td>" + strconv.FormatInt(tpot.N, 10) + "</td><td>" + f3(tpot.Mean) + "</td><td>" + f3(tpot.P50),
		"<td>reasoning tokens per request (tokens)</td><td>160</td><td>300.000</td><td>300.000"} {
		if !strings.Contains(h, cell) {
			t.Errorf("HTML lacks %q", cell)
		}
	}

	// DuckDB recomputes TTFA and answer TPOT (answer tokens = output - reasoning, a null
	// reasoning count as 0) from the results file.
	q := duckdbtest.Query(t, `SELECT quantile_cont((first_answer_ns - sent_ns) / 1e6, 0.5) AS ttfa50,
		quantile_cont((first_answer_ns - sent_ns) / 1e6, 0.99) AS ttfa99,
		quantile_cont((end_ns - first_answer_ns) / 1e6 / (output_tokens - coalesce(reasoning_tokens, 0) - 1), 0.5)
			FILTER (output_tokens - coalesce(reasoning_tokens, 0) > 1) AS tpot50,
		quantile_cont((end_ns - first_answer_ns) / 1e6 / (output_tokens - coalesce(reasoning_tokens, 0) - 1), 0.99)
			FILTER (output_tokens - coalesce(reasoning_tokens, 0) > 1) AS tpot99,
		avg(reasoning_tokens) AS tok
		FROM '`+path+`' WHERE status = 'ok' AND first_answer_ns IS NOT NULL`)
	for k, w := range map[string]float64{"ttfa50": r.TTFA.P50, "ttfa99": r.TTFA.P99, "tpot50": r.AnswerTPOT.P50, "tpot99": r.AnswerTPOT.P99, "tok": r.ReasoningTokens.Mean} {
		got, _ := strconv.ParseFloat(toString(q[0][k]), 64)
		if !sameFloat(got, w) {
			t.Errorf("%s: DuckDB %.12g, analyze %.12g", k, got, w)
		}
	}
}

// TestNoReasoningReportsAsBefore: a run that did not reason (its first answers its first
// tokens, no reasoning count, as the replayer writes such a run) reports byte for byte
// what a file without the reasoning columns does: no TTFA, answer TPOT or reasoning rows,
// keys, plots.
func TestNoReasoningReportsAsBefore(t *testing.T) {
	plain, stamped := noReasoningRuns()
	out := func(rows []row) string {
		path := filepath.Join(t.TempDir(), "r.parquet")
		writeResults(t, path, testRun(), rows)
		r := analyzeFile(t, path, DefaultOptions())
		var b bytes.Buffer
		for _, w := range []func(*bytes.Buffer) error{
			func(b *bytes.Buffer) error { return r.WriteText(b) },
			func(b *bytes.Buffer) error { return r.WriteJSON(b) },
			func(b *bytes.Buffer) error { return r.WriteHTML(b) },
		} {
			if err := w(&b); err != nil {
				t.Fatal(err)
			}
		}
		return b.String()
	}
	got, want := out(stamped), out(plain)
	if got != want {
		t.Errorf("a run without reasoning reports differently with first_answer_ns stamped")
	}
	for _, s := range []string{"TTFA", "ttfa", "answer_tpot", "reasoning"} {
		if strings.Contains(got, s) {
			t.Errorf("a run without reasoning mentions %q", s)
		}
	}
}

// noReasoningRuns are the requests of reasoningRows that did not reason, as a file without
// the reasoning columns has them (plain: no first answer) and as the replayer writes them
// (stamped: the first answer is the first token).
func noReasoningRuns() (plain, stamped []row) {
	rows, _ := reasoningRows(50, 1)
	for _, r := range rows {
		if r.reasoning != nil {
			continue
		}
		plain = append(plain, r)
		r.firstAnswer = r.first
		stamped = append(stamped, r)
	}
	for i := range plain {
		plain[i].firstAnswer = nil
	}
	return plain, stamped
}

// TestReasoningSLO: goodput objectives on TTFA and answer TPOT count the requests that
// meet them, as served; a request that never answered misses a TTFA objective.
func TestReasoningSLO(t *testing.T) {
	rows, served := reasoningRows(100, 1)
	// Request 0 only reasoned: no first answer.
	rows[0].firstAnswer = nil
	path := filepath.Join(t.TempDir(), "r.parquet")
	writeResults(t, path, testRun(), rows)
	ttfa, tpot, _ := wantReasoning(served)
	for _, c := range []struct {
		slo  SLO
		good func(s servedReasoning, i int) bool
	}{
		{SLO{TTFA: time.Duration(ttfa.P50 * 1e6)}, func(s servedReasoning, i int) bool { return i > 0 && s.ttfaMS() <= ttfa.P50 }},
		{SLO{AnswerTPOT: time.Duration(tpot.P50 * 1e6)}, func(s servedReasoning, i int) bool { return i == 0 || s.answerTPOTMS() <= tpot.P50 }},
	} {
		opts := DefaultOptions()
		opts.SLO = c.slo
		r := analyzeFile(t, path, opts)
		var want int64
		for i, s := range served {
			if c.good(s, i) {
				want++
			}
		}
		if r.Goodput == nil || r.Goodput.Good != want || want == 0 || want == 100 {
			t.Errorf("slo %s: %+v good, want %d", c.slo, r.Goodput, want)
		}
	}
	// A file without first answers (written before revision 1.3): said, since every
	// request then misses a TTFA objective.
	for i := range rows {
		rows[i].firstAnswer = nil
	}
	old := filepath.Join(t.TempDir(), "old.parquet")
	writeResults(t, old, testRun(), rows)
	opts := DefaultOptions()
	opts.SLO = SLO{TTFA: time.Second}
	if r := analyzeFile(t, old, opts); r.Goodput.Good != 0 || !strings.Contains(strings.Join(r.Warnings, "\n"), "no request has first_answer_ns") {
		t.Errorf("ttfa objective on a file without first answers: %d good, warnings %q", r.Goodput.Good, r.Warnings)
	}
	if s, err := ParseSLO("ttfa=3s,answer_tpot=40ms"); err != nil || s.TTFA != 3*time.Second || s.AnswerTPOT != 40*time.Millisecond || s.String() != "ttfa=3s,answer_tpot=40ms" {
		t.Errorf("ParseSLO: %+v %v", s, err)
	}
}

// TestUnknownReasoningSource: a reasoning_tokens_source the contract does not name is a
// bad value, named with its file, row and column.
func TestUnknownReasoningSource(t *testing.T) {
	rows, _ := reasoningRows(3, 1)
	rows[1].reasoningSource = "guess"
	path := filepath.Join(t.TempDir(), "r.parquet")
	writeResults(t, path, testRun(), rows)
	_, err := Load(context.Background(), decode.LoadOptions{}, path)
	var fe *decode.FieldError
	if !errors.As(err, &fe) || fe.Field != results.ColReasoningTokensSource || fe.Row != 1 || !strings.Contains(err.Error(), `"guess"`) {
		t.Errorf("source guess: %v; want an error naming row 1, reasoning_tokens_source and the value", err)
	}
}

// TestFirstAnswerOutsideItsStream: a first answer before the first token or after the
// end is a bad value, named with its file, row and column.
func TestFirstAnswerOutsideItsStream(t *testing.T) {
	for _, off := range []int64{-1, 1} {
		rows, _ := reasoningRows(3, 1)
		if off < 0 {
			rows[2].firstAnswer = p64(*rows[2].first - 1)
		} else {
			rows[2].firstAnswer = p64(*rows[2].end + 1)
		}
		path := filepath.Join(t.TempDir(), "r.parquet")
		writeResults(t, path, testRun(), rows)
		_, err := Load(context.Background(), decode.LoadOptions{}, path)
		var fe *decode.FieldError
		if !errors.As(err, &fe) || fe.Field != results.ColFirstAnswerNS || fe.Row != 2 || fe.File != path {
			t.Errorf("first answer %+d ns off its stream: %v; want an error naming %s, row 2, first_answer_ns", off, err, path)
		}
	}
}
