// Package replay sends a trace's requests to an OpenAI-compatible endpoint when they are
// due (open loop) or as fast as N workers allow (closed loop), times every streamed chunk,
// and writes one record per due request to a crash-safe journal that becomes a Parquet
// results file (docs/results-format.md, docs/replay.md).
package replay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/trace"
)

// Prompter appends the prompt text of a trace request to dst: PromptTokens tokens, with
// the shared prefix its PrefixBlocks say. tokenize's prompt builder is the real one.
type Prompter interface {
	AppendPrompt(dst []byte, r *trace.Request) ([]byte, error)
}

// PrompterFunc adapts a function to Prompter.
type PrompterFunc func(dst []byte, r *trace.Request) ([]byte, error)

// AppendPrompt calls f.
func (f PrompterFunc) AppendPrompt(dst []byte, r *trace.Request) ([]byte, error) { return f(dst, r) }

// Defaults of Options.
const (
	DefaultMaxInflight = 4096
	// DefaultReadBatch is ClientOptions.ReadBatch's default (--read-batch): CPU per
	// streamed token against ITL error (docs/replay.md, "Fidelity and cost").
	DefaultReadBatch = time.Millisecond
	// MaxReadBatch bounds it: it is also how late a chunk can be dated.
	MaxReadBatch       = 10 * time.Millisecond
	DefaultLookAhead   = 256
	DefaultGrace       = 30 * time.Second
	DefaultMaxLateness = 10 * time.Millisecond
)

// Options configure a run. Source, Client, Prompter and Output are required, and one of
// Speedup (open loop) or Concurrency (closed loop).
type Options struct {
	Source   trace.Source
	Client   *Client
	Prompter Prompter

	Speedup     float64 // open loop: due = (arrival - first arrival) / Speedup
	Concurrency int     // > 0: closed loop with this many workers; arrivals ignored
	// RampUp, closed loop: worker i starts at results.WorkerStart(i, Concurrency, RampUp) on the run
	// clock; 0 = every worker at the run start.
	RampUp time.Duration

	MaxInflight int           // open loop: a request due while this many are in flight is dropped
	Duration    time.Duration // 0 = whole trace; else only requests due within it (closed: sent within it)
	Limit       int64         // 0 = no limit; else at most this many recorded requests
	Warmup      int64         // leading requests sent on schedule but not recorded
	Grace       time.Duration // after an early stop (the caller's, a fatal error), how long requests in flight may finish
	LookAhead   int           // prepared requests buffered ahead of the dispatcher (closed loop: at least Concurrency)
	Shard       int32
	Prewarm     int // keep-alive connections opened before the run starts (Client.Prewarm)

	Output        string          // results file; the journal is Output + results.JournalSuffix
	KeepJournal   bool            // keep the journal after a successful conversion
	FlushInterval time.Duration   // journal flush period; 0 = results.DefaultFlushInterval
	Meta          results.RunMeta // run metadata; Run fills RunStartUnixNS, RunID and Mode
	Start         time.Time       // run start; zero = when Run starts dispatching
	// Origin is the trace arrival that is due at the run start when HasOrigin is set; else
	// the first request's. Shards set it to the whole trace's first arrival, so that each
	// request is due at the same instant as in a single-process run.
	Origin      time.Duration
	HasOrigin   bool
	MaxLateness time.Duration // schedule lateness above which the run is client-limited

	// Models maps the trace's model names to the served ones sent in the request body;
	// a model it does not name (and a null one) is the Client's. nil: the Client's for all.
	Models map[string]string

	// Conversations (session.go, docs/replay.md "Conversations"). Sessions is
	// SessionsIndependent ("" too: every turn at its trace time) or SessionsSequential
	// (open loop: a turn is due at max(its trace due, its predecessor's end + think time);
	// closed loop: a worker keeps each conversation it starts).
	// History, sequential mode: HistoryActual, or HistorySynthetic ("" too: the
	// Prompter's text alone). OnTurnError: TurnErrorContinue ("" too) or
	// TurnErrorEndSession. ThinkTime is drawn in trace order from ThinkSeed. SessionPlan,
	// from PlanSessions, says when a session's last turn has come (its history is freed
	// then); nil: sessions end with the trace.
	Sessions    string
	History     string
	OnTurnError string
	ThinkTime   ThinkTime
	ThinkSeed   uint64
	SessionPlan *SessionPlan

	// Scrape lists the Prometheus endpoints sampled every ScrapeInterval (0 =
	// DefaultScrapeInterval) on the run clock while the run goes, into the metrics file
	// results.MetricsPath(Output) (scrape.go). The URLs may carry credentials: they are
	// sent, and stored only through SafeURL. nil: no scraping, no metrics file.
	Scrape         []string
	ScrapeInterval time.Duration

	// Progress, when set, is updated live for a progress display.
	Progress *Progress

	seams seams // tests only; zero in production
}

