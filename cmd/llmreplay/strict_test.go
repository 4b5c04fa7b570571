package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/analysis"
	"github.com/llmreplay/llmreplay/replay"
	"github.com/llmreplay/llmreplay/replay/results"
)

// writeLatenessRun writes a results file of ok requests, one per lateness (ms), due 10 ms
// apart, with a 10 ms client-limited bound in its metadata.
func writeLatenessRun(t *testing.T, lateMS []float64) string {
	t.Helper()
	dir := t.TempDir()
	jpath, out := filepath.Join(dir, "r.parquet.journal"), filepath.Join(dir, "r.parquet")
	j, err := results.CreateJournal(jpath, &results.RunMeta{RunID: "boundary", Mode: results.ModeOpen, MaxLatenessMS: 10,
		RunStartUnixNS: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC).UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range lateMS {
		sched := int64(i) * 10e6
		sent := sched + int64(l*1e6)
		r := &results.Result{RequestID: int64(i), ScheduledNS: sched, SentNS: sent, FirstTokenNS: sent + 5e6, FirstAnswerNS: sent + 5e6, EndNS: sent + 9e6,
			ChunkNS: []int64{5e6, 9e6}, PromptTokens: 10, PromptTokensServer: results.Null, OutputTokensTarget: 2,
			OutputTokens: 2, OutputTokensSource: results.SourceUsage, Status: results.StatusOK, HTTPStatus: 200}
		if err := j.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := results.ConvertJournal(jpath, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStrictAgreesWithReport: runs built so that nearest-rank and type-7 p99 of the
// lateness fall on opposite sides of the 10 ms bound. --strict exits 3 exactly when the
// report printed above it says client-limited, from the report and, when there is no
// report, from the run's own lateness values by the same definition.
func TestStrictAgreesWithReport(t *testing.T) {
	ones := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	yesno := map[bool]string{true: "YES", false: "no"} // as the text report prints it
	for _, c := range []struct {
		name    string
		late    []float64
		limited bool
	}{
		// n=100: type-7 p99 = x98 + 0.01(x99−x98) = 10.91 ms; nearest rank x98 = 9 ms.
		{"type7 above, nearest rank below", append(ones(98), 9, 200), true},
		// n=50: type-7 p99 = x48 + 0.51(x49−x48) = 8.14 ms; nearest rank x49 = 15 ms.
		{"type7 below, nearest rank above", append(ones(48), 1, 15), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeLatenessRun(t, c.late)
			var text bytes.Buffer
			rep, err := writeReport(context.Background(), path, &text)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Flags.ClientLimited != c.limited {
				t.Fatalf("report: client-limited %v (p99 %v ms), want %v", rep.Flags.ClientLimited, rep.Lateness.P99, c.limited)
			}
			wantLine := fmt.Sprintf("client-limited: %s", yesno[c.limited])
			if !bytes.Contains(text.Bytes(), []byte(wantLine)) {
				t.Fatalf("report text lacks %q:\n%s", wantLine, text.String())
			}
			sum := &replay.Summary{Mode: results.ModeOpen, LatenessMS: append([]float64(nil), c.late...), MaxLateness: 10 * time.Millisecond}
			for _, r := range []struct {
				from string
				rep  *analysis.Report
			}{{"report", rep}, {"summary (no report)", nil}} {
				err := strictCheck(new(bytes.Buffer), r.rep, sum, true)
				var ee *exitError
				if got := errors.As(err, &ee) && ee.code == 3; got != c.limited {
					t.Errorf("--strict from the %s: %v, but the report says client-limited: %s", r.from, err, yesno[c.limited])
				}
				if err := strictCheck(new(bytes.Buffer), r.rep, sum, false); err != nil {
					t.Errorf("without --strict: %v", err)
				}
			}
		})
	}
}

// writeClosedRun writes a closed-loop results file of len(first) workers with no ramp-up:
// their first requests, due at 0 and sent first[i] ms late, then one request per steady
// value, due 10 ms apart from 100 ms and sent that many ms late.
func writeClosedRun(t *testing.T, first, steady []float64) string {
	t.Helper()
	dir := t.TempDir()
	jpath, out := filepath.Join(dir, "r.parquet.journal"), filepath.Join(dir, "r.parquet")
	j, err := results.CreateJournal(jpath, &results.RunMeta{RunID: "closed", Mode: results.ModeClosed, Concurrency: len(first), MaxLatenessMS: 10,
		RunStartUnixNS: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC).UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	add := func(id, sched int64, lateMS float64) {
		sent := sched + int64(lateMS*1e6)
		r := &results.Result{RequestID: id, ScheduledNS: sched, SentNS: sent, FirstTokenNS: sent + 5e6, FirstAnswerNS: sent + 5e6, EndNS: sent + 9e6,
			ChunkNS: []int64{5e6, 9e6}, PromptTokens: 10, PromptTokensServer: results.Null, OutputTokensTarget: 2,
			OutputTokens: 2, OutputTokensSource: results.SourceUsage, Status: results.StatusOK, HTTPStatus: 200}
		if err := j.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	for i, l := range first {
		add(int64(i), 0, l)
	}
	for i, l := range steady {
		add(int64(len(first)+i), 100e6+int64(i)*10e6, l)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := results.ConvertJournal(jpath, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStrictClosedLoopSteadyState: --strict follows the report, which judges a closed
// loop's steady state: a first wave sent over 30 ms passes, a late steady state exits 3.
func TestStrictClosedLoopSteadyState(t *testing.T) {
	wave := make([]float64, 64)
	for i := range wave {
		wave[i] = 30 * float64(i) / 63
	}
	fill := func(n int, v float64) []float64 {
		s := make([]float64, n)
		for i := range s {
			s[i] = v
		}
		return s
	}
	for _, c := range []struct {
		name    string
		steady  []float64
		limited bool
	}{
		{"calm steady state", fill(200, 0.2), false},
		{"late steady state", fill(200, 20), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeClosedRun(t, wave, c.steady)
			var text bytes.Buffer
			rep, err := writeReport(context.Background(), path, &text)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Closed == nil || rep.Flags.ClientLimited != c.limited {
				t.Fatalf("report: closed %v, client-limited %v, want %v\n%s", rep.Closed, rep.Flags.ClientLimited, c.limited, text.String())
			}
			err = strictCheck(new(bytes.Buffer), rep, &replay.Summary{Mode: results.ModeClosed, MaxLateness: 10 * time.Millisecond}, true)
			var ee *exitError
			if got := errors.As(err, &ee) && ee.code == 3; got != c.limited {
				t.Errorf("--strict: %v, want exit 3 = %v", err, c.limited)
			}
			if c.limited && !strings.Contains(err.Error(), "steady-state schedule lateness (after the closed loop's first wave) p99 20.000 ms") {
				t.Errorf("--strict error does not name its basis: %v", err)
			}
		})
	}
}
