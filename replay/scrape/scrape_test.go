package scrape

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/llmreplay/llmreplay/internal/prom"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
)

// rtFunc adapts a function to http.RoundTripper.
type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func exposition(body string) *http.Response {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/plain; version=0.0.4"}},
		Body: io.NopCloser(strings.NewReader(body))}
}

func TestTimeout(t *testing.T) {
	if got := Timeout(time.Second); got != 800*time.Millisecond {
		t.Errorf("Timeout(1s) = %v", got)
	}
	if got := Timeout(time.Minute); got != 10*time.Second {
		t.Errorf("Timeout(1m) = %v", got)
	}
}

// TestSynctestScraperSkipsAndDrops: a scrape that outlasts its ticks (a transport that
// ignores its deadline) makes the source skip them, never queue them; a writer that does
// not read makes the scraper drop and count, never block.
func TestSynctestScraperSkipsAndDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var sentAt []time.Duration
		start := time.Now()
		slow := rtFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			sentAt = append(sentAt, time.Since(start))
			mu.Unlock()
			time.Sleep(2500 * time.Millisecond) // deaf to its context
			return exposition("up 1\n"), nil
		})
		fast := rtFunc(func(r *http.Request) (*http.Response, error) { return exposition("up 1\n"), nil })
		s := newScraper(transport.Clock{Start: start}, []string{"http://a/metrics", "http://b/metrics"}, time.Second, false, nil)
		s.client = &http.Client{Transport: rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Host == "a" {
				return slow(r)
			}
			return fast(r)
		})}
		ctx, cancel := context.WithCancel(context.Background())
		s.start(ctx)
		time.Sleep(20*time.Second + time.Millisecond) // nobody reads s.out
		cancel()
		s.wait()
		// a: sent at 0 (over at 2.5 s: ticks 1 and 2 skipped), 3 (over at 5.5), 6 ... 18 s;
		// the one sent at 18 s is still going at 20 s.
		wantSent := []time.Duration{0, 3 * time.Second, 6 * time.Second, 9 * time.Second, 12 * time.Second, 15 * time.Second, 18 * time.Second}
		if !slices.Equal(sentAt, wantSent) {
			t.Errorf("slow source sent at %v, want %v", sentAt, wantSent)
		}
		a, b := s.stats[0], s.stats[1]
		if a.Attempts != 6 || a.Skipped != 12 || a.Failed != 0 {
			t.Errorf("slow source: %+v; want 6 attempts, 12 ticks skipped", a)
		}
		// b: ticks 0 .. 20 s, 21 attempts. The channel holds 2·8 scrapes: of the 27, 11
		// are dropped by whichever source finds it full.
		if b.Attempts != 21 || b.Skipped != 0 || a.Overflow+b.Overflow != 27-16 {
			t.Errorf("fast source: %+v, slow %+v; want 21 attempts and 11 dropped in all", b, a)
		}
		if got := len(s.out); got != 16 {
			t.Errorf("%d scrapes queued, want the bound 16", got)
		}
	})
}

// BenchmarkMetricsJournalAdd: the metrics writer's cost per scrape of a vLLM-sized
// exposition (400 samples: gauges, counters and 3 histograms of 40 buckets per model),
// journaled and flushed every 10 scrapes; the scraper's own parse is prom.Parse's.
func BenchmarkMetricsJournalAdd(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("# TYPE vllm:num_requests_running gauge\n")
	for m := range 2 {
		fmt.Fprintf(&sb, "vllm:num_requests_running{model_name=\"m%d\"} 3\n", m)
	}
	for h := range 3 {
		fmt.Fprintf(&sb, "# TYPE vllm:h%d_seconds histogram\n", h)
		for m := range 2 {
			for i := range 40 {
				fmt.Fprintf(&sb, "vllm:h%d_seconds_bucket{model_name=\"m%d\",le=\"%d\"} %d\n", h, m, i, i*10)
			}
			fmt.Fprintf(&sb, "vllm:h%d_seconds_bucket{model_name=\"m%d\",le=\"+Inf\"} 400\nvllm:h%d_seconds_sum{model_name=\"m%d\"} 12.5\nvllm:h%d_seconds_count{model_name=\"m%d\"} 400\n", h, m, h, m, h, m)
		}
	}
	for c := range 70 {
		fmt.Fprintf(&sb, "# TYPE vllm:c%d_total counter\n", c)
		for m := range 2 {
			fmt.Fprintf(&sb, "vllm:c%d_total{model_name=\"m%d\"} %d\n", c, m, c)
		}
	}
	samples, err := prom.Parse(strings.NewReader(sb.String()), nil)
	if err != nil {
		b.Fatal(err)
	}
	j, err := results.CreateMetricsJournal(filepath.Join(b.TempDir(), "m.journal"), &results.RunMeta{Flags: map[string]string{}})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	sc := &result{source: "http://h:8000/metrics", samples: samples}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sc.tNS = int64(i)
		if err := journalScrape(j, sc); err != nil {
			b.Fatal(err)
		}
		if i%10 == 9 {
			if err := j.Flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(len(samples)), "samples/scrape")
}