// seams let tests run the runner's timing under testing/synctest, whose virtual clock
// advances only while every goroutine is durably blocked: no real sockets, no yield loop.
type seams struct {
	// do, when set, performs each request instead of the Client (after the dispatcher's
	// Client.startNow, which does nothing for a net/http Client).
	do func(ctx context.Context, clk clock, req *request, res *results.Result)
	// noSpin makes the waiter sleep on its timer up to each deadline, with no yield loop.
	noSpin bool
	// record, when set, sees every record the writer takes, before the journal does.
	record func(*results.Result)
	// ended, when set, sees every request's record as the request ends, on the thread
	// that ends it (a request's goroutine, or a reactor's), before the writer does.
	ended func(*results.Result)
	// scrapeRT, when set, is the scraper's transport instead of a network one.
	scrapeRT http.RoundTripper
}

// Validate checks the options and fills defaults.
func (o *Options) Validate() error {
	switch {
	case o.Source == nil:
		return errors.New("replay: no trace source")
	case o.Client == nil:
		return errors.New("replay: no client")
	case o.Prompter == nil:
		return errors.New("replay: no prompt builder")
	case o.Output == "":
		return errors.New("replay: no output file")
	case o.Concurrency < 0:
		return fmt.Errorf("replay: concurrency %d is negative", o.Concurrency)
	case o.Concurrency == 0 && !(o.Speedup > 0):
		return fmt.Errorf("replay: speedup %v must be positive", o.Speedup)
	case o.MaxInflight < 0, o.Limit < 0, o.Warmup < 0, o.Duration < 0, o.Grace < 0, o.LookAhead < 0:
		return errors.New("replay: max-inflight, limit, warmup, duration, grace and look-ahead must not be negative")
	case o.RampUp < 0:
		return fmt.Errorf("replay: ramp-up %v is negative", o.RampUp)
	case o.RampUp > 0 && o.Concurrency == 0:
		return errors.New("replay: ramp-up needs a closed loop (concurrency)")
	case o.Sessions != "" && o.Sessions != SessionsIndependent && o.Sessions != SessionsSequential:
		return fmt.Errorf("replay: sessions %q: want independent or sequential", o.Sessions)
	case o.History != "" && o.History != HistoryActual && o.History != HistorySynthetic:
		return fmt.Errorf("replay: history %q: want actual or synthetic", o.History)
	case o.History == HistoryActual && o.Sessions != SessionsSequential:
		return errors.New("replay: history actual needs sequential sessions")
	case o.History == HistoryActual && o.Client.opts.TokenIDPrompts:
		return errors.New("replay: history actual needs text prompts: a received answer is text, not the server's token ids")
	case o.OnTurnError != "" && o.OnTurnError != TurnErrorContinue && o.OnTurnError != TurnErrorEndSession:
		return fmt.Errorf("replay: on-turn-error %q: want continue or end-session", o.OnTurnError)
	}
	if o.MaxInflight == 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	if o.LookAhead == 0 {
		o.LookAhead = DefaultLookAhead
	}
	// The closed loop's first wave takes Concurrency requests at once: the clock starts only
	// when all their bodies are built (Run's waitPrepared).
	o.LookAhead = max(o.LookAhead, o.Concurrency)
	if o.FlushInterval <= 0 {
		o.FlushInterval = results.DefaultFlushInterval
	}
	if o.MaxLateness <= 0 {
		o.MaxLateness = DefaultMaxLateness
	}
	if o.ScrapeInterval < 0 {
		return fmt.Errorf("replay: scrape interval %v is negative", o.ScrapeInterval)
	}
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = DefaultScrapeInterval
	}
	for _, u := range o.Scrape {
		if _, err := ParseScrapeURL(u); err != nil {
			return fmt.Errorf("replay: scrape %w", err)
		}
	}
	return nil
}

