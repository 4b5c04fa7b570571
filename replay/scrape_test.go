package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/llmreplay/llmreplay/internal/prom"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// metricRow is one row of a metrics file, as a test reads it.
type metricRow struct {
	TNS    int64
	Source string
	Metric string
	Type   string
	Labels map[string]string
	Value  float64
}

// readMetricsFile reads a metrics/v1 Parquet file whole (tests only: analysis owns the
// real reader) and checks its schema.
func readMetricsFile(t testing.TB, path string) ([]metricRow, *results.RunMeta) {
	t.Helper()
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatalf("metrics file: %v", err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 8192}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := fr.Schema()
	if err != nil {
		t.Fatal(err)
	}
	run, err := results.CheckMetrics(schema)
	if err != nil {
		t.Fatalf("metrics file %s: %v", path, err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rr.Release()
	var rows []metricRow
	for rr.Next() {
		rec := rr.Record()
		col := func(name string) int { return schema.FieldIndices(name)[0] }
		tns := rec.Column(col(results.ColMetricTNS)).(*array.Int64)
		src := rec.Column(col(results.ColMetricSource)).(*array.String)
		name := rec.Column(col(results.ColMetricName)).(*array.String)
		typ := rec.Column(col(results.ColMetricType)).(*array.String)
		lab := rec.Column(col(results.ColMetricLabels)).(*array.Map)
		val := rec.Column(col(results.ColMetricValue)).(*array.Float64)
		keys, items := lab.Keys().(*array.String), lab.Items().(*array.String)
		for i := 0; i < int(rec.NumRows()); i++ {
			r := metricRow{TNS: tns.Value(i), Source: src.Value(i), Metric: name.Value(i), Type: typ.Value(i), Value: val.Value(i), Labels: map[string]string{}}
			lo, hi := lab.ValueOffsets(i)
			for j := lo; j < hi; j++ {
				r.Labels[keys.Value(int(j))] = items.Value(int(j))
			}
			rows = append(rows, r)
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return rows, run
}

// rtFunc adapts a function to http.RoundTripper.
type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func exposition(body string) *http.Response {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/plain; version=0.0.4"}},
		Body: io.NopCloser(strings.NewReader(body))}
}

// Metrics endpoints that never answer well: they must not move a single request, and each
// fails every scrape, counted once per source.
var (
	hangingMetrics = rtFunc(func(r *http.Request) (*http.Response, error) {
		<-r.Context().Done()
		return nil, r.Context().Err()
	})
	failingMetrics = rtFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 500, Body: io.NopCloser(strings.NewReader("boom"))}, nil
	})
	absentMetrics = rtFunc(func(r *http.Request) (*http.Response, error) {
		// What a dial to a closed port returns.
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	})
)

// every returns requests due every step from first, n of them.
func every(first, step time.Duration, n int) []trace.Request {
	at := make([]time.Duration, n)
	for i := range at {
		at[i] = first + time.Duration(i)*step
	}
	return dueAt(at...)
}

