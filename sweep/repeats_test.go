package sweep

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/stats"
)

// repRow is a made-up point row: sustained output tok/s, offered tok/s, attainment (%).
func repRow(axis string, load, sustained, offered, attainment float64, file string) Row {
	r := &analysis.Report{Throughput: analysis.Throughput{SustainedOutputTokensPerS: sustained, WindowStartS: 0, WindowEndS: 10},
		Goodput: &analysis.Goodput{Attainment: attainment}, Options: analysis.Options{SLO: analysis.SLO{TTFT: time.Second}}}
	r.TTFT.P99, r.TPOT.P99 = 100+sustained/10, 10
	return Row{Axis: axis, Load: load, File: file, Report: r, Offered: analysis.Offered{WindowOutputTokensPerS: offered, WindowRequestsPerS: 1}}
}

// repeatedRow is the row of a point repeated with these sustained rates and attainments.
func repeatedRow(axis string, load, offered float64, sustained, attainment []float64) Row {
	var rows []Row
	for i := range sustained {
		rows = append(rows, repRow(axis, load, sustained[i], offered, attainment[i], "r"+string(rune('1'+i))))
	}
	return NewRepeatedRow(rows, nil)
}

func TestNewRepeatedSweepRow(t *testing.T) {
	row := repeatedRow("rate", 4, 400, []float64{390, 350, 370}, []float64{99.5, 98, 99})
	if got := row.Point().SustainedTokensPerSecond; got != 370 || row.File != "r3" {
		t.Errorf("row: sustained %v from %s, want the median repeat's 370 from r3", got, row.File)
	}
	sp := row.Spread
	if sp == nil || sp.Repeats != 3 || sp.Sustained != (Span{350, 390}) || sp.Attainment != (Span{0.98, 0.995}) || len(sp.Files) != 3 {
		t.Errorf("spread %+v", sp)
	}
	// An even count takes the lower of the middle two.
	if got := repeatedRow("rate", 4, 400, []float64{4, 1, 3, 2}, []float64{1, 1, 1, 1}).Point().SustainedTokensPerSecond; got != 2 {
		t.Errorf("even count: row's sustained %v, want 2", got)
	}
}

// TestKneeBracketOpenLoop: the saturation and the SLO limit at their pessimistic and
// optimistic ends. Offered 100·load tok/s, tracking needs sustained >= 95 % of it.
func TestKneeBracketOpenLoop(t *testing.T) {
	rows := []Row{
		repeatedRow("rate", 1, 100, []float64{99, 100, 101}, []float64{100, 100, 100}),
		// median 200 tracks (>= 190); the low end 185 does not: the pessimistic knee is 1.
		repeatedRow("rate", 2, 200, []float64{185, 200, 205}, []float64{99.5, 99, 98.5}),
		// median 370 does not track (< 380); the high end 390 does: the optimistic knee is 4.
		repeatedRow("rate", 4, 400, []float64{350, 370, 390}, []float64{99.2, 97, 95}),
		repeatedRow("rate", 8, 800, []float64{400, 410, 420}, []float64{50, 60, 70}),
	}
	s := NewReport("rate", rows, stats.KneeOptions{HasSLO: true}, nil)
	if b := s.Saturation; b.Pass != 2 || b.Fail != 4 {
		t.Errorf("saturation from the median rows: %+v, want pass 2 fail 4", b)
	}
	br := s.SaturationBracket
	if br == nil || br.Low.Pass != 1 || br.Low.Fail != 2 || br.High.Pass != 4 || br.High.Fail != 8 {
		t.Fatalf("saturation bracket %+v, want low [1, 2), high [4, 8)", br)
	}
	// SLO at 99 %: medians 100, 99, 97: limit 2; low ends 100, 98.5: limit 1; high ends
	// 100, 99.5, 99.2, 70: limit 4.
	if b := s.SLOLimit; b.Pass != 2 {
		t.Errorf("SLO limit %+v, want 2", b)
	}
	if sb := s.SLOBracket; sb == nil || sb.Low.Pass != 1 || sb.High.Pass != 4 {
		t.Errorf("SLO bracket %+v, want 1 to 4", sb)
	}
	var txt bytes.Buffer
	if err := s.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"saturation given the repeats' intervals: rate 1 (pessimistic end) to rate 4 (optimistic end)",
		"SLO limit given the repeats' intervals: rate 1 (pessimistic end) to rate 4 (optimistic end)", "350.0 - 390.0"} {
		if !strings.Contains(txt.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, txt.String())
		}
	}
	var js bytes.Buffer
	if err := s.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Bracket struct {
			Low struct {
				PassLoad float64 `json:"pass_load"`
			} `json:"low"`
			High struct {
				PassLoad float64 `json:"pass_load"`
			} `json:"high"`
		} `json:"saturation_bracket"`
		Points []struct {
			Intervals *struct {
				Sustained [2]float64 `json:"sustained_output_tokens_per_s"`
				Repeats   int        `json:"repeats"`
			} `json:"intervals"`
		} `json:"points"`
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Bracket.Low.PassLoad != 1 || got.Bracket.High.PassLoad != 4 || len(got.Points) != 4 || got.Points[2].Intervals == nil ||
		got.Points[2].Intervals.Sustained != [2]float64{350, 390} || got.Points[2].Intervals.Repeats != 3 {
		t.Errorf("JSON: %+v\n%s", got, js.String())
	}
	path := filepath.Join(t.TempDir(), "sweep.parquet")
	if err := s.WriteParquet(path); err != nil {
		t.Fatal(err)
	}
}