// Progress holds live counters of a run, safe to read from another goroutine.
type Progress struct {
	Planned      atomic.Int64 // requests handed to the dispatcher (warm-up included)
	Sent         atomic.Int64
	InFlight     atomic.Int64
	Done         atomic.Int64 // recorded (every status)
	Errors       atomic.Int64 // recorded with a status other than ok, dropped, canceled
	Dropped      atomic.Int64
	_            [56]byte     // OutputTokens, added per chunk by the stream reactor's thread, has a cache line of its own
	OutputTokens atomic.Int64 // streamed so far (per chunk; 1 per chunk when the server does not say)
	_            [56]byte
	Late         atomic.Int64 // dispatches later than MaxLateness
	LastLateNS   atomic.Int64 // lateness of the latest late dispatch
	StartUnixNS  atomic.Int64 // 0 until the run starts
	Stopping     atomic.Bool
}

// Run replays o.Source and writes o.Output. Per-request failures are records, not errors;
// Run returns an error only when the run itself cannot go on (the journal cannot be
// written, the trace cannot be read, a prompt cannot be built). Even then, and after a
// stop, the results file holds every request that was due, written through the journal.
//
// Canceling ctx is the graceful stop; a ctx made by WithStop also carries the hard abort.
func Run(ctx context.Context, o Options) (*Summary, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	prog := o.Progress
	if prog == nil {
		prog = new(Progress)
	}
	mode := results.ModeOpen
	if o.Concurrency > 0 {
		mode = results.ModeClosed
	}
	r := &runner{o: o, prog: prog}
	if o.Sessions == SessionsSequential {
		th, err := newThinker(o.ThinkTime, o.ThinkSeed)
		if err != nil {
			return nil, fmt.Errorf("replay: think time: %w", err)
		}
		r.sess = &sessions{convs: map[int64]*conv{}, plan: o.SessionPlan, wake: make(chan bool, 1), th: th}
		if o.Concurrency > 0 {
			r.sess.workers = make([]workerQueue, o.Concurrency)
			for i := range r.sess.workers {
				r.sess.workers[i].notify = make(chan bool, 1)
			}
		}
	} else {
		r.turnIdx = map[int64]int32{}
	}
	// The stop model (see WithStop): the hard context cancels the requests in flight, the
	// graceful one, derived from it, ends dispatching. Everything that ends a run cancels
	// one of the two: ctx or its hard context (a signal), the end of the schedule, a fatal
	// error, the grace after an early stop, and Run's return.
	r.hard, r.cancelHard = context.WithCancelCause(HardContext(ctx))
	defer r.cancelHard(errRunOver)
	r.graceful, r.cancelGraceful = context.WithCancelCause(r.hard)
	r.stopped = r.graceful.Done()
	defer context.AfterFunc(ctx, func() { r.stop(errStopped) })()
	defer r.stopGraceTimer()
	if o.Prewarm > 0 {
		o.Client.Prewarm(ctx, o.Prewarm)
	}
	r.bodyPrefixes = make(map[string][]byte, len(o.Models))
	for k, v := range o.Models {
		r.bodyPrefixes[k] = o.Client.bodyPrefixFor(v)
	}
	if !o.Start.IsZero() {
		// A run that knows its start (shards, --start-at) knows its id: every request is
		// prepared with it.
		r.setRunID(o.Meta, o.Start)
	}
	r.prepared = make(chan *request, o.LookAhead)
	if r.sess == nil {
		r.lowWater, r.prepLow = o.LookAhead/2, make(chan struct{}, 1)
	}
	r.preparerDone = make(chan struct{})
	go r.prepare()
	// The caller may close the Source once Run returns: the preparer must be out of it.
	defer func() { r.cancelGraceful(errRunOver); <-r.preparerDone }()
	start := o.Start
	if start.IsZero() {
		// The clock starts once the look-ahead is full (or the trace is short), so the
		// first requests are not late by the time it takes to build their bodies.
		r.waitPrepared(5 * time.Second)
		start = time.Now()
	}
	clk := clock{start: start}
	r.clk = clk
	meta := o.Meta
	meta.Mode = mode
	if mode == results.ModeClosed {
		meta.RampUpNS = int64(o.RampUp)
	}
	meta.RunStartUnixNS = start.UnixNano()
	if meta.ShardCount == 0 {
		meta.ShardCount = 1
	}
	meta.RunID = r.setRunID(meta, start)
	if meta.Repeat > 0 && meta.RepeatGroup == "" {
		meta.RepeatGroup = meta.RunID // the first repeat names its group
	}
	if meta.MaxLatenessMS == 0 {
		meta.MaxLatenessMS = float64(o.MaxLateness) / 1e6
	}
	if meta.Flags == nil {
		meta.Flags = map[string]string{}
	}
	metricsPath := results.MetricsPath(o.Output)
	if len(o.Scrape) > 0 {
		meta.Scrape = make([]string, len(o.Scrape))
		for i, u := range o.Scrape {
			meta.Scrape[i] = SafeURL(u)
		}
		meta.ScrapeIntervalNS, meta.MetricsFile = int64(o.ScrapeInterval), filepath.Base(metricsPath)
	}
	journalPath := o.Output + results.JournalSuffix
	journal, err := results.CreateJournal(journalPath, &meta)
	if err != nil {
		return nil, err
	}
	// The scraper (scrape.go): its own goroutines, client and writer; it stops once the
	// last request in flight has ended.
	var scr *scraper
	var metricsErr error
	stopScraper := func() {}
	if len(o.Scrape) > 0 {
		mj, err := results.CreateMetricsJournal(metricsPath+results.JournalSuffix, &meta)
		if err != nil {
			journal.Close()
			os.Remove(journalPath) // nothing was sent: no run to recover
			return nil, err
		}
		scr = newScraper(clk, o.Scrape, o.ScrapeInterval, o.Client.opts.Insecure, o.seams.scrapeRT)
		scrapeCtx, stopScrape := context.WithCancel(context.WithoutCancel(ctx))
		scr.start(scrapeCtx)
		metricsDone := make(chan struct{})
		go func() {
			defer close(metricsDone)
			metricsErr = writeMetrics(mj, scr.out, o.FlushInterval)
			metricsErr = errors.Join(metricsErr, mj.Close())
		}()
		var once sync.Once
		stopScraper = func() {
			once.Do(func() {
				stopScrape()
				scr.wait()
				<-metricsDone
			})
		}
		defer stopScraper()
	}
	prog.StartUnixNS.Store(meta.RunStartUnixNS)

	r.meta = &meta
	r.results = newResultQueue()

	// Writer: the only owner of the journal and the summary.
	sum := newSummary(mode, o.MaxLateness)
	if mode == results.ModeClosed {
		sum.closedLoop(results.LastWorkerStart(o.Concurrency, o.RampUp))
	}
	var writeErr error
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		writeErr = r.write(journal, sum)
	}()

	switch {
	case mode == results.ModeClosed:
		r.closedLoop()
	case r.sess != nil:
		r.openLoopSessions()
	default:
		r.openLoop()
	}
	r.stop(errScheduleEnd) // a no-op after an early stop; the preparer may be blocked on a full channel
	r.wg.Wait()            // the requests in flight end by themselves, or by the hard context
	stopScraper()
	if r.sess != nil {
		<-r.preparerDone // it records the turns of sessions ended by a failed turn
	}
	r.results.close()
	<-writerDone

	closeErr := journal.Close()
	var runErr error
	if e := r.prepErr.Load(); e != nil {
		runErr = *e
	}
	finish := func() *Summary {
		s := sum.finish()
		if scr != nil {
			s.Scrapes = scr.stats
		}
		return s
	}
	if err := errors.Join(writeErr, closeErr); err != nil {
		return finish(), errors.Join(runErr, err, KeptJournalError(journalPath, o.Output))
	}
	info, err := results.ConvertJournal(journalPath, o.Output)
	if err != nil {
		return finish(), errors.Join(runErr, err, KeptJournalError(journalPath, o.Output))
	}
	if info.Tail != nil {
		return finish(), errors.Join(runErr, fmt.Errorf("replay: %w", info.Tail))
	}
	if !o.KeepJournal {
		os.Remove(journalPath)
	}
	if scr != nil {
		// The results file is written; a metrics file that cannot be is an error of the run,
		// its journal kept for recover.
		if metricsErr == nil {
			_, metricsErr = results.ConvertMetricsJournal(metricsPath+results.JournalSuffix, metricsPath)
		}
		if metricsErr != nil {
			return finish(), errors.Join(runErr, metricsErr, fmt.Errorf("replay: the results file %s is written; the server samples are kept in %s: `llmreplay recover %s` turns them into %s",
				o.Output, metricsPath+results.JournalSuffix, shellQuote(metricsPath+results.JournalSuffix), metricsPath))
		}
		if !o.KeepJournal {
			os.Remove(metricsPath + results.JournalSuffix)
		}
	}
	s := finish()
	s.Run = meta
	if r.sess != nil {
		s.Sessions = SessionsSequential
		s.HistoryLonger = r.sess.short
	}
	return s, runErr
}

