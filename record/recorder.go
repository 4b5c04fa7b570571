package record

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/wire"
)

// Options configure a Recorder.
type Options struct {
	Dir      string   // where the trace, results and journals go
	Upstream *url.URL // the endpoint recorded, for the run metadata (stored without credentials)
	// Rotate starts new files every Rotate of the recording (by arrival); 0: one pair of
	// files for the whole recording.
	Rotate time.Duration
	// Sample is the share of sessions recorded, in (0, 1]: a session is in or out as a
	// whole, decided by a salted hash of its id.
	Sample float64
	// SessionHeader names the request header that carries a session id; "": none.
	SessionHeader string
	Encoding      *tokenize.Encoding // counts prompt tokens and cuts prefix blocks
	BlockTokens   int                // tokens per prefix block
	CacheTokens   int                // the parser's per-message token cache, in tokens
	Workers       int                // parsers; 0: GOMAXPROCS
	Queue         int                // exchanges waiting for a parser; a full queue drops recordings; 0: 65,536
	SessionIdle   time.Duration      // a session unseen for this long is forgotten; 0: 1h
	ToolVersion   string
	Flags         map[string]string // the command's flags, secrets left out, for the run metadata
	Log           io.Writer         // progress and warnings (never a body, header or key); nil: none
	Salt          [32]byte          // zero: a random one, never written anywhere
}

// Recorder turns the exchanges the proxy passes into trace rows and production results,
// off the requests' path.
type Recorder struct {
	o         Options
	start     time.Time
	startUnix int64
	parser    *Parser
	sessions  *Sessions
	clients   map[wire.API]*transport.Client
	salt      [32]byte

	work  chan *exchange
	ready chan *exchange

	mu       sync.Mutex // guards what follows
	endSeq   int64
	inflight map[int]int   // exchanges begun and not yet linked, by rotation
	first    map[int]int64 // the first arrival of each rotation: its files' time 0
	nextID   int64
	count    Counts

	workers  sync.WaitGroup
	linked   chan struct{} // closed when the linker has finished
	segs     map[int]*segment
	recorded map[int64]recorded // of recorded requests, for the calls that continue them
	finals   chan *segment
	finished chan struct{}
	files    []string
	errs     []error
	closed   bool
}

// Counts are what the recorder did with the requests it saw.
type Counts struct {
	Requests   int64            // requests to a recorded API
	Recorded   int64            // written to the trace and the results
	Passed     int64            // requests to other paths, passed on unrecorded
	SampledOut int64            // in a session --sample left out
	Dropped    int64            // not recorded: the recorder's queue was full
	Skipped    map[string]int64 // not recorded, by reason
}

