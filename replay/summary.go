package replay

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/scrape"
	"github.com/llmreplay/llmreplay/stats"
)

// Summary is a short account of a run, computed while it goes: what `replay` prints when
// the full report (analysis, from the results file) cannot be produced, and what
// replaybench reads. It makes no client-limited verdict: that is analysis.ClientLimited's,
// over the report's lateness or, without a report, over LatenessMS.
type Summary struct {
	Mode        string
	Requests    int64                    // recorded requests
	ByStatus    map[results.Status]int64 // recorded requests by status
	OutputTok   int64                    // output tokens of ok requests
	FirstSentNS int64                    // results.Null when nothing was sent
	LastEndNS   int64                    // results.Null when no output arrived
	TTFT        Percentiles              // ms, ok requests
	// A run of embeddings or rerank (requests with inputs; no output): the ok requests'
	// inputs and prompt tokens, and their latency (end_ns - sent_ns) in ms.
	Inputs, PromptTok int64
	Latency           Percentiles
	// Lateness is sent_ns - scheduled_ns in ms: of every sent request in open loop; in closed
	// loop, of the steady state (the sent requests scheduled after the first wave), which
	// the client-limited decision judges there (docs/replay.md).
	Lateness    Percentiles
	LatenessMS  []float64       // the lateness values Lateness summarises, sorted ascending
	MaxLateness time.Duration   // the client-limited bound
	FirstWave   *FirstWave      // closed loop only; nil in open loop
	Run         results.RunMeta // the run metadata written to the results file
	// Sessions is SessionsSequential when turns waited for their predecessors, else "".
	// HistoryLonger counts the turns whose trace prompt_tokens was shorter than their
	// history plus one new token: they were sent longer (prompt_tokens says how long).
	Sessions      string
	HistoryLonger int64
	// SessionWait is session_wait_ns in ms of the turns that waited for their predecessor
	// beyond their trace time (N of them; sequential sessions).
	SessionWait Percentiles
	// Scrapes is what scraping each --scrape source came to (nil when the run scraped
	// nothing); ScrapeNotes prints it.
	Scrapes []scrape.Stat
}

// ScrapeNotes returns one line per source whose scrapes failed, were skipped or were not
// written: the once-per-run report of a failing metrics endpoint.
func (s *Summary) ScrapeNotes() []string {
	var notes []string
	for i := range s.Scrapes {
		if n := s.Scrapes[i].Note(); n != "" {
			notes = append(notes, n)
		}
	}
	return notes
}

// FirstWave is a closed loop's first wave: the recorded requests scheduled no later than
// the last worker's start (each worker's first request; with --ramp-up, every request
// scheduled during the ramp).
type FirstWave struct {
	LastStartNS int64       // the last worker's start on the run clock (0 without ramp-up)
	Requests    int64       // recorded requests of the first wave
	SendNS      int64       // run start to the last of them sent; results.Null when none was
	Lateness    Percentiles // ms, of those sent
}

// Percentiles of a sample by stats.Type7 (linear interpolation between closest ranks,
// the method every report names).
type Percentiles struct {
	N                  int
	P50, P90, P99, Max float64
}

// percentiles sorts x in place and returns its percentiles.
func percentiles(x []float64) Percentiles {
	if len(x) == 0 {
		return Percentiles{}
	}
	slices.Sort(x)
	return Percentiles{N: len(x), P50: stats.Type7(x, 0.5), P90: stats.Type7(x, 0.9), P99: stats.Type7(x, 0.99), Max: x[len(x)-1]}
}

// OutputTokensPerSecond is output tokens of ok requests / (last end - first sent), the
// overall throughput as vLLM's benchmark reports it.
func (s *Summary) OutputTokensPerSecond() float64 { return s.perSecond(s.OutputTok) }

// perSecond is n / (last end - first sent).
func (s *Summary) perSecond(n int64) float64 {
	if s.FirstSentNS == results.Null || s.LastEndNS == results.Null || s.LastEndNS <= s.FirstSentNS {
		return 0
	}
	return float64(n) / (float64(s.LastEndNS-s.FirstSentNS) / 1e9)
}