// TestSynctestScrapeNeverDelaysRequests: against metrics endpoints that hang, answer 500
// or refuse connections, every request is sent exactly when a run without scraping sends
// it (the virtual clock makes that exact), the scrapes go out at exactly 0, 1 s, 2 s ... on
// the run clock, each attempt is in the metrics file with llmreplay_scrape_up 0 and its
// error, and the failures come back as one line per source.
func TestSynctestScrapeNeverDelaysRequests(t *testing.T) {
	// Requests every 70 ms from 13 ms, each served in 250 ms: the last (id 50) is due at
	// 3.443 s and ends at 3.693 s, when the run ends.
	reqs := every(13*time.Millisecond, 70*time.Millisecond, 50)
	base := func() syncRun {
		var sr syncRun
		synctest.Test(t, func(t *testing.T) {
			sr = runSynctest(t, context.Background(), trace.NewSliceSource(reqs), &fakeEndpoint{d: 250 * time.Millisecond}, nil)
		})
		return sr
	}()
	for _, tc := range []struct {
		name     string
		rt       http.RoundTripper
		attempts int64 // scrapes over by the run's end (3.693 s)
		err      string
	}{
		// Sent at 0, 1, 2 and 3 s; the hanging ones time out 800 ms later, so the one sent
		// at 3 s is still going at the end (not an attempt: neither data nor a failure).
		{"hanging", hangingMetrics, 3, "timeout after 800ms"},
		{"500", failingMetrics, 4, "HTTP 500"},
		{"absent", absentMetrics, 4, "dial: connect: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var out string
				sr := runSynctest(t, context.Background(), trace.NewSliceSource(reqs), &fakeEndpoint{d: 250 * time.Millisecond}, func(o *Options) {
					o.Scrape = []string{"http://user:pw-secret@127.0.0.1:9/metrics?token=tk-secret"}
					o.ScrapeInterval = time.Second
					o.seams.scrapeRT = tc.rt
					out = o.Output
				})
				if sr.err != nil {
					t.Fatal(sr.err)
				}
				if sr.took != base.took || !maps.Equal(sr.sentNS, base.sentNS) {
					t.Errorf("with a %s metrics endpoint the run took %v and sent %v; without scraping %v and %v", tc.name, sr.took, sr.sentNS, base.took, base.sentNS)
				}
				for _, r := range sr.res {
					if r.SentNS != r.ScheduledNS {
						t.Errorf("request %d sent at %d, due at %d", r.RequestID, r.SentNS, r.ScheduledNS)
					}
				}
				rows, run := readMetricsFile(t, results.MetricsPath(out))
				wantSrc := "http://127.0.0.1:9/metrics"
				if !slices.Equal(run.Scrape, []string{wantSrc}) || run.ScrapeIntervalNS != int64(time.Second) || run.MetricsFile != "r.metrics.parquet" {
					t.Errorf("run metadata scrape %v every %d into %q", run.Scrape, run.ScrapeIntervalNS, run.MetricsFile)
				}
				var ups []int64
				for _, r := range rows {
					if r.Source != wantSrc {
						t.Errorf("source %q, want %q (no credentials, no query)", r.Source, wantSrc)
					}
					if r.Type != results.MetricTypeScrape {
						t.Errorf("row %+v from a failing endpoint", r)
					}
					if r.Metric == results.MetricScrapeUp {
						ups = append(ups, r.TNS)
						if r.Value != 0 || r.Labels["error"] != tc.err {
							t.Errorf("up row %+v, want 0 with error %q", r, tc.err)
						}
					}
				}
				var want []int64
				for k := range tc.attempts {
					want = append(want, k*int64(time.Second))
				}
				if !slices.Equal(ups, want) || len(rows) != 3*len(want) {
					t.Errorf("scrapes sent at %v (%d rows), want at %v, 3 rows each", ups, len(rows), want)
				}
				notes := sr.sum.ScrapeNotes()
				wantNote := fmt.Sprintf("scrape %s: %d of %d scrapes failed: %s", wantSrc, tc.attempts, tc.attempts, tc.err)
				if len(notes) != 1 || notes[0] != wantNote {
					t.Errorf("notes %q, want one: %q", notes, wantNote)
				}
				if _, err := os.Stat(results.MetricsPath(out) + results.JournalSuffix); !os.IsNotExist(err) {
					t.Errorf("metrics journal left behind: %v", err)
				}
			})
		})
	}
}

// TestSynctestScrapeSeesInFlight: a metrics endpoint that answers, 40 ms after it is asked,
// with the number of requests in flight when it was asked: each sample equals the in-flight
// count computed from the results file (sent_ns <= t < end_ns) at the sample's t_ns. So
// t_ns is the instant the scrape was sent, on the clock and origin of sent_ns.
func TestSynctestScrapeSeesInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Bursts: 20 requests 10 ms apart from 0.105 s, 5 from 2.305 s; each served 900 ms.
		at := []time.Duration{}
		for i := range 20 {
			at = append(at, 105*time.Millisecond+time.Duration(i)*10*time.Millisecond)
		}
		for i := range 5 {
			at = append(at, 2305*time.Millisecond+time.Duration(i)*10*time.Millisecond)
		}
		f := &countingEndpoint{fakeEndpoint: fakeEndpoint{d: 900 * time.Millisecond}}
		rt := rtFunc(func(r *http.Request) (*http.Response, error) {
			n := f.inflight.Load()
			time.Sleep(40 * time.Millisecond)
			return exposition(fmt.Sprintf("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} %d\n", n)), nil
		})
		var out string
		sr := runSynctest(t, context.Background(), trace.NewSliceSource(dueAt(at...)), &f.fakeEndpoint, func(o *Options) {
			o.seams.do = f.do
			o.Scrape, o.ScrapeInterval, o.seams.scrapeRT = []string{"http://127.0.0.1:9/metrics"}, 250*time.Millisecond, rt
			out = o.Output
		})
		if sr.err != nil {
			t.Fatal(sr.err)
		}
		rows, _ := readMetricsFile(t, results.MetricsPath(out))
		n, busy := 0, 0
		for _, r := range rows {
			if r.Metric != "vllm:num_requests_running" {
				continue
			}
			want := 0
			for _, q := range sr.res {
				if q.SentNS <= r.TNS && r.TNS < q.EndNS {
					want++
				}
			}
			if r.Value != float64(want) {
				t.Errorf("t=%v: sampled %v running, the results say %d", time.Duration(r.TNS), r.Value, want)
			}
			if r.TNS%int64(250*time.Millisecond) != 0 {
				t.Errorf("sample at %v: not on a 250 ms tick", time.Duration(r.TNS))
			}
			n++
			if want > 0 {
				busy++
			}
		}
		// The run ends at 3.245 s: ticks 0 .. 3.0 s, 13 samples; busy at 0.25 .. 1.0 s (the
		// first burst ends from 1.005 s) and at 2.5 .. 3.0 s.
		if n != 13 || busy != 7 {
			t.Errorf("%d samples, %d with requests in flight; want 13 and 7", n, busy)
		}
	})
}

