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

	"github.com/llmreplay/llmreplay/replay/images"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/scrape"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
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
	DefaultMaxInflight = transport.DefaultMaxInflight
	// DefaultReadBatch is ClientOptions.ReadBatch's default (--read-batch): CPU per
	// streamed token against ITL error (docs/replay.md, "Fidelity and cost").
	DefaultReadBatch   = time.Millisecond
	DefaultLookAhead   = 256
	DefaultGrace       = 30 * time.Second
	DefaultMaxLateness = 10 * time.Millisecond
)

// Options configure a run. Source, Client, Prompter and Output are required, and one of
// Speedup (open loop) or Concurrency (closed loop).
type Options struct {
	Source   trace.Source
	Client   *transport.Client
	Prompter Prompter
	// Tools splits a row's prompt tokens into its tool definitions and its prompt's text
	// (tools.go); nil sends every prompt token as text.
	Tools *Tools
	// Images sends a row's images and cuts its prompt's text to what they leave
	// (replay/images); nil sends no images.
	Images *images.Builder

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

	// Inputs > 0: the Client's API is unary (embeddings, rerank; unary.go) and each row is
	// one request of Inputs inputs (rerank: documents, after a query of QueryTokens) whose
	// lengths add up to its prompt tokens. 0 for a generation API.
	Inputs      int
	QueryTokens int

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
	Sessions string
	History  string
	// HistoryOverhead is what a conversation's (or an agent's context's) earlier turns
	// cost the server beyond their text: measured by --calibrate (CalibrateHistory); the
	// zero value counts the builder's text alone.
	HistoryOverhead HistoryOverhead
	OnTurnError     string
	ThinkTime       ThinkTime
	ThinkSeed       uint64
	SessionPlan     *SessionPlan

	// Agents (agents.go, docs/replay.md "Agents"): with Sessions SessionsDAG, AgentPlan
	// (from PlanAgents, over the rows this run reads) holds the calls; each is due when
	// its parents have ended plus its gap under Gaps (GapsRecorded, "" too; GapsScaled;
	// GapsNone). Its prompt grows from its first parent's context with actual answers.
	Gaps      string
	AgentPlan *AgentPlan

	// Scrape lists the Prometheus endpoints sampled every ScrapeInterval (0 =
	// scrape.DefaultInterval) on the run clock while the run goes, into the metrics file
	// results.MetricsPath(Output) (package scrape). The URLs may carry credentials: they are
	// sent, and stored only through wire.SafeURL. nil: no scraping, no metrics file.
	Scrape         []string
	ScrapeInterval time.Duration

	// Progress, when set, is updated live for a progress display.
	Progress *Progress

	seams seams // tests only; zero in production
}

