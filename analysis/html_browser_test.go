package analysis

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis/decode"
	"github.com/llmreplay/llmreplay/replay/results"
)

// chromium finds a headless-capable Chromium: $LLMREPLAY_CHROMIUM, else chromium,
// chromium-browser or google-chrome on PATH. Missing: skip locally, fail under CI
// (scripts/test installs Debian's chromium there).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LLMREPLAY_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("the HTML report test needs chromium (scripts/test installs it under CI)")
	}
	t.Skip("chromium not found: skipping the browser test")
	return ""
}

func headless(t *testing.T, bin string, extra ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--no-first-run", "--disable-component-update", "--disable-sync", "--user-data-dir=" + t.TempDir(),
		"--enable-logging=stderr", "--v=0"}, extra...)
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\n%s", bin, args, err, errb.String())
	}
	return out.String(), errb.String()
}

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
}

func renderCheck(t *testing.T, bin string, r *Report) {
	page := filepath.Join(t.TempDir(), "report.html")
	if err := r.WriteHTMLFile(page); err != nil {
		t.Fatal(err)
	}
	dom, stderr := headless(t, bin, "--dump-dom", "file://"+page)
	m := regexp.MustCompile(`id="render-check" data-rendered="(\d+)" data-plots="(\d+)">([^<]*)`).FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("render marker not set: the page's script did not run\n%s", stderr)
	}
	want := "8"
	if r.Server != nil {
		want = "10" // the two server panels
	}
	if m[1] != m[2] || m[2] != want {
		t.Errorf("render check: %s (want all %s plots)", m[3], want)
	}
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, ":CONSOLE") {
			t.Errorf("console message: %s", line)
		}
	}
	if shot := os.Getenv("LLMREPLAY_SCREENSHOT"); shot != "" {
		abs, _ := filepath.Abs(shot)
		headless(t, bin, "--window-size=1400,2400", "--screenshot="+abs, "file://"+page)
	}
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
