package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
)

const msNS = int64(time.Millisecond)

func okResult(id, sent, first int64, chunks ...int64) results.Result {
	return results.Result{RequestID: id, Status: results.StatusOK, SentNS: sent, FirstTokenNS: first, ChunkNS: chunks, EndNS: first}
}

func TestJoinServerLog(t *testing.T) {
	const start = int64(1_796_000_000_000_000_000)
	meta := &results.RunMeta{RunID: "00000000000000ab", RunStartUnixNS: start}
	res := []results.Result{
		// sent at 1 ms; first chunk 52 ms after; chunks 10.5 and 9.5 ms apart.
		okResult(0, 1*msNS, 53*msNS, 52*msNS, 62*msNS+msNS/2, 72*msNS),
		okResult(1, 2*msNS, 60*msNS, 58*msNS), // not in the log
		{RequestID: 2, Status: results.StatusHTTPError, SentNS: 3 * msNS, FirstTokenNS: results.Null, EndNS: results.Null},
		okResult(3, 4*msNS, 60*msNS, 56*msNS),                   // in the log without the server stamps
		okResult(4, 5*msNS, 58*msNS, 53*msNS, 63*msNS),          // two chunks, three writes: no ITL
		okResult(5, 6*msNS, 60*msNS, 54*msNS, 64*msNS, 74*msNS), // three tokens, the writes four
		// Three chunks of a token: the first write carried two (the sim was behind).
		okResult(6, 7*msNS, 61*msNS, 54*msNS, 54*msNS, 66*msNS),
		// Chunks of 2 and 1 tokens against writes of 1 and 2: a chunk would straddle two writes.
		okResult(7, 8*msNS, 60*msNS, 52*msNS, 62*msNS),
	}
	res[5].ChunkTokens = []int32{1, 1, 1}
	res[7].ChunkTokens = []int32{2, 1}
	read0 := start + 1*msNS + msNS/5 // 0.2 ms on the way
	fw0 := read0 + 51*msNS           // the server's TTFT: 51 ms
	read4, fw4 := start+5*msNS+msNS, start+5*msNS+53*msNS
	read5, fw5 := start+6*msNS, start+6*msNS+54*msNS
	lines := []string{
		fmt.Sprintf(`{"request_id":"00000000000000ab-0","outcome":"ok","stream":true,"read_unix_ns":%d,"first_write_unix_ns":%d,"write_unix_ns":[%d,%d,%d],"write_tokens":[1,1,1]}`,
			read0, fw0, fw0, fw0+10*msNS, fw0+20*msNS),
		`{"request_id":"00000000000000ab-3","outcome":"ok","stream":true}`,
		fmt.Sprintf(`{"request_id":"00000000000000ab-4","outcome":"ok","stream":true,"read_unix_ns":%d,"first_write_unix_ns":%d,"write_unix_ns":[%d,%d,%d]}`,
			read4, fw4, fw4, fw4+10*msNS, fw4+20*msNS),
		fmt.Sprintf(`{"request_id":"00000000000000ab-5","outcome":"ok","stream":true,"read_unix_ns":%d,"first_write_unix_ns":%d,"write_unix_ns":[%d,%d,%d],"write_tokens":[1,2,1]}`,
			read5, fw5, fw5, fw5+10*msNS, fw5+20*msNS),
		fmt.Sprintf(`{"request_id":"00000000000000ab-6","outcome":"ok","stream":true,"read_unix_ns":%d,"first_write_unix_ns":%d,"write_unix_ns":[%d,%d],"write_tokens":[2,1]}`,
			start+7*msNS, start+61*msNS, start+61*msNS, start+71*msNS),
		fmt.Sprintf(`{"request_id":"00000000000000ab-7","outcome":"ok","stream":true,"read_unix_ns":%d,"first_write_unix_ns":%d,"write_unix_ns":[%d,%d],"write_tokens":[1,2]}`,
			start+8*msNS, start+60*msNS, start+60*msNS, start+70*msNS),
		fmt.Sprintf(`{"request_id":"ffffffffffffffff-0","outcome":"ok","read_unix_ns":%d,"first_write_unix_ns":%d}`, read0, fw0), // another run
		``,
		`{"outcome":"bad_request","status":400}`,
	}
	l, err := readServerLog(strings.NewReader(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	if l.lines != 9 || l.stamped != 6 || l.writes != 5 || len(l.byID) != 7 {
		t.Fatalf("log: %d lines, %d stamped, %d with writes, %d ids; want 9, 6, 5, 7", l.lines, l.stamped, l.writes, len(l.byID))
	}
	j := joinServerLog(res, meta, l, 50*time.Millisecond)
	if j.OK != 7 || j.Joined != 5 {
		t.Fatalf("ok %d joined %d, want 7 and 5", j.OK, j.Joined)
	}
	// Paired: 0 (a token a write) and 6 (by token count); not: 4 (no write_tokens), 5
	// (totals differ), 7 (a straddling chunk).
	if j.ITLStreams != 2 || j.ITLSkipped != 3 {
		t.Errorf("ITL streams %d skipped %d, want 2 and 3", j.ITLStreams, j.ITLSkipped)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Request 0: client TTFT 52, server 51 -> 1 ms; request 4: 53 - 52 = 1;
	// requests 5, 6, 7: 0.
	near("own TTFT error max", j.OwnTTFTErr.Max, 1)
	near("own TTFT error p50", j.OwnTTFTErr.P50, 0)
	// The sim: 51-50, 52-50, 54-50, 54-50, 52-50.
	near("sim first-write lateness p50", j.SimFirstLate.P50, 2)
	near("sim first-write lateness max", j.SimFirstLate.Max, 4)
	// Legs: request 0 took 0.2 ms to arrive and 0.8 ms back; request 4 1 and 0; the others
	// 0 and 0. Their sums are the own errors.
	near("send leg max", j.SendLeg.Max, 1)
	near("send leg p50", j.SendLeg.P50, 0)
	near("receive leg max", j.RecvLeg.Max, 0.8)
	// ITL: request 0, 10.5 - 10 and 9.5 - 10; request 6, its second write reached the
	// client 12 ms after its first (chunk 2 at 66 vs chunk 0 at 54), 10 ms apart at the sim.
	if j.ITLErr.N != 3 {
		t.Fatalf("ITL samples %d, want 3", j.ITLErr.N)
	}
	near("ITL error max", j.ITLErr.Max, 2)
	near("ITL error p50", j.ITLErr.P50, 0.5)
}

// A log from a sim without the server-stamp fields joins nothing: the harness then says the
// server record is unavailable.
func TestJoinServerLogWithoutStamps(t *testing.T) {
	meta := &results.RunMeta{RunID: "r", RunStartUnixNS: 1}
	l, err := readServerLog(strings.NewReader(`{"request_id":"r-0","outcome":"ok","stream":true,"first_ns":5}` + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	j := joinServerLog([]results.Result{okResult(0, 1, 2, 1)}, meta, l, 0)
	if j.OK != 1 || j.Joined != 0 || l.stamped != 0 || j.OwnTTFTErr.N != 0 {
		t.Fatalf("got ok %d joined %d stamped %d, want 1 0 0", j.OK, j.Joined, l.stamped)
	}
	if s := j.OwnTTFTErr.String(); s != "none" {
		t.Errorf("empty dist prints %q", s)
	}
}

func TestReadServerLogBadLine(t *testing.T) {
	_, err := readServerLog(strings.NewReader("{\"request_id\":\"a-1\"}\n{not json\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("err = %v, want one naming line 2", err)
	}
}

func TestSummarize(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i) // 100 .. 1, unsorted
	}
	d := summarize(xs)
	if d.N != 100 || d.P50 != 50.5 || math.Abs(d.P99-99.01) > 1e-9 || d.Max != 100 {
		t.Fatalf("summarize(1..100) = %+v, want p50 50.5 p99 99.01 max 100", d)
	}
	if d := summarize(nil); d.N != 0 {
		t.Fatalf("summarize(nil) = %+v", d)
	}
	if m := median([]float64{3, 1, 2, 10}); m != 2.5 {
		t.Fatalf("median = %v, want 2.5", m)
	}
	if !math.IsNaN(median(nil)) {
		t.Fatal("median of nothing is not NaN")
	}
}

// A line with the kernel's arrival stamp is joined on it: the server's TTFT, the sim's
// lateness and the request leg start at the arrival, and the sim's read comes after.
func TestJoinServerLogArrival(t *testing.T) {
	const start = int64(1_796_000_000_000_000_000)
	meta := &results.RunMeta{RunID: "00000000000000ab", RunStartUnixNS: start}
	// Sent at 1 ms, arrived 0.1 ms later, read 3 ms after that; first write 50.5 ms after
	// the arrival, first chunk at the client 0.2 ms after the write.
	arrive := start + msNS + msNS/10
	read, fw := arrive+3*msNS, arrive+50*msNS+msNS/2
	res := []results.Result{okResult(0, msNS, fw+msNS/5-start, fw+msNS/5-start-msNS)}
	line := fmt.Sprintf(`{"request_id":"00000000000000ab-0","outcome":"ok","stream":true,"arrive_unix_ns":%d,"read_unix_ns":%d,"first_write_unix_ns":%d}`, arrive, read, fw)
	l, err := readServerLog(strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	j := joinServerLog(res, meta, l, 50*time.Millisecond)
	if j.Joined != 1 || j.Arrived != 1 {
		t.Fatalf("joined %d arrived %d, want 1 and 1", j.Joined, j.Arrived)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"own TTFT error", j.OwnTTFTErr.Max, 0.3},
		{"request leg", j.SendLeg.Max, 0.1},
		{"first-chunk leg", j.RecvLeg.Max, 0.2},
		{"sim first-write lateness", j.SimFirstLate.Max, 0.5},
		{"sim read after arrival", j.SimRead.Max, 3},
	} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s = %v ms, want %v", c.name, c.got, c.want)
		}
	}
}