// seams let tests run the runner's timing under testing/synctest, whose virtual clock
// advances only while every goroutine is durably blocked: no real sockets, no yield loop.
type seams struct {
	// do, when set, is the run's transport instead of the Client's (funcTransport): it
	// performs each request, all of it on the request's goroutine.
	do func(ctx context.Context, clk transport.Clock, req *transport.Request, res *results.Result)
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
	case o.Sessions != "" && o.Sessions != SessionsIndependent && o.Sessions != SessionsSequential && o.Sessions != SessionsDAG:
		return fmt.Errorf("replay: sessions %q: want independent, sequential or dag", o.Sessions)
	case o.Sessions == SessionsDAG && o.AgentPlan == nil:
		return errors.New("replay: sessions dag needs the agent plan (PlanAgents)")
	case o.Sessions == SessionsDAG && o.Concurrency > 0:
		return errors.New("replay: sessions dag runs in the open loop: its calls are due when their parents end, not when a worker is free")
	case o.Sessions == SessionsDAG && o.Client.Options().TokenIDPrompts:
		return errors.New("replay: sessions dag needs text prompts: a context holds the answers received, which are text")
	case o.Gaps != "" && o.Gaps != GapsRecorded && o.Gaps != GapsScaled && o.Gaps != GapsNone:
		return fmt.Errorf("replay: gaps %q: want recorded, scaled or none", o.Gaps)
	case o.History != "" && o.History != HistoryActual && o.History != HistorySynthetic:
		return fmt.Errorf("replay: history %q: want actual or synthetic", o.History)
	case o.History == HistoryActual && o.Sessions != SessionsSequential:
		return errors.New("replay: history actual needs sequential sessions")
	case o.History == HistoryActual && o.Client.Options().TokenIDPrompts:
		return errors.New("replay: history actual needs text prompts: a received answer is text, not the server's token ids")
	case o.OnTurnError != "" && o.OnTurnError != TurnErrorContinue && o.OnTurnError != TurnErrorEndSession:
		return fmt.Errorf("replay: on-turn-error %q: want continue or end-session", o.OnTurnError)
	}
	if err := o.validateUnary(); err != nil {
		return err
	}
	if o.MaxInflight == 0 {
		o.MaxInflight = transport.DefaultMaxInflight
	}
	if o.LookAhead == 0 {
		o.LookAhead = DefaultLookAhead
	}
	// The closed loop's first wave takes Concurrency requests at once: the clock starts only
	// when all their bodies are built (feed.waitPrepared).
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
		o.ScrapeInterval = scrape.DefaultInterval
	}
	for _, u := range o.Scrape {
		if _, err := scrape.ParseURL(u); err != nil {
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
	r, err := newRunner(o)
	if err != nil {
		return nil, err
	}
	mode := results.ModeOpen
	if o.Concurrency > 0 {
		mode = results.ModeClosed
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
	r.feed = newFeed(r)
	if !o.Start.IsZero() {
		// A run that knows its start (shards, --start-at) knows its id: every request is
		// prepared with it.
		r.setRunID(o.Meta, o.Start)
	}
	go r.feed.prepare()
	// The caller may close the Source once Run returns: the preparer must be out of it.
	defer func() { r.cancelGraceful(errRunOver); <-r.feed.preparerDone }()
	start := o.Start
	if start.IsZero() {
		// The clock starts once the look-ahead is full (or the trace is short), so the
		// first requests are not late by the time it takes to build their bodies.
		r.feed.waitPrepared(5 * time.Second)
		start = time.Now()
	}
	r.clk = transport.Clock{Start: start}
	meta := runMeta(o, mode, start, r.setRunID(o.Meta, start))
	metricsPath := results.MetricsPath(o.Output)
	if len(o.Scrape) > 0 {
		meta.ScrapeIntervalNS, meta.MetricsFile = int64(o.ScrapeInterval), filepath.Base(metricsPath)
	}
	journalPath := o.Output + results.JournalSuffix
	journal, err := results.CreateJournal(journalPath, &meta)
	if err != nil {
		return nil, err
	}
	scr, err := scrape.Start(ctx, scrape.Config{URLs: o.Scrape, Interval: o.ScrapeInterval, Insecure: o.Client.Options().Insecure,
		Flush: o.FlushInterval, RT: o.seams.scrapeRT}, r.clk, &meta, metricsPath)
	if err != nil {
		journal.Close()
		os.Remove(journalPath) // nothing was sent: no run to recover
		return nil, err
	}
	defer scr.Stop()
	r.prog.StartUnixNS.Store(meta.RunStartUnixNS)

	r.meta = &meta
	r.d = r.newDispatcher()

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

	newExecutor(r).run()
	r.stop(errScheduleEnd) // a no-op after an early stop; the preparer may be blocked on a full channel
	r.d.wg.Wait()          // the requests in flight end by themselves, or by the hard context
	scr.Stop()
	if r.sess != nil {
		<-r.feed.preparerDone // it records the turns of sessions ended by a failed turn
	}
	r.results.close()
	<-writerDone

	closeErr := journal.Close()
	var runErr error
	if e := r.prepErr.Load(); e != nil {
		runErr = *e
	}
	s := sum.finish()
	s.Scrapes = scr.Stats()
	if err := convert(o, journalPath, metricsPath, scr, errors.Join(writeErr, closeErr)); err != nil {
		return s, errors.Join(runErr, err)
	}
	s.Run = meta
	if r.sess != nil {
		s.Sessions = o.Sessions
		s.HistoryLonger = r.sess.short
	}
	return s, runErr
}

// newRunner returns the runner of o, a valid Options, before its start.
func newRunner(o Options) (*runner, error) {
	r := &runner{o: o, prog: o.Progress, tr: o.Client.Transport(), results: newResultQueue()}
	if r.prog == nil {
		r.prog = new(Progress)
	}
	if o.seams.do != nil {
		r.tr = funcTransport(o.seams.do)
	}
	if o.Sessions == SessionsDAG {
		// The open-loop sessions executor dispatches the calls: open counts those not yet
		// ended, so the run waits for the last one.
		r.sess = &sessions{convs: map[int64]*conv{}, wake: make(chan bool, 1), agents: o.AgentPlan, open: o.AgentPlan.Calls}
	}
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
	}
	return r, nil
}

// newDispatcher returns the run's dispatcher, once its clock and run id are fixed.
func (r *runner) newDispatcher() *dispatcher {
	d := &dispatcher{clk: r.clk, hard: r.hard, stopped: r.stopped, tr: r.tr, prog: r.prog, results: r.results, runID: r.runID,
		maxInflight: int64(r.o.MaxInflight), maxLateness: int64(r.o.MaxLateness), shard: r.o.Shard, maxLine: r.o.Client.Options().MaxLine,
		noSpin: r.o.seams.noSpin, ended: r.o.seams.ended}
	d.split, _ = r.tr.(transport.SplitTransport)
	if r.sess != nil {
		d.turnEnded = r.feed.turnEnded
	}
	return d
}

// runMeta returns the metadata of a run of o that starts at start with id runID.
func runMeta(o Options, mode string, start time.Time, runID string) results.RunMeta {
	meta := o.Meta
	meta.Mode = mode
	if mode == results.ModeClosed {
		meta.RampUpNS = int64(o.RampUp)
	}
	meta.RunStartUnixNS = start.UnixNano()
	if meta.ShardCount == 0 {
		meta.ShardCount = 1
	}
	meta.RunID = runID
	if meta.Repeat > 0 && meta.RepeatGroup == "" {
		meta.RepeatGroup = meta.RunID // the first repeat names its group
	}
	if meta.MaxLatenessMS == 0 {
		meta.MaxLatenessMS = float64(o.MaxLateness) / 1e6
	}
	if meta.Flags == nil {
		meta.Flags = map[string]string{}
	}
	if len(o.Scrape) > 0 {
		meta.Scrape = make([]string, len(o.Scrape))
		for i, u := range o.Scrape {
			meta.Scrape[i] = wire.SafeURL(u)
		}
	}
	return meta
}

// convert turns the closed journal of a run of o into its results file and, when it
// scraped, the metrics journal into the metrics file; journalErr is the journal's
// writing's. Each journal is removed once converted (but with KeepJournal), or kept for
// recover, which the error then says.
func convert(o Options, journalPath, metricsPath string, scr *scrape.Run, journalErr error) error {
	if journalErr != nil {
		return errors.Join(journalErr, KeptJournalError(journalPath, o.Output))
	}
	info, err := results.ConvertJournal(journalPath, o.Output)
	if err != nil {
		return errors.Join(err, KeptJournalError(journalPath, o.Output))
	}
	if info.Tail != nil {
		return fmt.Errorf("replay: %w", info.Tail)
	}
	if !o.KeepJournal {
		os.Remove(journalPath)
	}
	if !scr.Scraping() {
		return nil
	}
	// The results file is written; a metrics file that cannot be is an error of the run,
	// its journal kept for recover.
	metricsErr := scr.Err()
	if metricsErr == nil {
		_, metricsErr = results.ConvertMetricsJournal(metricsPath+results.JournalSuffix, metricsPath)
	}
	if metricsErr != nil {
		return errors.Join(metricsErr, fmt.Errorf("replay: the results file %s is written; the server samples are kept in %s: `llmreplay recover %s` turns them into %s",
			o.Output, metricsPath+results.JournalSuffix, shellQuote(metricsPath+results.JournalSuffix), metricsPath))
	}
	if !o.KeepJournal {
		os.Remove(metricsPath + results.JournalSuffix)
	}
	return nil
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

// runner is one run: its set-up, stop contexts, journal writer and summary. Its preparer
// (feed.go) reads the trace ahead, its executor (executor.go) schedules the requests, and
// its dispatcher (dispatcher.go) sends them through its transport (package transport).
type runner struct {
	o    Options
	clk  transport.Clock
	prog *Progress
	meta *results.RunMeta
	tr   transport.Transport // the client's, or seams.do's
	d    *dispatcher         // set once the run's clock and id are

	// hard, when canceled, cancels every request in flight; graceful, derived from it,
	// ends dispatching. stopped is graceful.Done(), fetched once for the hot loops.
	hard, graceful             context.Context
	cancelHard, cancelGraceful context.CancelCauseFunc
	stopped                    <-chan struct{}
	graceOnce                  sync.Once
	graceTimer                 *time.Timer // armed by the first early stop

	// runID is the run id once the run start is fixed (before the preparer starts when
	// Options.Start is given, else once the look-ahead is prepared), for the dispatcher;
	// setRunID gives it to the preparer too.
	runID   string
	feed    *feed
	results *resultQueue
	prepErr atomic.Pointer[error]

	sess *sessions // sequential sessions; nil otherwise
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
// dispatcher, and returns it.
func (r *runner) setRunID(meta results.RunMeta, start time.Time) string {
	if r.runID == "" {
		id := results.RunID(start.UnixNano(), meta.TraceSHA256, max(meta.ShardCount, 1)) // runIDLen long (TestRunIDLen)
		r.runID = id
		r.feed.preparedRunID.Store(&id)
	}
	return r.runID
}

func (r *runner) fail(err error) {
	r.prepErr.CompareAndSwap(nil, &err)
	r.stop(err)
}

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