// WithStop returns the two stop contexts of a run, nested as k6's executors nest theirs:
// a hard context derived from parent, and ctx, the graceful one, derived from the hard one
// (so an abort is a stop as well). Run takes ctx and finds the hard context in it:
//
//   - stop cancels ctx, the graceful stop: no more requests are dispatched, and those in
//     flight get Options.Grace to finish; then they are canceled (recorded canceled).
//   - abort cancels the hard context: every request in flight is canceled at once.
//
// cmd/llmreplay's main makes one pair for the whole process: the first SIGINT or SIGTERM
// calls stop, the second abort.
func WithStop(parent context.Context) (ctx context.Context, stop, abort context.CancelFunc) {
	hard, abort := context.WithCancel(parent)
	ctx, stop = context.WithCancel(context.WithValue(hard, hardKey{}, hard))
	return ctx, stop, abort
}

type hardKey struct{}

// HardContext returns the hard context of a graceful ctx made by WithStop (or derived from
// one); for any other ctx, a context that is never canceled (only ctx's values).
func HardContext(ctx context.Context) context.Context {
	if h, ok := ctx.Value(hardKey{}).(context.Context); ok {
		return h
	}
	return context.WithoutCancel(ctx)
}

// Causes of a run's stop contexts.
var (
	errScheduleEnd = errors.New("replay: end of the schedule") // natural end, --duration, --limit
	errStopped     = errors.New("replay: stopped")             // the caller's graceful stop
	errGraceOver   = errors.New("replay: grace period over")
	errRunOver     = errors.New("replay: run over")
)