// countingEndpoint is a fakeEndpoint that counts its requests in flight.
type countingEndpoint struct {
	fakeEndpoint
	inflight atomic.Int64
}

func (c *countingEndpoint) do(ctx context.Context, clk transport.Clock, req *transport.Request, res *results.Result) {
	c.inflight.Add(1)
	defer c.inflight.Add(-1)
	c.fakeEndpoint.do(ctx, clk, req, res)
}

// TestScrapeConfig: --scrape and --scrape-interval are checked before anything starts; a
// URL's credentials never appear in the error.
func TestScrapeConfig(t *testing.T) {
	for _, tc := range []struct {
		scrape []string
		iv     time.Duration
		want   string
	}{
		{[]string{"none"}, time.Second, ""},
		{[]string{"http://10.0.0.5:9400/metrics", "https://gpu.example.com/metrics"}, time.Second, ""},
		{[]string{"none", "http://a/metrics"}, time.Second, "--scrape none: turns scraping off"},
		{[]string{"ftp://u:pw-secret@a/metrics"}, time.Second, `--scrape "ftp://a/metrics": scheme must be http or https`},
		{[]string{"http:///metrics"}, time.Second, "no host"},
		{[]string{"http://a/metrics"}, 50 * time.Millisecond, "--scrape-interval 50ms: must be at least 100ms"},
	} {
		c := DefaultConfig()
		c.Scrape, c.ScrapeInterval = tc.scrape, tc.iv
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v %v: %v", tc.scrape, tc.iv, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !IsConfigError(err)):
			t.Errorf("%v %v: %v, want a config error with %q", tc.scrape, tc.iv, err, tc.want)
		case err != nil && strings.Contains(err.Error(), "pw-secret"):
			t.Errorf("error quotes a password: %v", err)
		}
	}
	if got := wire.MetricsURL(mustURL(t, "http://u:p@h:8000/v1?x=1")).String(); got != "http://u:p@h:8000/metrics" {
		t.Errorf("MetricsURL = %s", got)
	}
	if got := wire.MetricsURL(mustURL(t, "http://h/gw/v1/")).String(); got != "http://h/gw/metrics" {
		t.Errorf("MetricsURL = %s", got)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := wire.BaseURL(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestMetricsJournalRecovered: a metrics journal cut mid-batch (a killed run) converts to
// the samples of its whole batches, with its run metadata.
func TestMetricsJournalRecovered(t *testing.T) {
	dir := t.TempDir()
	jp := filepath.Join(dir, "r.metrics.parquet.journal")
	j, err := results.CreateMetricsJournal(jp, &results.RunMeta{RunID: "feed", Flags: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	samples, err := prom.Parse(strings.NewReader("# TYPE g gauge\ng{a=\"1\"} 2\ng{a=\"2\"} 3\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	// One scrape as the scraper journals it: its samples, then its own rows.
	own := results.ScrapeRows("", 3*time.Millisecond, len(samples))
	if err := j.AddSamples(5, "http://h/metrics", samples, own[:]); err != nil {
		t.Fatal(err)
	}
	j.Flush()
	j.AddSamples(6, "http://h/metrics", samples, own[:])
	j.Flush()
	size, _ := os.Stat(jp)
	j.Close()
	// Cut the second batch in half, as a kill -9 during its write would.
	if err := os.Truncate(jp, size.Size()-40); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "r.metrics.parquet")
	info, err := results.ConvertMetricsJournal(jp, out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Rows != 5 || info.Tail == nil || info.Run.RunID != "feed" {
		t.Errorf("converted %d rows (tail %v) of run %q; want 5 with a cut tail, run feed", info.Rows, info.Tail, info.Run.RunID)
	}
	rows, _ := readMetricsFile(t, out)
	if len(rows) != 5 || rows[0].Metric != "g" || rows[0].Labels["a"] != "1" || rows[1].Value != 3 || rows[2].Metric != results.MetricScrapeUp ||
		rows[3].Metric != results.MetricScrapeDuration || rows[3].Value != 0.003 || rows[4].Value != 2 {
		t.Errorf("rows %+v", rows)
	}
	if f, err := results.JournalFormat(jp); err != nil || f != results.MetricsFormat {
		t.Errorf("results.JournalFormat = %q, %v", f, err)
	}
	if _, err := results.ConvertJournal(jp, filepath.Join(dir, "x.parquet")); err == nil {
		t.Error("a metrics journal converted as a results file")
	}
}
