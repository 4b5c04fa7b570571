// Package scrape samples Prometheus endpoints during a run into its metrics journal
// (docs/replay.md, "Server metrics"). Package replay starts one Run per run; nothing of it
// is on the dispatcher's path.
package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/llmreplay/llmreplay/internal/prom"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/wire"
)

// Each
// source has its own goroutine, which scrapes at k·interval on the run clock (the clock of
// scheduled_ns and sent_ns) with its own http.Client and a timeout shorter than the
// interval, and hands each scrape to the metrics writer through a bounded channel without
// ever waiting: a full channel drops the scrape and counts it. Nothing of it is on the
// dispatcher's path, so a slow, hanging, failing or absent metrics endpoint cannot delay a
// request; a scrape still going at the next tick makes the source skip that tick.

// Defaults of scraping.
const (
	DefaultInterval = time.Second
	// None is the --scrape value that turns scraping off.
	None = "none"
	// MaxExposition bounds the bytes of one scrape's response.
	MaxExposition = 16 << 20
	// ProbeTimeout bounds the probe of the endpoint's /metrics before a run.
	ProbeTimeout = 2 * time.Second
	// maxScrapeTimeout bounds a scrape's timeout however long the interval.
	maxScrapeTimeout = 10 * time.Second
	// scrapeQueue is how many scrapes per source may wait for the metrics writer.
	scrapeQueue = 8
)

// Timeout is the timeout of one scrape at interval: 80 % of it, at most 10 s, so a
// scrape is over before the next is due.
func Timeout(interval time.Duration) time.Duration {
	return min(interval-interval/5, maxScrapeTimeout)
}

// ParseURL checks a --scrape value: an http or https URL with a host. Its errors
// quote the URL only in its safe form (wire.SafeURL).
func ParseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%q: %w", wire.SafeURL(s), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: scheme must be http or https", wire.SafeEndpoint(u))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q: no host", wire.SafeEndpoint(u))
	}
	return u, nil
}

// result is one scrape attempt of one source.
type result struct {
	tNS     int64  // when it was sent, on the run clock
	source  string // wire.SafeURL of the source
	samples []prom.Sample
	dur     time.Duration
	err     string // "" when it returned a parsed exposition
}

// ownRows returns the scraper's own rows of the attempt (results.MetricScrape*).
func (s *result) ownRows() [3]prom.Sample {
	return results.ScrapeRows(s.err, s.dur, len(s.samples))
}

// Stat is what the scraping of one source came to, for the end of the run.
type Stat struct {
	Source     string // wire.SafeURL
	Attempts   int64  // scrapes sent (one per tick, less the skipped ones)
	Failed     int64  // of them, without a parsed exposition
	FirstError string // the first failure's reason
	Skipped    int64  // ticks passed before the scrape due earlier was over (a slow scrape, a late goroutine)
	Overflow   int64  // scrapes not written: the metrics writer was behind (never blocks)
}

// Note returns the one line the end of a run prints for s, or "" when every scrape worked
// and was written.
func (s *Stat) Note() string {
	var parts []string
	if s.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d scrapes failed: %s", s.Failed, s.Attempts, s.FirstError))
	}
	if s.Skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d ticks skipped (the scrape before or the machine was late)", s.Skipped))
	}
	if s.Overflow > 0 {
		parts = append(parts, fmt.Sprintf("%d scrapes not written (the metrics writer was behind)", s.Overflow))
	}
	if len(parts) == 0 {
		return ""
	}
	return "scrape " + s.Source + ": " + strings.Join(parts, "; ")
}

// scraper samples its sources on the run clock until its context ends.
type scraper struct {
	clk      transport.Clock
	interval time.Duration
	timeout  time.Duration
	client   *http.Client
	urls     []string // as given (they may carry credentials: sent, never stored)
	stats    []Stat
	out      chan *result
	wg       sync.WaitGroup
}