type runner struct {
	o    Options
	clk  clock
	prog *Progress
	meta *results.RunMeta

	// hard, when canceled, cancels every request in flight; graceful, derived from it,
	// ends dispatching. stopped is graceful.Done(), fetched once for the hot loops.
	hard, graceful             context.Context
	cancelHard, cancelGraceful context.CancelCauseFunc
	stopped                    <-chan struct{}
	graceOnce                  sync.Once
	graceTimer                 *time.Timer // armed by the first early stop

	// runID is the run id once the run start is fixed (before the preparer starts when
	// Options.Start is given, else once the look-ahead is prepared); the preparer reads
	// preparedRunID, the dispatchers runID, set before they start.
	runID         string
	preparedRunID atomic.Pointer[string]
	bodyPrefixes  map[string][]byte // Options.Models: a trace model's body start

	prepared     chan *request
	preparerDone chan struct{} // closed when prepare returns
	// The look-ahead's low-water mark (handOver): 0 for sessions, else half of it.
	lowWater    int
	prepQueued  atomic.Int64  // in prepared, as counted by handOver and next
	prepWaiting atomic.Bool   // handOver waits for prepLow
	prepLow     chan struct{} // cap 1
	results     *resultQueue
	wg          sync.WaitGroup // requests in flight
	inflight    atomic.Int64
	prepErr     atomic.Pointer[error]
	ssePool     sync.Pool

	sess    *sessions       // sequential sessions; nil otherwise
	turnIdx map[int64]int32 // independent mode: turns read per session (the preparer's)
}

// stop ends dispatching (cancels the graceful context) with cause. The end of the schedule
// leaves the requests in flight to finish (each is bounded by its timeout); any other stop
// (the caller's, a fatal error) is early: the progress says stopping, and Grace later the
// hard context cancels the requests still in flight. An early stop after the end of the
// schedule, while requests are still in flight, arms the grace all the same.
func (r *runner) stop(cause error) {
	r.cancelGraceful(cause) // the first cause stays
	if cause == errScheduleEnd {
		return
	}
	r.prog.Stopping.Store(true)
	r.graceOnce.Do(func() { r.graceTimer = time.AfterFunc(r.o.Grace, func() { r.cancelHard(errGraceOver) }) })
}

// stopGraceTimer stops the grace timer, if a stop armed it, and keeps any later stop from
// arming it.
func (r *runner) stopGraceTimer() {
	r.graceOnce.Do(func() {})
	if r.graceTimer != nil {
		r.graceTimer.Stop()
	}
}