// NewRecorder starts a recorder writing into o.Dir.
func NewRecorder(o Options) (*Recorder, error) {
	if o.Sample <= 0 || o.Sample > 1 {
		return nil, fmt.Errorf("record: sample %v is not in (0, 1]", o.Sample)
	}
	if o.Rotate < 0 {
		return nil, fmt.Errorf("record: rotate %v is negative", o.Rotate)
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Queue <= 0 {
		o.Queue = 1 << 16
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = time.Hour
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	salt := o.Salt
	if salt == ([32]byte{}) {
		if _, err := rand.Read(salt[:]); err != nil {
			return nil, fmt.Errorf("record: salt: %w", err)
		}
	}
	o.Salt = [32]byte{} // the options may be logged or copied; the salt stays in r.salt
	parser, err := NewParser(ParserOptions{Salt: salt, Encoding: o.Encoding, BlockTokens: o.BlockTokens, CacheTokens: o.CacheTokens})
	if err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	r := &Recorder{
		o: o, salt: salt, start: time.Now(), parser: parser,
		sessions: NewSessions(o.SessionIdle, 1<<20),
		clients:  map[wire.API]*transport.Client{},
		work:     make(chan *exchange, o.Queue),
		ready:    make(chan *exchange, o.Workers),
		inflight: map[int]int{},
		first:    map[int]int64{},
		count:    Counts{Skipped: map[string]int64{}},
		linked:   make(chan struct{}),
		segs:     map[int]*segment{},
		recorded: map[int64]recorded{},
		finals:   make(chan *segment, 16),
		finished: make(chan struct{}),
	}
	r.startUnix = r.start.UnixNano()
	for _, api := range apiPaths {
		// A client per API reads its responses as the replayer does; it never sends.
		c, err := transport.NewClient(transport.ClientOptions{
			BaseURL: o.Upstream, API: api, Backend: wire.BackendVLLM, Model: "recorded", HTTPClient: transport.HTTPClientNetHTTP,
			CountTokens: o.Encoding.Count,
		})
		if err != nil {
			return nil, fmt.Errorf("record: %w", err)
		}
		r.clients[api] = c
	}
	for range o.Workers {
		r.workers.Add(1)
		go r.parse()
	}
	go r.link()
	go r.finalize()
	return r, nil
}

// now is the recording's clock: nanoseconds since it started (monotonic).
func (r *Recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *Recorder) client(api wire.API) *transport.Client { return r.clients[api] }

// rotation returns the rotation a run-clock time falls in, and its start.
func (r *Recorder) rotation(t int64) (int, int64) {
	if r.o.Rotate <= 0 {
		return 0, 0
	}
	i := t / int64(r.o.Rotate)
	return int(i), i * int64(r.o.Rotate)
}

// passed counts a request passed on unrecorded.
func (r *Recorder) passed() {
	r.mu.Lock()
	r.count.Passed++
	r.mu.Unlock()
}

// pass counts a request of no recorded API and returns the exchange its relay passes it
// on with; nothing of it is recorded.
func (r *Recorder) pass(ctx context.Context) *exchange {
	r.passed()
	return &exchange{rec: r, ctx: ctx, pass: true}
}

// begin starts the exchange of a request the proxy has just received.
func (r *Recorder) begin(api wire.API, req *http.Request) *exchange {
	// The arrival is stamped and counted under the lock, so that ids follow arrivals and
	// rotate never finds a rotation over while a request that arrived in it is uncounted.
	r.mu.Lock()
	arrival := r.now()
	seg, _ := r.rotation(arrival)
	if _, ok := r.first[seg]; !ok {
		r.first[seg] = arrival
	}
	r.inflight[seg]++
	r.count.Requests++
	id := r.nextID
	r.nextID++
	r.mu.Unlock()
	ex := &exchange{rec: r, ctx: req.Context(), id: id, seg: seg, arrival: arrival, sent: results.Null, api: api, path: req.URL.Path}
	ex.res = *results.NewResult(id, 0, arrival, 0, 0)
	if r.o.SessionHeader != "" {
		ex.sessionValue = req.Header.Get(r.o.SessionHeader)
	}
	return ex
}

// finish hands an exchange whose handler is returning to the parsers, or counts why it is
// not recorded. It never blocks: a full queue drops the recording, never the request.
func (r *Recorder) finish(ex *exchange) {
	ex.finished = r.now()
	ex.settle()
	ex.res.SentNS = ex.sent
	r.mu.Lock()
	defer r.mu.Unlock()
	if ex.skip != "" {
		r.count.Skipped[ex.skip]++
		r.inflight[ex.seg]--
		return
	}
	if r.closed {
		r.count.Skipped["the recorder had stopped"]++
		r.inflight[ex.seg]--
		return
	}
	ex.endSeq = r.endSeq // before the send: a parser may have it at once
	select {
	case r.work <- ex:
		r.endSeq++
	default:
		r.count.Dropped++
		r.inflight[ex.seg]--
	}
}

// parse is one of the pool's parsers: the body into numbers and salted hashes, the keys
// of the session header and of the Responses API's response id. Only numbers leave it.
func (r *Recorder) parse() {
	defer r.workers.Done()
	for ex := range r.work {
		// After the response: its usage says whether the prompt still needs counting.
		ex.req, ex.perr = r.parser.ParseCounted(ex.path, ex.body, ex.res.PromptTokensServer)
		ex.body = nil
		if ex.sessionValue != "" {
			ex.headerKey = r.parser.Key(ex.sessionValue)
			ex.sessionValue = ""
		}
		if ex.tap != nil {
			if id := ex.tap.ResponseID(); id != "" {
				ex.respKey = r.parser.Key(id)
			}
		}
		r.ready <- ex
	}
}

// link takes the parsed exchanges in the order they ended: the sessions see a request
// only after every request that ended before it arrived, which a continuation needs (it
// carries its parent's answer, so its parent ended before it was sent).
func (r *Recorder) link() {
	defer close(r.linked)
	pending := map[int64]*exchange{}
	var next int64
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case ex, ok := <-r.ready:
			if !ok {
				r.rotate(true)
				close(r.finals)
				return
			}
			pending[ex.endSeq] = ex
			for e := pending[next]; e != nil; e = pending[next] {
				delete(pending, next)
				next++
				r.add(e)
			}
		case <-tick.C:
			r.flush()
			r.rotate(false)
		}
	}
}