// newScraper returns a scraper of urls; rt, when not nil, replaces its transport (tests).
func newScraper(clk transport.Clock, urls []string, interval time.Duration, insecure bool, rt http.RoundTripper) *scraper {
	if rt == nil {
		rt = transport.NewTransport(len(urls)+1, insecure)
	}
	s := &scraper{clk: clk, interval: interval, timeout: Timeout(interval), urls: urls,
		client: &http.Client{Transport: rt}, stats: make([]Stat, len(urls)),
		out: make(chan *result, scrapeQueue*len(urls))}
	for i, u := range urls {
		s.stats[i].Source = wire.SafeURL(u)
	}
	return s
}

// start starts one goroutine per source; they stop when ctx ends (wait for them with wait).
func (s *scraper) start(ctx context.Context) {
	for i := range s.urls {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.loop(ctx, i)
		}()
	}
}

// wait waits for the sources' goroutines, then closes the channel to the writer.
func (s *scraper) wait() {
	s.wg.Wait()
	close(s.out)
	s.client.CloseIdleConnections()
}

// loop scrapes source i at 0, interval, 2·interval ... on the run clock. A tick that passed
// while a scrape was going is skipped (counted), never made up for.
func (s *scraper) loop(ctx context.Context, i int) {
	st := &s.stats[i]
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	iv := int64(s.interval)
	for k := int64(0); ; {
		if d := time.Duration(k*iv - s.clk.Now()); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
		sent := s.clk.Now()
		samples, err := s.scrapeOnce(ctx, s.urls[i])
		if ctx.Err() != nil {
			return // the run is over: an interrupted scrape is neither data nor a failure
		}
		res := &result{tNS: sent, source: st.Source, samples: samples, dur: time.Duration(s.clk.Now() - sent)}
		st.Attempts++
		if err != nil {
			res.err = err.Error()
			st.Failed++
			if st.FirstError == "" {
				st.FirstError = res.err
			}
		}
		select {
		case s.out <- res:
		default:
			st.Overflow++
		}
		next := k + 1
		if now := s.clk.Now(); now > next*iv {
			n := now / iv // the tick in progress has passed too: wait for the one after
			st.Skipped += n + 1 - next
			next = n + 1
		}
		k = next
	}
}

// scrapeOnce GETs one exposition and parses it. Its error is one short line that never
// holds the URL (it may carry credentials).
func (s *scraper) scrapeOnce(ctx context.Context, u string) ([]prom.Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return fetchExposition(ctx, s.client, u, s.timeout)
}

// fetchExposition GETs u with prom.Accept and parses its exposition (at most
// MaxExposition bytes). Its errors never quote u.
func fetchExposition(ctx context.Context, client *http.Client, u string, timeout time.Duration) ([]prom.Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, errors.New("bad URL")
	}
	req.Header.Set("Accept", prom.Accept)
	resp, err := client.Do(req)
	if err != nil {
		return nil, transportError(ctx, err, timeout)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	lr := &io.LimitedReader{R: resp.Body, N: MaxExposition + 1}
	samples, err := prom.Parse(lr, resp.Header)
	switch {
	case lr.N <= 0:
		return nil, fmt.Errorf("exposition larger than %d MiB", MaxExposition>>20)
	case err != nil && ctx.Err() != nil:
		return nil, transportError(ctx, err, timeout)
	case err != nil:
		return nil, errors.New(shortLine(err.Error()))
	}
	return samples, nil
}

// transportError says why a request failed without its URL (*url.Error quotes it).
func transportError(ctx context.Context, err error, timeout time.Duration) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("timeout after %v", timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return fmt.Errorf("%s: %s", op.Op, shortLine(op.Err.Error()))
	}
	return errors.New(shortLine(err.Error()))
}

// shortLine keeps the first line of s, at most 160 bytes.
func shortLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

