package analysis

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/internal/browsertest"
	"github.com/llmreplay/llmreplay/replay/results"
)

// chromium and headless: the shared browser helpers (internal/browsertest).
var (
	chromium = browsertest.Chromium
	headless = browsertest.Headless
)

// TestHTMLRendersInChromium opens the report in headless Chromium: the page's own check
// (every plot laid out with marks drawn) must pass and the console must stay silent.
// Set LLMREPLAY_SCREENSHOT=path.png to keep a screenshot to look at.
func TestHTMLRendersInChromium(t *testing.T) {
	bin := chromium(t)
	mixed, _ := mixedReport(t)
	t.Run("open loop", func(t *testing.T) { renderCheck(t, bin, mixed) })
	t.Run("closed loop", func(t *testing.T) { renderCheck(t, bin, closedReport(t)) })
	t.Run("conversations", func(t *testing.T) {
		meta := testRun()
		best := 0.78
		meta.PrefixReusableShare = &best
		d, err := Load(context.Background(), decode.LoadOptions{}, tempResults(t, meta, conversationRows()))
		if err != nil {
			t.Fatal(err)
		}
		opts := DefaultOptions()
		opts.SLO = SLO{TTFT: 200 * time.Millisecond} // every plot, the attainment ones too
		r, err := Analyze(d, opts)
		if err != nil {
			t.Fatal(err)
		}
		var page strings.Builder
		r.WriteHTML(&page)
		for _, want := range []string{"<h2>Conversations</h2>", "<tr><th>reshaped by the server</th><td class=\"flag\">YES</td></tr>", "48.2% of 1050 prompt tokens"} {
			if !strings.Contains(page.String(), want) {
				t.Errorf("HTML lacks %q", want)
			}
		}
		renderCheck(t, bin, r)
	})
	t.Run("server metrics", func(t *testing.T) {
		sc := vllmScrapes("http://127.0.0.1:8000/metrics")
		for k := range sc {
			sc[k].samples = append(sc[k].samples, gauge("DCGM_FI_DEV_GPU_UTIL", float64(50+k), "gpu", "0"))
		}
		d, err := Load(context.Background(), decode.LoadOptions{}, scrapedRun(t, []results.RunMeta{testRun()}, [][]scrape{sc})...)
		if err != nil {
			t.Fatal(err)
		}
		opts := DefaultOptions()
		opts.Warmup, opts.SLO = 2*time.Second, SLO{TTFT: 40 * time.Millisecond}
		r, err := Analyze(d, opts)
		if err != nil {
			t.Fatal(err)
		}
		var page strings.Builder
		r.WriteHTML(&page)
		for _, want := range []string{`id="plot-server-queue"`, `id="plot-server-kv"`} {
			if !strings.Contains(page.String(), want) {
				t.Errorf("HTML lacks %q", want)
			}
		}
		renderCheck(t, bin, r)
	})
	t.Run("images", func(t *testing.T) {
		_, path := imagesReport(t)
		d, err := Load(context.Background(), decode.LoadOptions{}, path)
		if err != nil {
			t.Fatal(err)
		}
		opts := DefaultOptions()
		opts.SLO = SLO{TTFT: 200 * time.Millisecond} // every plot, the attainment ones too
		r, err := Analyze(d, opts)
		if err != nil {
			t.Fatal(err)
		}
		var page strings.Builder
		r.WriteHTML(&page)
		for _, want := range []string{"requests with images", "share of prompt tokens", "TTFT, with images"} {
			if !strings.Contains(page.String(), want) {
				t.Errorf("HTML lacks %q", want)
			}
		}
		renderCheck(t, bin, r)
	})
	t.Run("agents", func(t *testing.T) {
		opts := DefaultOptions()
		opts.SLO = SLO{TTFT: 200 * time.Millisecond} // every plot, the attainment ones too
		r, _ := agentReportWith(t, agentRows(), opts)
		var page strings.Builder
		r.WriteHTML(&page)
		for _, want := range []string{"<h2>Agents</h2>", `id="plot-agents"`, "<tr><th>peak calls in flight</th><td>3 (at 2.000 s)</td></tr>"} {
			if !strings.Contains(page.String(), want) {
				t.Errorf("HTML lacks %q", want)
			}
		}
		renderCheck(t, bin, r)
	})
}

func renderCheck(t *testing.T, bin string, r *Report) {
	page := filepath.Join(t.TempDir(), "report.html")
	if err := r.WriteHTMLFile(page); err != nil {
		t.Fatal(err)
	}
	want := 8
	if r.Unary != nil {
		want = 5 // three over time, the latency CDF, attainment by prompt length
	}
	if r.Server != nil {
		want = 10 // the two server panels
	}
	if r.Agents != nil {
		want++ // live sessions and calls in flight
	}
	browsertest.RenderCheck(t, bin, page, want)
	browsertest.Screenshot(t, bin, page, 1400, 2400)
}

// The page's check must notice a plot with nothing drawn (so the test above can fail).
func TestHTMLRenderCheckCatchesEmptyPlot(t *testing.T) {
	bin := chromium(t)
	r, _ := mixedReport(t)
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(b.String(), `<p id="render-check"`, `<svg class="plot" id="plot-empty" width="10" height="10"></svg><p id="render-check"`, 1)
	page := filepath.Join(t.TempDir(), "broken.html")
	if err := os.WriteFile(page, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	dom, _ := headless(t, bin, "--dump-dom", "file://"+page)
	if !strings.Contains(dom, "empty: plot-empty") {
		t.Errorf("render check missed an empty plot:\n%s", regexp.MustCompile(`<p id="render-check"[^<]*`).FindString(dom))
	}
}