// sampled decides whether a session is recorded: a salted hash of its id below the share.
func (r *Recorder) sampled(session int64) bool {
	if r.o.Sample >= 1 {
		return true
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(session))
	return float64(r.parser.Key(string(b[:]))>>11)/(1<<53) < r.o.Sample
}

// add records one linked exchange: its trace row and its results row.
func (r *Recorder) add(ex *exchange) {
	defer func() {
		r.mu.Lock()
		r.inflight[ex.seg]--
		r.mu.Unlock()
	}()
	if ex.perr != nil {
		r.skip("the request body is not one the recorder reads")
		return
	}
	link := r.sessions.Link(ex.id, ex.arrival, &ex.req, ex.headerKey)
	r.sessions.Ended(ex.id, ex.finished, &ex.req, ex.respKey)
	if !r.sampled(link.Session) {
		r.mu.Lock()
		r.count.SampledOut++
		r.mu.Unlock()
		return
	}
	seg, err := r.segment(ex.seg)
	if err != nil {
		r.fail(err)
		return
	}
	var parentEnd int64
	if link.Parent >= 0 {
		p, ok := r.recorded[link.Parent]
		if !ok || p.seg != ex.seg {
			// The parent is in an earlier file or was not recorded: a trace's parents
			// are rows of the same trace, so the call starts a chain of its own here.
			link.Parent = -1
		}
		parentEnd = p.end
	}
	row, res := rows(ex, link, parentEnd, seg.start, r.o.BlockTokens)
	if err := seg.add(row, res); err != nil {
		r.fail(err)
		return
	}
	r.remember(ex.id, recorded{seg: ex.seg, end: ex.finished})
	r.mu.Lock()
	r.count.Recorded++
	r.mu.Unlock()
}

// recorded is what a call continuing a recorded request needs of it.
type recorded struct {
	seg int   // its rotation
	end int64 // run clock when its response had passed
}

// remember keeps which rotation a recorded request is in, for the calls that continue it;
// the oldest million are forgotten past two million (a continuation comes within a
// session's idle time, long before).
func (r *Recorder) remember(id int64, rec recorded) {
	r.recorded[id] = rec
	if len(r.recorded) > 2<<20 {
		for k := range r.recorded {
			if k < id-1<<20 {
				delete(r.recorded, k)
			}
		}
	}
}

func (r *Recorder) skip(reason string) {
	r.mu.Lock()
	r.count.Skipped[reason]++
	r.mu.Unlock()
}

func (r *Recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		fmt.Fprintf(r.o.Log, "record: %v\n", err)
	}
	r.errs = append(r.errs, err)
}

// Close ends the recording after the server has stopped handing requests to the proxy:
// the recordings waiting are linked and written, and every rotation's files are written.
// It returns what the recorder did and the files written.
func (r *Recorder) Close() (Counts, []string, error) {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	close(r.work)
	r.workers.Wait()
	close(r.ready)
	<-r.linked
	<-r.finished
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.count
	c.Skipped = map[string]int64{}
	for k, v := range r.count.Skipped {
		c.Skipped[k] = v
	}
	return c, append([]string(nil), r.files...), errors.Join(r.errs...)
}

// Counts returns what the recorder has done so far.
func (r *Recorder) Counts() Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.count
	c.Skipped = nil
	return c
}