// Probe GETs u once (timeout ProbeTimeout) and says whether it serves a parseable
// exposition; the error (without the URL) says why not.
func Probe(ctx context.Context, u *url.URL, insecure bool) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
	defer cancel()
	tr := transport.NewTransport(1, insecure)
	defer tr.CloseIdleConnections()
	samples, err := fetchExposition(ctx, &http.Client{Transport: tr}, u.String(), ProbeTimeout)
	if err == nil && len(samples) == 0 {
		err = errors.New("an empty exposition")
	}
	return len(samples), err
}

// journalScrape appends one scrape to j: its samples, then the scraper's own rows.
func journalScrape(j *results.MetricsJournal, sc *result) error {
	own := sc.ownRows()
	return j.AddSamples(sc.tNS, sc.source, sc.samples, own[:])
}

// writeMetrics is the metrics writer goroutine: it journals each scrape, flushing at least
// every flush, until the scraper closes its channel. After a write error it keeps reading
// (and drops) so that the scrapers never block.
func writeMetrics(j *results.MetricsJournal, in <-chan *result, flush time.Duration) error {
	tick := time.NewTicker(flush)
	defer tick.Stop()
	var err error
	for {
		select {
		case sc, ok := <-in:
			if !ok {
				return err
			}
			if err == nil {
				err = journalScrape(j, sc)
			}
		case <-tick.C:
			if err == nil {
				err = j.Flush()
			}
		}
	}
}

// Config is what a Run scrapes and how.
type Config struct {
	URLs     []string      // as given (they may carry credentials: sent, never stored)
	Interval time.Duration // the sampling period on the run clock
	Insecure bool          // skip TLS verification (--insecure)
	Flush    time.Duration // the metrics journal is flushed at least this often
	// RT, when not nil, is the scrapers' transport instead of a network one (tests).
	RT http.RoundTripper
}

// Run is a run's scraping, with its own goroutines, client and writer of the metrics
// journal; with no URLs, one that scrapes nothing.
type Run struct {
	scr  *scraper
	err  error  // the metrics journal's, once stopped
	stop func() // stops the scraper (once the last request in flight has ended); idempotent
}

// Start starts scraping cfg.URLs on clk into metricsPath's journal (results.JournalSuffix
// after it), headed by meta. The scrapers outlive ctx's cancelation (a stopped run still
// scrapes until its last request ends): Stop ends them.
func Start(ctx context.Context, cfg Config, clk transport.Clock, meta *results.RunMeta, metricsPath string) (*Run, error) {
	sr := &Run{stop: func() {}}
	if len(cfg.URLs) == 0 {
		return sr, nil
	}
	mj, err := results.CreateMetricsJournal(metricsPath+results.JournalSuffix, meta)
	if err != nil {
		return nil, err
	}
	sr.scr = newScraper(clk, cfg.URLs, cfg.Interval, cfg.Insecure, cfg.RT)
	scrapeCtx, stopScrape := context.WithCancel(context.WithoutCancel(ctx))
	sr.scr.start(scrapeCtx)
	metricsDone := make(chan struct{})
	go func() {
		defer close(metricsDone)
		sr.err = writeMetrics(mj, sr.scr.out, cfg.Flush)
		sr.err = errors.Join(sr.err, mj.Close())
	}()
	var once sync.Once
	sr.stop = func() {
		once.Do(func() {
			stopScrape()
			sr.scr.wait()
			<-metricsDone
		})
	}
	return sr, nil
}

// Stop stops the scrapers and waits for the metrics journal to be closed; idempotent.
func (r *Run) Stop() { r.stop() }

// Scraping says whether r scrapes anything (a metrics file is to be converted).
func (r *Run) Scraping() bool { return r.scr != nil }

// Err is the metrics journal's error, once stopped.
func (r *Run) Err() error { return r.err }

// Stats returns what scraping each source came to (nil when r scrapes nothing); read it
// once stopped.
func (r *Run) Stats() []Stat {
	if r.scr == nil {
		return nil
	}
	return r.scr.stats
}