// setRunID fixes the run id of a run that starts at start, for the preparer and the
// dispatchers, and returns it.
func (r *runner) setRunID(meta results.RunMeta, start time.Time) string {
	if r.runID == "" {
		id := results.RunID(start.UnixNano(), meta.TraceSHA256, max(meta.ShardCount, 1)) // runIDLen long (TestRunIDLen)
		r.runID = id
		r.preparedRunID.Store(&id)
	}
	return r.runID
}

// withRunID gives req the run id, if it was prepared before the id was known: one copy
// over the head's placeholder. The dispatcher calls it before it sends.
func (r *runner) withRunID(req *request) {
	if req.runID == "" {
		req.runID = r.runID
		if req.runIDAt > 0 {
			copy(req.head[req.runIDAt:], req.runID)
		}
	}
}

// prepare reads the trace, plans each request and builds its body ahead of time, so the
// dispatcher only waits and writes. The channel's capacity bounds the look-ahead.
func (r *runner) prepare() {
	defer close(r.preparerDone)
	defer close(r.prepared)
	if r.sess != nil {
		defer r.sess.prepEnd()
	}
	p := planner{speedup: r.o.Speedup, closed: r.o.Concurrency > 0, duration: r.o.Duration, limit: r.o.Limit, warmup: r.o.Warmup,
		origin: r.o.Origin, hasOrigin: r.o.HasOrigin}
	if p.closed {
		p.duration = 0 // closed loop: bounded by send time instead, in the workers
	}
	var prompt []byte
	src := r.o.Source
	for r.graceful.Err() == nil && src.Next() { // after a stop, not one more read
		tr := src.Request()
		due, warm, ok := p.plan(tr.Arrival)
		if !ok {
			return
		}
		var c *conv // sequential sessions: the session of a first turn
		var turn int32
		if tr.HasSession {
			if r.sess != nil {
				var err error
				if c, err = r.planTurn(&tr, due, warm); err != nil {
					r.fail(err)
					return
				}
				if c == nil {
					continue // a later turn: due when its predecessor ends
				}
			} else {
				turn = r.turnIdx[tr.SessionID]
				r.turnIdx[tr.SessionID] = turn + 1
			}
		}
		var err error
		if r.sess != nil {
			r.sess.promptMu.Lock()
		}
		prompt, err = r.o.Prompter.AppendPrompt(prompt[:0], &tr)
		if r.sess != nil {
			r.sess.promptMu.Unlock()
		}
		if err != nil {
			r.fail(fmt.Errorf("replay: prompt of request %d: %w", tr.ID, err))
			return
		}
		req := &request{
			id: tr.ID, dueNS: int64(due), promptTokens: tr.PromptTokens, outputTokens: tr.OutputTokens,
			warmup: warm, session: tr.SessionID, hasSession: tr.HasSession, turn: turn, conv: c, sessionWaitNS: results.Null,
		}
		runID := r.preparedRunID.Load()
		if runID != nil {
			req.runID = *runID
		}
		if c != nil {
			r.finishBody(req, &tr, c, prompt)
		} else {
			prefix := r.o.Client.bodyPrefix
			if p, ok := r.bodyPrefixes[tr.Model]; ok {
				prefix = p
			}
			req.body = r.o.Client.appendBody(make([]byte, 0, len(prompt)+len(prefix)+96), prefix, prompt, tr.OutputTokens)
			if raw := r.o.Client.raw; raw != nil {
				req.head = raw.appendHead(make([]byte, 0, raw.headCap()), req, len(req.body), runID == nil)
			}
		}
		if !r.handOver(req) {
			return
		}
		r.prog.Planned.Add(1)
		if r.sess != nil && r.sess.needHead.Load() {
			r.sess.signal()
		}
	}
	if err := src.Err(); err != nil {
		r.fail(fmt.Errorf("replay: read trace: %w", err))
	}
}

