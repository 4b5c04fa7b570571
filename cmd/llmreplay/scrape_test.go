package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
)

// simBehind serves the simulated engine (profile tiny) with its /metrics replaced by
// metrics (nil: none, 404).
func simBehind(t *testing.T, metrics http.HandlerFunc) string {
	t.Helper()
	cfg, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	mux := http.NewServeMux()
	mux.Handle("/", s.Handler())
	if metrics == nil {
		metrics = http.NotFound
	}
	mux.HandleFunc("/metrics", metrics)
	mux.HandleFunc("/metrics-500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) })
	mux.HandleFunc("/metrics-hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	mux.HandleFunc("/metrics-sim", func(w http.ResponseWriter, r *http.Request) {
		r.URL.Path = "/metrics"
		s.Handler().ServeHTTP(w, r)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestReplayScrapesByDefault: with no --scrape, a replay of the in-process engine probes
// its /metrics, says so in one line, and writes OUTPUT.metrics.parquet named by the results'
// metadata; --scrape none writes none; kill -9's journals are recovered together.
func TestReplayScrapesByDefault(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "r.parquet")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"replay", "--limit", "20", "--speedup", "40", "-q", "--keep-journal",
		"--scrape-interval", "100ms", "-o", out, "--force"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr.String())
	}
	if n := strings.Count(stderr.String(), "llmreplay: scraping http://127.0.0.1:"); n != 1 || !strings.Contains(stderr.String(), "/metrics every 100ms (") {
		t.Errorf("stderr does not say once what is scraped:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "metrics: "+results.MetricsPath(out)) {
		t.Errorf("stdout does not name the metrics file:\n%s", stdout.String())
	}
	_, meta, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(meta.Scrape) != 1 || !strings.HasSuffix(meta.Scrape[0], "/metrics") || meta.ScrapeIntervalNS != 100e6 || meta.MetricsFile != "r.metrics.parquet" {
		t.Errorf("metadata scrape %v every %d into %q", meta.Scrape, meta.ScrapeIntervalNS, meta.MetricsFile)
	}
	if meta.Flags["scrape"] != "" || meta.Flags["scrape-interval"] != "100ms" {
		t.Errorf("flags scrape %q, scrape-interval %q", meta.Flags["scrape"], meta.Flags["scrape-interval"])
	}
	st, err := os.Stat(results.MetricsPath(out))
	if err != nil || st.Size() == 0 {
		t.Fatalf("metrics file: %v", err)
	}

	// kill -9 leaves the two journals: recover of the results journal converts both.
	for _, p := range []string{out, results.MetricsPath(out)} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	stdout.Reset()
	out2 := filepath.Join(dir, "again.parquet")
	if err := run(context.Background(), []string{"recover", out + results.JournalSuffix, "-o", out2}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "recovered 20 records") || !strings.Contains(stdout.String(), "metric samples of run "+meta.RunID+" into "+results.MetricsPath(out2)) {
		t.Errorf("recover said:\n%s", stdout.String())
	}
	// A metrics journal given alone.
	stdout.Reset()
	if err := run(context.Background(), []string{"recover", results.MetricsPath(out) + results.JournalSuffix}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(results.MetricsPath(out)); err != nil || !strings.Contains(stdout.String(), "metric samples") {
		t.Errorf("recover of the metrics journal: %v\n%s", err, stdout.String())
	}

	// --scrape none: no probe, no file.
	stderr.Reset()
	out3 := filepath.Join(dir, "none.parquet")
	if err := run(context.Background(), []string{"replay", "--limit", "5", "--speedup", "40", "-q", "--scrape", "none", "-o", out3}, new(bytes.Buffer), &stderr); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr.String(), "scraping") {
		t.Errorf("--scrape none scraped:\n%s", stderr.String())
	}
	if _, err := os.Stat(results.MetricsPath(out3)); !os.IsNotExist(err) {
		t.Errorf("--scrape none wrote a metrics file: %v", err)
	}
}

// TestReplayScrapeFailures: an endpoint without /metrics is said once and not scraped;
// --scrape of one that answers 500 and of one that hangs: every request is ok, and each
// source's failures are one line at the end, with the credentials of its URL nowhere.
func TestReplayScrapeFailures(t *testing.T) {
	base := simBehind(t, nil)
	dir := t.TempDir()
	out := filepath.Join(dir, "r.parquet")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"replay", "--endpoint", base + "/v1", "--limit", "20", "--speedup", "40", "-q",
		"-o", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr.String())
	}
	if want := "llmreplay: not scraping: " + base + "/metrics: HTTP 404"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	if _, err := os.Stat(results.MetricsPath(out)); !os.IsNotExist(err) {
		t.Errorf("a metrics file without a metrics endpoint: %v", err)
	}

	stderr.Reset()
	hostport := strings.TrimPrefix(base, "http://")
	bad500 := "http://u:pw-Secret9@" + hostport + "/metrics-500?token=tk-Secret8"
	err = run(context.Background(), []string{"replay", "--endpoint", base + "/v1", "--limit", "20", "--speedup", "10", "-q",
		"--scrape", bad500, "--scrape", base + "/metrics-hang", "--scrape", base + "/metrics-sim", "--scrape-interval", "100ms", "-o", out, "--force"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr.String())
	}
	res, meta, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != results.StatusOK {
			t.Errorf("request %d: %s %s", r.RequestID, r.Status, r.Error)
		}
	}
	if len(res) != 20 {
		t.Errorf("%d records", len(res))
	}
	// One line per failing source (a loaded machine may add skipped ticks to it: the
	// timing is replay/scrape_test.go's, under synctest).
	text := stderr.String()
	lines := map[string]string{}
	for _, l := range strings.Split(text, "\n") {
		if src, rest, ok := strings.Cut(strings.TrimPrefix(l, "llmreplay: scrape "), ": "); ok && strings.HasPrefix(l, "llmreplay: scrape ") {
			if _, dup := lines[src]; dup {
				t.Errorf("%s reported twice", src)
			}
			lines[src] = rest
		}
	}
	for src, want := range map[string]string{base + "/metrics-500": " scrapes failed: HTTP 500", base + "/metrics-hang": " scrapes failed: timeout after 80ms"} {
		if !strings.Contains(lines[src], want) {
			t.Errorf("%s: %q, want %q\n%s", src, lines[src], want, text)
		}
	}
	if strings.Contains(lines[base+"/metrics-sim"], "failed") {
		t.Errorf("the working source is reported as failing:\n%s", text)
	}
	raw, _ := os.ReadFile(results.MetricsPath(out))
	rawRes, _ := os.ReadFile(out)
	for _, secret := range []string{"pw-Secret9", "tk-Secret8"} {
		if strings.Contains(text+stdout.String()+string(raw)+string(rawRes), secret) {
			t.Errorf("%s leaked", secret)
		}
	}
	if len(meta.Scrape) != 3 || meta.Scrape[0] != base+"/metrics-500" || !strings.Contains(meta.Flags["scrape"], base+"/metrics-500,") {
		t.Errorf("metadata scrape %v, flag %q", meta.Scrape, meta.Flags["scrape"])
	}
}
