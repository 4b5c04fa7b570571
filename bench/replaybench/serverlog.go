package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/stats"
)

// serverRecord is what replaybench reads of one line of `llmreplay sim --request-log`
// (sim/reqlog.go LogRecord: the server's own record of each request, joined to the
// client's by X-Request-Id so that TTFT error splits into the replayer's and the sim's).
// The *_unix_ns stamps are
// CLOCK_REALTIME: arrive_unix_ns when the request's bytes reached the sim's socket (the
// kernel's receive timestamp; since 2026-12-03), read_unix_ns when the read that
// delivered the request's head returned,
// first_write_unix_ns just before the write(2) carrying the first token, and with
// --request-log-writes every body write that carried tokens with its token count.
type serverRecord = sim.LogRecord

// serverLog is a request log read into memory, keyed by X-Request-Id.
type serverLog struct {
	byID        map[string]*serverRecord
	lines       int // lines read
	read, first int // lines with read_unix_ns, with first_write_unix_ns
	stamped     int // lines with both
	writes      int // lines with write_unix_ns
}

// readServerLog reads a sim request log (JSON lines). A line that is not JSON is an error
// naming its line number; a line without a request id is counted and skipped.
func readServerLog(r io.Reader) (*serverLog, error) {
	l := &serverLog{byID: map[string]*serverRecord{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // a line with every write of a long stream is long
	for sc.Scan() {
		l.lines++
		if len(sc.Bytes()) == 0 {
			continue
		}
		rec := new(serverRecord)
		if err := json.Unmarshal(sc.Bytes(), rec); err != nil {
			return nil, fmt.Errorf("request log line %d: %w", l.lines, err)
		}
		if rec.ReadUnixNs > 0 {
			l.read++
		}
		if rec.FirstWriteUnixNs > 0 {
			l.first++
		}
		if rec.ReadUnixNs > 0 && rec.FirstWriteUnixNs > 0 {
			l.stamped++
		}
		if len(rec.WriteUnixNs) > 0 {
			l.writes++
		}
		if rec.RequestID != "" {
			l.byID[rec.RequestID] = rec
		}
	}
	return l, sc.Err()
}

// dist is a distribution's summary in milliseconds: type-7 percentiles, as every report.
type dist struct {
	N             int
	P50, P99, Max float64
}

func summarize(ms []float64) dist {
	if len(ms) == 0 {
		return dist{}
	}
	slices.Sort(ms)
	return dist{N: len(ms), P50: stats.Type7(ms, 0.5), P99: stats.Type7(ms, 0.99), Max: ms[len(ms)-1]}
}

func (d dist) String() string {
	if d.N == 0 {
		return "none"
	}
	return fmt.Sprintf("p50 %.3f p99 %.3f max %.3f", d.P50, d.P99, d.Max)
}

// serverJoin is the replayer's own error against the server's record of the same requests.
// Every figure is in milliseconds.
type serverJoin struct {
	OK     int // results with status ok and a TTFT
	Joined int // of them, found in the log with both server stamps

	// Arrived is how many joined lines have arrive_unix_ns: the server's instant of a
	// request is its arrival (the kernel's stamp) where it has one, else its read.
	Arrived int

	// OwnTTFTErr is client TTFT (first_token_ns - sent_ns, run clock) minus server TTFT
	// (first_write_unix_ns - the request's arrival): what the replayer adds to a TTFT.
	OwnTTFTErr dist
	// SimFirstLate is first_write - (arrival + nominal TTFT): the sim's own lateness.
	SimFirstLate dist
	// SimRead is read_unix_ns - arrive_unix_ns: how long after its bytes arrived the sim's
	// read of a request returned (its goroutine's wake-up and a P): no longer part of any
	// figure above, since the sim's schedule starts at the arrival.
	SimRead dist
	// SendLeg is arrival - (run_start_unix_ns + sent_ns) and RecvLeg is
	// (run_start_unix_ns + first_token_ns) - first_write_unix_ns, each on CLOCK_REALTIME
	// (the run clock is CLOCK_MONOTONIC from run_start_unix_ns, so a wall-clock step during
	// the run shifts them; their sum is OwnTTFTErr exactly).
	SendLeg, RecvLeg dist
	// ITLErr is, per token-carrying server write after the first, the gap between the
	// client's arrivals of it and of the write before (writeArrivals) minus the gap between
	// the two writes at the server, for the streams whose chunks pair with the writes by
	// token count (ITLStreams of them; ITLSkipped did not).
	ITLErr                 dist
	ITLStreams, ITLSkipped int
}

// joinServerLog joins ok results to the log by X-Request-Id = RUNID-ID (transport.RequestIDHeader)
// and computes the replayer's own errors against the server's stamps.
func joinServerLog(res []results.Result, meta *results.RunMeta, l *serverLog, nominalTTFT time.Duration) serverJoin {
	var j serverJoin
	var own, late, send, recv, itl, simRead []float64
	prefix := meta.RunID + "-"
	for i := range res {
		r := &res[i]
		if r.Status != results.StatusOK || r.SentNS == results.Null || r.FirstTokenNS == results.Null {
			continue
		}
		j.OK++
		s := l.byID[prefix+strconv.FormatInt(r.RequestID, 10)]
		if s == nil || s.ReadUnixNs <= 0 || s.FirstWriteUnixNs <= 0 {
			continue
		}
		j.Joined++
		arrival := s.ReadUnixNs
		if s.ArriveUnixNs > 0 {
			j.Arrived++
			arrival = s.ArriveUnixNs
			simRead = append(simRead, ms(s.ReadUnixNs-s.ArriveUnixNs))
		}
		clientTTFT := r.FirstTokenNS - r.SentNS
		serverTTFT := s.FirstWriteUnixNs - arrival
		own = append(own, ms(clientTTFT-serverTTFT))
		late = append(late, ms(serverTTFT-int64(nominalTTFT)))
		send = append(send, ms(arrival-(meta.RunStartUnixNS+r.SentNS)))
		recv = append(recv, ms(meta.RunStartUnixNS+r.FirstTokenNS-s.FirstWriteUnixNs))
		if len(s.WriteUnixNs) == 0 {
			continue
		}
		at, ok := writeArrivals(r, s)
		if !ok {
			j.ITLSkipped++
			continue
		}
		j.ITLStreams++
		for k := 1; k < len(at); k++ {
			itl = append(itl, ms((at[k]-at[k-1])-(s.WriteUnixNs[k]-s.WriteUnixNs[k-1])))
		}
	}
	j.OwnTTFTErr, j.SimFirstLate = summarize(own), summarize(late)
	j.SendLeg, j.RecvLeg, j.ITLErr = summarize(send), summarize(recv), summarize(itl)
	j.SimRead = summarize(simRead)
	return j
}

// writeArrivals returns, for each of s's token-carrying writes, when its first token
// reached the client (an offset from sent_ns, as r.ChunkNS). It pairs them by token
// count: write k carried write_tokens[k] tokens, and r's output chunks carry
// r.ChunkTokens each (one each when the client did not learn it, as from the fixed sim),
// so the first token of write k is in the client chunk that holds token sum(write_tokens[:k]).
// ok is false when the totals differ or a client chunk would straddle two writes.
func writeArrivals(r *results.Result, s *serverRecord) (at []int64, ok bool) {
	if len(s.WriteUnixNs) == 0 || len(s.WriteTokens) != len(s.WriteUnixNs) || len(r.ChunkNS) == 0 {
		return nil, false
	}
	tok := func(j int) int { return 1 }
	if len(r.ChunkTokens) == len(r.ChunkNS) {
		tok = func(j int) int { return int(r.ChunkTokens[j]) }
	}
	total, wtotal := 0, 0
	for j := range r.ChunkNS {
		total += tok(j)
	}
	for _, n := range s.WriteTokens {
		wtotal += n
	}
	if total != wtotal {
		return nil, false
	}
	at = make([]int64, len(s.WriteUnixNs))
	j, before, first := 0, 0, 0 // before: tokens in the chunks ahead of j; first: write k's first token
	for k, n := range s.WriteTokens {
		for before+tok(j) <= first {
			before += tok(j)
			j++
		}
		if before != first {
			return nil, false
		}
		at[k] = r.ChunkNS[j]
		first += n
	}
	return at, true
}

func ms(ns int64) float64 { return float64(ns) / 1e6 }

// median returns the type-7 median of xs, NaN for none (xs is not modified).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return stats.Type7(s, 0.5)
}