// handOver puts req in the look-ahead; false when the run stopped first. Past a full
// look-ahead (the preparer runs ahead of the schedule), the plain loops' preparer waits
// until next has taken it down to half (r.lowWater): one wake-up of this goroutine per
// half look-ahead, not one per request, each of which woke a thread too (resultQueue).
// Sessions' dispatchers take from the channel in their own selects: there the preparer
// waits on the channel.
//
// Lost wake-ups: the preparer sets prepWaiting and then reads prepQueued; next lowers
// prepQueued and then reads prepWaiting. Both are atomics, sequentially consistent: if
// the preparer read a count that was not low, next's read after its own decrement sees
// it waiting.
func (r *runner) handOver(req *request) bool {
	for r.lowWater > 0 {
		select {
		case r.prepared <- req:
			r.prepQueued.Add(1)
			return true
		default:
		}
		r.prepWaiting.Store(true)
		if r.prepQueued.Load() <= int64(r.lowWater) {
			r.prepWaiting.Store(false)
			continue
		}
		select {
		case <-r.prepLow:
		case <-r.stopped:
			return false
		}
	}
	select {
	case r.prepared <- req:
		return true
	case <-r.stopped:
		return false
	}
}

// waitPrepared waits until the look-ahead channel is full or the preparer has finished,
// at most max or until the run stops.
func (r *runner) waitPrepared(max time.Duration) {
	deadline := time.After(max)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for len(r.prepared) < cap(r.prepared) {
		select {
		case <-r.preparerDone:
			return
		case <-r.stopped:
			return
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}

func (r *runner) fail(err error) {
	r.prepErr.CompareAndSwap(nil, &err)
	r.stop(err)
}

// next returns the next prepared request; false when there are no more or the run stops.
func (r *runner) next() (*request, bool) {
	select {
	case q, ok := <-r.prepared:
		if ok && r.lowWater > 0 && r.prepQueued.Add(-1) <= int64(r.lowWater) && r.prepWaiting.CompareAndSwap(true, false) {
			select {
			case r.prepLow <- struct{}{}:
			default:
			}
		}
		return q, ok
	case <-r.stopped:
		return nil, false
	}
}

// openLoop dispatches each prepared request at its due time.
func (r *runner) openLoop() {
	w := r.openLoopWaiter()
	defer w.release()
	for {
		req, ok := r.next()
		if !ok {
			return
		}
		sent, ok := r.sendAtDue(w, req)
		if !ok {
			return
		}
		if sent {
			continue
		}
		if !w.until(req.dueNS) {
			return
		}
		r.dispatch(req)
	}
}

// dispatch sends req now, or records it dropped when MaxInflight requests are in flight
// (a dropped turn of a sequential session ends as a failed one). With the raw client and a
// pooled connection, the dispatcher writes the request itself: no goroutine hand-off or
// connection set-up stands between the due time and the write, and the reactor reads the
// response and ends the request (launch). Otherwise (no idle connection, a message the
// socket did not take whole, or net/http) a new goroutine does the rest.
func (r *runner) dispatch(req *request) {
	r.countLate(r.clk.now() - req.dueNS)
	if r.inflight.Load() >= int64(r.o.MaxInflight) {
		res := r.resultOf(req)
		res.Status = results.StatusDropped
		res.Error = fmt.Sprintf("not sent: %d requests in flight (--max-inflight)", r.o.MaxInflight)
		if req.conv != nil {
			r.turnEnded(req, res, r.clk.now())
		}
		if !req.warmup {
			r.results.put(res)
		}
		return
	}
	r.withRunID(req)
	r.launch(req, r.o.Client.startNow(r.clk, req))
}

// countLate counts a send later than MaxLateness in the progress.
func (r *runner) countLate(late int64) {
	if late > int64(r.o.MaxLateness) {
		r.prog.Late.Add(1)
		r.prog.LastLateNS.Store(late)
	}
}

// launch hands req to a new goroutine that sends it (or, with pre, finishes the send the
// dispatcher began) and reads its response; or, when the dispatcher wrote req's whole
// message (pre), to the reactor that reads the response (doRawAsync).
func (r *runner) launch(req *request, pre *rawStart) {
	r.inflight.Add(1)
	r.prog.InFlight.Add(1)
	r.wg.Add(1)
	if req.conv == nil && r.o.seams.do == nil && r.o.Client.raw != nil && r.o.Client.rawAsyncOK(pre, req) {
		// The whole message is written: the reactor reading the response ends the request
		// on its own thread (doRawAsync), and no goroutine is started for it.
		res, sse := r.sendBegin(req)
		r.o.Client.doRawAsync(r.hard, r.clk, req, res, sse, r.onTokens, pre, func() { r.sendEnd(req, res, sse) })
		return
	}
	go r.send(req, pre)
}

// closedLoop runs Concurrency workers, each sending the next request when its last ends.
// Worker i starts at results.WorkerStart(i, Concurrency, RampUp); each request is due when its
// worker became free (closed.go), stamped before the worker waits for the preparer, so
// that waiting for a body is lateness, not a later due time (coordinated omission).
func (r *runner) closedLoop() {
	var wg sync.WaitGroup
	for i := range r.o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.sess != nil {
				r.closedWorkerSessions(i)
				return
			}
			// The first due is the worker's start, exactly: waited for (the run start may
			// be ahead, --start-at), never read from the clock.
			due := results.WorkerStart(i, r.o.Concurrency, r.o.RampUp)
			w := newWaiter(r.clk, r.stopped)
			if r.o.seams.noSpin {
				w.noSpin()
			}
			if !w.until(due) {
				return
			}
			for {
				req, ok := r.next()
				if !ok {
					return
				}
				select {
				case <-r.stopped: // next picks at random when a request is ready too
					return
				default:
				}
				if r.o.Duration > 0 && r.clk.now() > int64(r.o.Duration) {
					r.stop(errScheduleEnd)
					return
				}
				req.dueNS = due
				r.inflight.Add(1)
				r.prog.InFlight.Add(1)
				r.wg.Add(1)
				due = r.send(req, nil)
			}
		}()
	}
	wg.Wait()
}