// WriteText prints the summary in a few lines.
func (s *Summary) WriteText(w io.Writer) error {
	var err error
	p := func(format string, a ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format, a...)
		}
	}
	p("requests: %d (%s loop)", s.Requests, s.Mode)
	for _, st := range []results.Status{results.StatusOK, results.StatusHTTPError, results.StatusTimeout, results.StatusTransportError, results.StatusStreamError, results.StatusDropped, results.StatusCanceled} {
		if n := s.ByStatus[st]; n > 0 {
			p(", %s %d", st, n)
		}
	}
	p("\n")
	if s.Inputs > 0 {
		p("inputs: %d, %.1f inputs/s; prompt: %d tokens, %.1f tok/s overall (ok requests; last end - first send)\n",
			s.Inputs, s.perSecond(s.Inputs), s.PromptTok, s.perSecond(s.PromptTok))
		p("latency ms: p50 %.1f  p90 %.1f  p99 %.1f  max %.1f  (n=%d, linear interpolation)\n", s.Latency.P50, s.Latency.P90, s.Latency.P99, s.Latency.Max, s.Latency.N)
	} else {
		p("output: %d tokens, %.1f tok/s overall (ok requests; last end - first send)\n", s.OutputTok, s.OutputTokensPerSecond())
	}
	if s.TTFT.N > 0 {
		p("TTFT ms: p50 %.1f  p90 %.1f  p99 %.1f  max %.1f  (n=%d, linear interpolation)\n", s.TTFT.P50, s.TTFT.P90, s.TTFT.P99, s.TTFT.Max, s.TTFT.N)
	}
	if fw := s.FirstWave; fw != nil {
		p("first wave: %d requests (scheduled <= %s, the last worker's start)", fw.Requests, fmtMS(fw.LastStartNS))
		if fw.SendNS != results.Null {
			p(", last sent at %s; lateness ms p50 %.3f  p99 %.3f  max %.3f", fmtMS(fw.SendNS), fw.Lateness.P50, fw.Lateness.P99, fw.Lateness.Max)
		}
		p("\n")
		if s.Lateness.N > 0 {
			p("schedule lateness ms, steady state (after the first wave; what client-limited judges): p50 %.3f  p99 %.3f  max %.3f\n", s.Lateness.P50, s.Lateness.P99, s.Lateness.Max)
		} else {
			p("schedule lateness, steady state (after the first wave; what client-limited judges): no request\n")
		}
		return err
	}
	if s.Lateness.N > 0 {
		p("schedule lateness ms: p50 %.3f  p99 %.3f  max %.3f\n", s.Lateness.P50, s.Lateness.P99, s.Lateness.Max)
	}
	if s.Sessions == SessionsSequential {
		p("sessions: sequential; %d turns waited for their predecessor's answer beyond their trace time", s.SessionWait.N)
		if s.SessionWait.N > 0 {
			p(" (session_wait ms: p50 %.1f  p99 %.1f  max %.1f)", s.SessionWait.P50, s.SessionWait.P99, s.SessionWait.Max)
		}
		p("\n")
	}
	if n := s.HistoryNote(); n != "" {
		p("%s\n", n)
	}
	return err
}

// HistoryNote says, when some turns' trace lengths did not leave room for their actual
// history, how many were sent longer; "" when none was.
func (s *Summary) HistoryNote() string {
	if s.HistoryLonger == 0 {
		return ""
	}
	return fmt.Sprintf("history: %d turns had a trace prompt_tokens shorter than their history + 1 new token; they were sent longer (prompt_tokens records what was sent)", s.HistoryLonger)
}

func fmtMS(ns int64) string { return fmt.Sprintf("%.3f ms", float64(ns)/1e6) }

// summary accumulates a Summary; owned by the writer goroutine.
type summary struct {
	s         Summary
	ttft      []float64
	lateness  []float64
	firstLate []float64 // closed loop: the first wave's lateness
	wait      []float64 // session_wait_ns > 0, ms
	latency   []float64 // requests with inputs (embeddings, rerank): end_ns - sent_ns, ms
}

// closedLoop makes a the summary of a closed loop whose last worker starts at lastStartNS:
// its lateness is the steady state's, and the first wave is reported apart.
func (a *summary) closedLoop(lastStartNS int64) {
	a.s.FirstWave = &FirstWave{LastStartNS: lastStartNS, SendNS: results.Null}
}

func newSummary(mode string, maxLate time.Duration) *summary {
	return &summary{s: Summary{Mode: mode, ByStatus: map[results.Status]int64{}, FirstSentNS: results.Null, LastEndNS: results.Null, MaxLateness: maxLate}}
}

func (a *summary) add(r *results.Result) {
	s := &a.s
	s.Requests++
	s.ByStatus[r.Status]++
	if r.SentNS != results.Null {
		if s.FirstSentNS == results.Null || r.SentNS < s.FirstSentNS {
			s.FirstSentNS = r.SentNS
		}
		late := float64(r.SentNS-r.ScheduledNS) / 1e6
		if fw := s.FirstWave; fw != nil && r.ScheduledNS <= fw.LastStartNS {
			a.firstLate = append(a.firstLate, late)
			if fw.SendNS == results.Null || r.SentNS > fw.SendNS {
				fw.SendNS = r.SentNS
			}
		} else {
			a.lateness = append(a.lateness, late)
		}
	}
	if fw := s.FirstWave; fw != nil && r.ScheduledNS <= fw.LastStartNS {
		fw.Requests++
	}
	if r.SessionWaitNS > 0 {
		a.wait = append(a.wait, float64(r.SessionWaitNS)/1e6)
	}
	if r.Status != results.StatusOK {
		return
	}
	if r.OutputTokens != results.Null {
		s.OutputTok += int64(r.OutputTokens)
	}
	if r.EndNS != results.Null && r.EndNS > s.LastEndNS {
		s.LastEndNS = r.EndNS
	}
	if v, ok := r.TTFT(); ok {
		a.ttft = append(a.ttft, v)
	}
	if r.Inputs != results.Null {
		s.Inputs += int64(r.Inputs)
		s.PromptTok += int64(r.PromptTokens)
		if v, ok := r.E2E(); ok {
			a.latency = append(a.latency, v)
		}
	}
}

func (a *summary) finish() *Summary {
	a.s.TTFT = percentiles(a.ttft)
	a.s.Latency = percentiles(a.latency)
	a.s.Lateness = percentiles(a.lateness)
	a.s.LatenessMS = a.lateness
	a.s.SessionWait = percentiles(a.wait)
	s := a.s
	if fw := a.s.FirstWave; fw != nil {
		c := *fw
		c.Lateness = percentiles(a.firstLate)
		s.FirstWave = &c
	}
	return &s
}
