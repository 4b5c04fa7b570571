package sweep

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/internal/browsertest"
	"github.com/llmreplay/llmreplay/stats"
)

// sweepOf builds a sweep report from the same analysed run at several loads, with made-up
// offered rates around it so that one point saturates.
func sweepOf(t *testing.T) *Report {
	t.Helper()
	r, _ := mixedReport(t)
	sus := r.Throughput.SustainedOutputTokensPerS
	var rows []Row
	for i, ratio := range []float64{2, 1, 0.6} { // sustained / offered
		rows = append(rows, Row{Axis: "speedup", Load: float64(i + 1), File: "p.parquet", Report: r,
			Offered: analysis.Offered{WindowOutputTokensPerS: sus / ratio, WindowRequestsPerS: 1}})
	}
	// Loads 1 and 2 track (ratio >= 0.95); load 3 delivers 60% of what it is offered.
	return NewReport("speedup", rows, stats.KneeOptions{}, nil)
}

func TestSweepReportOutputs(t *testing.T) {
	s := sweepOf(t)
	if f := s.Rows[0].Report.Flags; f.Overloaded || f.ClientLimited {
		t.Fatalf("fixture run is flagged %+v; the bounds below assume a clean run", f)
	}
	if b := s.Saturation; !b.Found || b.Pass != 2 || b.Fail != 3 || b.LimitedBy != "endpoint" {
		t.Errorf("saturation %+v, want [2, 3) by the endpoint", b)
	}
	var txt bytes.Buffer
	if err := s.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), "saturation (sustained >= 95% of offered, not overloaded): speedup 2 (fails at 3)") {
		t.Errorf("text report lacks the knee:\n%s", txt.String())
	}
	var js bytes.Buffer
	if err := s.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Axis       string
		Saturation struct {
			PassLoad float64 `json:"pass_load"`
			FailLoad float64 `json:"fail_load"`
		}
		Points []map[string]any
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil || got.Axis != "speedup" || got.Saturation.PassLoad != 2 || got.Saturation.FailLoad != 3 || len(got.Points) != 3 {
		t.Errorf("JSON %v: %+v\n%s", err, got, js.String())
	}
	path := filepath.Join(t.TempDir(), "sweep.parquet")
	if err := s.WriteParquet(path); err != nil {
		t.Fatal(err)
	}
	if p := s.Rows[2].Point(); math.Abs(p.SustainedTokensPerSecond/p.OfferedTokensPerSecond-0.6) > 1e-9 {
		t.Errorf("point ratio %v, want 0.6", p.SustainedTokensPerSecond/p.OfferedTokensPerSecond)
	}
}

// TestSweepHTMLRendersInChromium: the sweep page's two plots render, with a silent console.
func TestSweepHTMLRendersInChromium(t *testing.T) {
	bin := chromium(t)
	page := filepath.Join(t.TempDir(), "sweep.html")
	if err := sweepOf(t).WriteHTMLFile(page); err != nil {
		t.Fatal(err)
	}
	browsertest.RenderCheck(t, bin, page, 2)
}

// TestSweepServerHTMLRendersInChromium: with a scraped point the page adds its two server
// panels (KV-cache usage, waiting requests against load), drawn, the console silent.
func TestSweepServerHTMLRendersInChromium(t *testing.T) {
	bin := chromium(t)
	page := filepath.Join(t.TempDir(), "sweep.html")
	if err := serverSweep(t).WriteHTMLFile(page); err != nil {
		t.Fatal(err)
	}
	browsertest.RenderCheck(t, bin, page, 4)
}

// TestClosedSweepHTMLRendersInChromium: a closed-loop sweep's page draws its three plots
// (throughput and per-user speed against concurrency on a log axis, the knee marked;
// latency), with a silent console. LLMREPLAY_SCREENSHOT=path.png keeps a screenshot.
func TestClosedSweepHTMLRendersInChromium(t *testing.T) {
	bin := chromium(t)
	s := closedSweep(t, analysis.SLO{TTFT: 500 * time.Millisecond})
	page := filepath.Join(t.TempDir(), "sweep.html")
	if err := s.WriteHTMLFile(page); err != nil {
		t.Fatal(err)
	}
	dom := browsertest.RenderCheck(t, bin, page, 3)
	for _, want := range []string{`id="plot-sweep-per-user"`, "knee: concurrency 8", "concurrency (log scale)", "1/TPOT p50"} {
		if !strings.Contains(dom, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	browsertest.Screenshot(t, bin, page, 1400, 1400)
}

// TestFlagNames: a point's flags, in the table (buffered included) and in its progress
// note, name every verdict of its report that is set, prompt-off among them.
func TestFlagNames(t *testing.T) {
	rep := &analysis.Report{Flags: analysis.Flags{Overloaded: true, Buffered: true, PromptOffTarget: true}}
	if got := pointFlags(rep); got != "overloaded,buffered,prompt-off" {
		t.Errorf("pointFlags = %q", got)
	}
	if got := flagsNote(rep); got != " [overloaded, prompt-off]" {
		t.Errorf("flagsNote = %q", got)
	}
	if got := pointFlags(&analysis.Report{}); got != "" {
		t.Errorf("no flags: pointFlags = %q", got)
	}
}