// send performs one request and hands its record to the writer. It returns the run clock
// when the request ended (its response was over), read before the bookkeeping and the
// hand-off to the writer: a closed-loop worker is free from then on.
func (r *runner) send(req *request, pre *rawStart) (freeNS int64) {
	res, sse := r.sendBegin(req)
	if do := r.o.seams.do; do != nil {
		do(r.hard, r.clk, req, res)
	} else {
		r.o.Client.do(r.hard, r.clk, req, res, sse, r.onTokens, pre)
	}
	return r.sendEnd(req, res, sse)
}

// sendBegin starts the record of req, launched (r.wg counts it), and counts it sent.
func (r *runner) sendBegin(req *request) (*results.Result, *sseReader) {
	r.withRunID(req) // the closed loop's requests (the open loop's have it already)
	res := r.resultOf(req)
	sse, _ := r.ssePool.Get().(*sseReader)
	if sse == nil {
		sse = newSSEReader(nil, r.clk.now, 4<<10, r.o.Client.opts.MaxLine)
	}
	r.prog.Sent.Add(1)
	return res, sse
}

// sendEnd ends req, whose record res is complete: see send.
func (r *runner) sendEnd(req *request, res *results.Result, sse *sseReader) (freeNS int64) {
	defer r.wg.Done()
	freeNS = r.clk.now()
	sse.reset(nil)
	r.ssePool.Put(sse)
	req.body, req.head = nil, nil
	r.inflight.Add(-1)
	r.prog.InFlight.Add(-1)
	if req.conv != nil {
		r.turnEnded(req, res, freeNS) // queues the session's next turn, if read
	}
	if f := r.o.seams.ended; f != nil {
		f(res)
	}
	if !req.warmup {
		r.results.put(res)
	}
	return freeNS
}

// onTokens counts streamed output tokens in the progress.
func (r *runner) onTokens(n int) { r.prog.OutputTokens.Add(int64(n)) }

// write is the writer goroutine: it journals each record (taking them from the queue in
// batches, resultQueue), flushing at least every FlushInterval, and accumulates the
// summary.
func (r *runner) write(j *results.Journal, sum *summary) error {
	tick := time.NewTicker(r.o.FlushInterval)
	defer tick.Stop()
	drain := time.NewTicker(resultDrain)
	defer drain.Stop()
	var err error
	var batch []*results.Result
	for {
		select {
		case <-r.results.wake:
		case <-drain.C:
		case <-tick.C:
			if err == nil {
				if e := j.Flush(); e != nil {
					err = e
					r.fail(e)
				}
			}
			continue
		}
		var closed bool
		batch, closed = r.results.take(batch)
		for i, res := range batch {
			batch[i] = nil
			sum.add(res)
			if f := r.o.seams.record; f != nil {
				f(res)
			}
			r.prog.Done.Add(1)
			switch res.Status {
			case results.StatusOK, results.StatusCanceled:
			case results.StatusDropped:
				r.prog.Dropped.Add(1)
			default:
				r.prog.Errors.Add(1)
			}
			if err == nil {
				if e := j.Add(res); e != nil {
					err = e
					r.fail(e)
				}
			}
		}
		if closed {
			return err
		}
	}
}