// TestKneeBracketClosedLoop: on the concurrency axis the gain between two points is least
// from the first's high end to the second's low end (the earliest plausible saturation)
// and most from low to high.
func TestKneeBracketClosedLoop(t *testing.T) {
	rows := []Row{
		repeatedRow("concurrency", 1, 0, []float64{95, 100, 105}, []float64{100, 100, 100}),
		// 1 → 2: median gain 90 %; at least 190/105−1 = 81 %: not saturated either way.
		repeatedRow("concurrency", 2, 0, []float64{185, 190, 195}, []float64{100, 100, 100}),
		// 2 → 4: median 10.5 % (not saturated at 10 %); least, high to low, 205/195−1 = 5.1 %:
		// saturated (low to low, 205/185−1 = 10.8 %, would not be).
		repeatedRow("concurrency", 4, 0, []float64{205, 210, 220}, []float64{100, 100, 100}),
		// 4 → 8: median 4.8 %; most 240/205−1 = 17 %: not saturated.
		repeatedRow("concurrency", 8, 0, []float64{215, 220, 240}, []float64{100, 100, 100}),
		// 8 → 16: median 0 %; most 245/215−1 = 14 %: not saturated; the optimistic end does not reach it.
		repeatedRow("concurrency", 16, 0, []float64{210, 220, 245}, []float64{100, 100, 100}),
	}
	s := NewReport("concurrency", rows, stats.KneeOptions{}, nil)
	if b := s.Saturation; !b.Found || b.Pass != 4 {
		t.Errorf("saturation from the median rows %+v, want 4", b)
	}
	br := s.SaturationBracket
	if br == nil || !br.Low.Found || br.Low.Pass != 2 || br.High.Found {
		t.Fatalf("bracket %+v, want low 2 and high not reached", br)
	}
	if g := stats.GainPerDoubling(2, 195, 4, 205); math.Abs(g-0.0513) > 1e-3 {
		t.Errorf("fixture gain %v", g)
	}
	var txt bytes.Buffer
	s.WriteText(&txt)
	if !strings.Contains(txt.String(), "saturation given the repeats' intervals: concurrency 2 (pessimistic end) to not reached up to the highest concurrency (optimistic end)") {
		t.Errorf("text:\n%s", txt.String())
	}
}

// TestSweepNotRepeated: a sweep of points run once has no brackets and no interval keys.
func TestSweepNotRepeated(t *testing.T) {
	s := sweepOf(t)
	if s.SaturationBracket != nil || s.SLOBracket != nil {
		t.Errorf("brackets without repeats")
	}
	var js bytes.Buffer
	s.WriteJSON(&js)
	if strings.Contains(js.String(), "_bracket") || strings.Contains(js.String(), "intervals") {
		t.Errorf("JSON of an unrepeated sweep has bracket or interval keys")
	}
}

// TestRepeatedSweepRowBootstrap: with the repeats' data, each interval is the bootstrap
// interval of the pooled repeats widened to their range: three identical repeats have a
// range of one value, and the interval still holds the sampling noise around it.
func TestRepeatedSweepRowBootstrap(t *testing.T) {
	_, path := mixedReport(t)
	opts := analysis.DefaultOptions()
	opts.SLO = analysis.SLO{TTFT: 200 * time.Millisecond, TPOT: 25 * time.Millisecond}
	var rows []Row
	var data []*decode.Data
	for range 3 {
		d, err := analysis.Load(context.Background(), decode.LoadOptions{}, path)
		if err != nil {
			t.Fatal(err)
		}
		row, err := NewRow("rate", 2, path, d, opts)
		if err != nil {
			t.Fatal(err)
		}
		rows, data = append(rows, row), append(data, d)
	}
	row := NewRepeatedRow(rows, data)
	sp, rep := row.Spread, rows[0].Report
	if sp.Method != SpreadMethod {
		t.Errorf("method %q", sp.Method)
	}
	for _, c := range []struct {
		name string
		s    Span
		v    float64
	}{{"sustained", sp.Sustained, rep.Throughput.SustainedOutputTokensPerS}, {"attainment", sp.Attainment, rep.Goodput.Attainment / 100},
		{"ttft p99", sp.TTFTP99, rep.TTFT.P99}, {"tpot p99", sp.TPOTP99, rep.TPOT.P99}} {
		if !(c.s.Lo <= c.v && c.v <= c.s.Hi && c.s.Lo < c.s.Hi) {
			t.Errorf("%s: interval [%v, %v] around %v: want a proper interval holding it", c.name, c.s.Lo, c.s.Hi, c.v)
		}
	}
	// The attainment's interval is the bootstrap of the pooled proportion.
	good, den := 3*rep.Goodput.Good, 3*(rep.Requests.Total-rep.Requests.Canceled)
	want := SpreadBootstrap.Proportion(good, den, "sweep 2 attainment").CI(stats.DefaultConfidence)
	if sp.Attainment.Lo != want.Lo || sp.Attainment.Hi != want.Hi {
		t.Errorf("attainment interval %+v, want the pooled proportion's %+v", sp.Attainment, want)
	}
	// Without data: the range alone, one value wide.
	if r := NewRepeatedRow(rows, nil); r.Spread.Method != RangeMethod || r.Spread.TTFTP99.Lo != r.Spread.TTFTP99.Hi {
		t.Errorf("without data: %+v", r.Spread)
	}
}
