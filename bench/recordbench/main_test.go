//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/trace"
)

// TestMain serves the upstream when the harness starts this test binary as its child
// (startUpstream runs os.Executable with childEnv set), as main does for the built command.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := serveUpstream(context.Background(), os.Args[1:], os.Stderr); err != nil {
			os.Stderr.WriteString("upstream: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// standin builds the stand-in proxy of testdata/standin.
func standin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "standin")
	if b, err := exec.Command("go", "build", "-o", bin, "./testdata/standin").CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/standin: %v\n%s", err, b)
	}
	return bin
}

// smoke runs the harness for a second a run at a low rate against the stand-in and
// decodes its JSON report.
func smoke(t *testing.T, bin string, extra ...string) (*report, string, error) {
	t.Helper()
	args := append([]string{"--llmreplay", bin, "--check-recording=false", "--json",
		"--rate", "40", "--duration", "1s", "--warmup", "250ms", "--pairs", "2",
		"--output-tokens", "4", "--prompt-tokens", "8", "--ttft", "5ms", "--itl", "2ms"}, extra...)
	var out, errs bytes.Buffer
	err := run(context.Background(), args, &out, &errs)
	var rep report
	if jerr := json.Unmarshal(out.Bytes(), &rep); jerr != nil {
		t.Fatalf("the report is not JSON (%v): %q\nstderr: %s", jerr, out.String(), errs.String())
	}
	return &rep, errs.String(), err
}

func TestSmokeStandIn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and replays for 4 s")
	}
	bin := standin(t)
	var pin []string
	if _, err := exec.LookPath("taskset"); err == nil {
		pin = []string{"--proxy-cpus", "0"}
	}
	rep, stderr, err := smoke(t, bin, pin...)
	if err != nil {
		t.Fatalf("run: %v\nstderr: %s", err, stderr)
	}
	if len(rep.Runs) != 4 {
		t.Fatalf("%d runs, want 2 pairs of 2", len(rep.Runs))
	}
	// Pairs alternate which path goes first.
	want := []string{pathDirect, pathProxy, pathProxy, pathDirect}
	for i, r := range rep.Runs {
		if r.Path != want[i] || r.Pair != i/2+1 {
			t.Errorf("run %d is pair %d %s, want pair %d %s", i, r.Pair, r.Path, i/2+1, want[i])
		}
		if r.Requests == 0 || r.OK != r.Requests || r.WarmupRequests == 0 || r.WarmupOK != r.WarmupRequests {
			t.Errorf("run %d: %d/%d ok, warm-up %d/%d", i, r.OK, r.Requests, r.WarmupOK, r.WarmupRequests)
		}
		if r.Tokens != int64(r.OK)*4 {
			t.Errorf("run %d: %d output tokens for %d ok requests of 4", i, r.Tokens, r.OK)
		}
		if r.TTFTP50 < 5 || r.TTFTP99 < r.TTFTP50 {
			t.Errorf("run %d: TTFT p50 %v p99 %v ms, under the upstream's 5 ms or out of order", i, r.TTFTP50, r.TTFTP99)
		}
		if r.Path == pathProxy && pin != nil && r.ProxyCPUsAllowed != "0" {
			t.Errorf("run %d: the proxy ran on CPUs %q, want 0 (--proxy-cpus 0)", i, r.ProxyCPUsAllowed)
		}
		if (r.Path == pathProxy) != (r.ProxyMaxRSS > 0) || (r.Path == pathProxy) != (r.ProxyLifeCPU > 0) {
			t.Errorf("run %d (%s): proxy peak RSS %d, life CPU %d: want them on proxy runs only", i, r.Path, r.ProxyMaxRSS, r.ProxyLifeCPU)
		}
	}
	if !rep.AllOK || rep.Direct.Runs != 2 || rep.Proxied.Runs != 2 || rep.Direct.OK != rep.Direct.Requests || rep.Proxied.OK != rep.Proxied.Requests {
		t.Errorf("summary: all ok %v, direct %+v, proxy %+v", rep.AllOK, rep.Direct, rep.Proxied)
	}
	// A stand-in of tens of MB, not the harness's own size (ru_maxrss would carry it).
	if rep.ProxyPeakRSS <= 0 || rep.ProxyPeakRSS > 60<<20 {
		t.Errorf("proxy peak RSS %d bytes: want the stand-in's own, a few tens of MB at most", rep.ProxyPeakRSS)
	}
	if !strings.Contains(rep.Proxy, bin+" record --listen 127.0.0.1:PORT --upstream http://127.0.0.1:") {
		t.Errorf("proxy command %q does not follow the record contract", rep.Proxy)
	}
}

// TestSmokeRelay: the stand-in's --relay, the floor of a proxy in user space, passes
// every request.
func TestSmokeRelay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and replays for 4 s")
	}
	rep, stderr, err := smoke(t, standin(t), "--proxy-args", "--relay")
	if err != nil || !rep.AllOK || rep.Proxied.Runs != 2 || rep.Proxied.OK != rep.Proxied.Requests || rep.Proxied.Requests == 0 {
		t.Fatalf("through the relay: %v, all ok %v, proxy %+v\nstderr: %s", err, rep.AllOK, rep.Proxied, stderr)
	}
}

// TestFailsWhenProxyDrops: a proxy that loses requests (the stand-in answers every third
// 502 without forwarding it) makes the harness fail, and its report says where.
func TestFailsWhenProxyDrops(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and replays for 4 s")
	}
	rep, _, err := smoke(t, standin(t), "--proxy-args", "--fail-every 3")
	if err == nil {
		t.Fatal("run returned no error though the proxy dropped every third request")
	}
	if rep.AllOK || rep.Proxied.OK >= rep.Proxied.Requests || rep.Direct.OK != rep.Direct.Requests {
		t.Errorf("all ok %v, direct %d/%d, proxy %d/%d: want the proxy's losses, and only them", rep.AllOK,
			rep.Direct.OK, rep.Direct.Requests, rep.Proxied.OK, rep.Proxied.Requests)
	}
	for _, r := range rep.Runs {
		if r.Path == pathProxy && r.OK < r.Requests && len(r.NotOK) == 0 {
			t.Errorf("pair %d proxy: %d/%d ok and no reason given", r.Pair, r.OK, r.Requests)
		}
	}
}

// TestCheckRecording: a proxy run's folder passes its check when its files, rotations
// summed, hold a results row for every request sent through the proxy, and fails it when
// a file is missing or rows are.
func TestCheckRecording(t *testing.T) {
	rec := checkRecording(t.TempDir(), 10)
	if !strings.Contains(rec.Problem, "no trace-NNNN.parquet") || !strings.Contains(rec.Problem, "no results-NNNN.parquet") {
		t.Errorf("empty folder: problem %q, want both files missing", rec.Problem)
	}
	dir := t.TempDir()
	writeRecording(t, dir, "0001", 6)
	writeRecording(t, dir, "0002", 5)
	if rec := checkRecording(dir, 11); rec.Problem != "" || rec.TraceRows != 11 || rec.ResultsRows != 11 {
		t.Errorf("two rotations of 6 and 5 rows for 11 requests: %+v", rec)
	}
	if rec := checkRecording(dir, 12); !strings.Contains(rec.Problem, "11 results rows for 12 requests") {
		t.Errorf("11 rows for 12 requests: problem %q", rec.Problem)
	}
}

// writeRecording writes trace-INDEX.parquet and results-INDEX.parquet of n rows into dir.
func writeRecording(t *testing.T, dir, index string, n int) {
	t.Helper()
	w, err := trace.Create(filepath.Join(dir, "trace-"+index+".parquet"), trace.Meta{Source: "record"})
	if err != nil {
		t.Fatal(err)
	}
	jp := filepath.Join(dir, "results-"+index+".parquet.journal")
	j, err := results.CreateJournal(jp, &results.RunMeta{RunID: "rec", Mode: results.ModeOpen, Flags: map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := w.Write(trace.Request{ID: int64(i), PromptTokens: 8, OutputTokens: 4}); err != nil {
			t.Fatal(err)
		}
		if err := j.Add(results.NewResult(int64(i), 0, int64(i), 8, 4)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := results.ConvertJournal(jp, filepath.Join(dir, "results-"+index+".parquet")); err != nil {
		t.Fatal(err)
	}
}

func TestSummarize(t *testing.T) {
	runs := []runResult{
		{Pair: 1, Path: pathDirect, Requests: 10, OK: 10, TTFTP50: 20, TTFTP99: 21, Tokens: 100, ReplayerCPU: 1000},
		{Pair: 1, Path: pathProxy, Requests: 10, Sent: 10, OK: 10, TTFTP50: 20.1, TTFTP99: 21.5, Tokens: 100, ReplayerCPU: 1000, ProxyCPU: 5000, ProxyMaxRSS: 7},
		{Pair: 2, Path: pathProxy, Requests: 10, Sent: 10, OK: 10, TTFTP50: 30.2, TTFTP99: 31.1, Tokens: 100, ReplayerCPU: 1000, ProxyCPU: 3000, ProxyMaxRSS: 9},
		{Pair: 2, Path: pathDirect, Requests: 10, OK: 10, TTFTP50: 30, TTFTP99: 31, Tokens: 100, ReplayerCPU: 3000},
		{Pair: 3, Path: pathDirect, Requests: 10, OK: 10, TTFTP50: 25, TTFTP99: 26, Tokens: 100, ReplayerCPU: 2000},
		{Pair: 3, Path: pathProxy, Requests: 10, Sent: 10, OK: 9, TTFTP50: 25.3, TTFTP99: 26.3, Tokens: 90, ReplayerCPU: 1000, ProxyCPU: 9000, ProxyMaxRSS: 8},
	}
	rep := summarize(&config{}, runs)
	near := func(name string, got, want float64) {
		t.Helper()
		if d := got - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Medians of each path's runs, and of the differences within each pair: the pairs'
	// differences (0.1, 0.2, 0.3 at p50; 0.5, 0.1, 0.3 at p99), not the difference of the
	// paths' medians (25.3 - 25 = 0.3; 26.3 - 26 = 0.3).
	near("direct TTFT p50", rep.Direct.TTFTP50, 25)
	near("proxy TTFT p99", rep.Proxied.TTFTP99, 26.3)
	near("added TTFT p50", rep.AddedTTFTP50, 0.2)
	near("added TTFT p99", rep.AddedTTFTP99, 0.3)
	near("direct replayer µs/token", rep.Direct.ReplayerCPUPerToken, 0.02)
	near("proxy µs/token", rep.ProxyCPUPerToken, 0.05)    // 0.05, 0.03, 0.1
	near("proxy µs/request", rep.ProxyCPUPerRequest, 0.5) // 0.5, 0.3, 0.9
	if rep.ProxyPeakRSS != 9 {
		t.Errorf("peak RSS %d, want the largest run's, 9", rep.ProxyPeakRSS)
	}
	if rep.MeetsTarget {
		t.Error("added p99 0.3 ms meets a 0.2 ms target")
	}
	if rep.AllOK || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "pair 3, proxy: 9 of 10") {
		t.Errorf("all ok %v, problems %q: want pair 3's lost request", rep.AllOK, rep.Problems)
	}
	if rep.failure() == nil {
		t.Error("failure() is nil with a request not ok")
	}
	if len(rep.Warnings) != 0 {
		t.Errorf("warnings %q for 3 pairs with no lateness", rep.Warnings)
	}
	var text bytes.Buffer
	rep.text(&text)
	for _, want := range []string{
		"TTFT p99 ms                            26.000     26.300      0.300   target added <= 0.2: NOT MET",
		"0.05 µs per streamed token (the replayer's: 0.01), 0.5 µs per request",
		"PROBLEM: pair 3, proxy: 9 of 10 requests ok",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, text.String())
		}
	}
	runs[2].LatenessP99 = 1.5
	rep = summarize(&config{}, runs[:4])
	if len(rep.Warnings) != 2 || !strings.Contains(rep.Warnings[0], "pair 2, proxy: schedule lateness p99 1.500") || !strings.Contains(rep.Warnings[1], "2 pairs") {
		t.Errorf("warnings %q: want pair 2's lateness and the 2 pairs", rep.Warnings)
	}
	if rep.failure() != nil {
		t.Errorf("failure() = %v: warnings do not fail a run", rep.failure())
	}
}

func TestVmHWM(t *testing.T) {
	st := []byte("Name:\tx\nVmPeak:\t  900 kB\nVmHWM:\t    1234 kB\nVmRSS:\t  1000 kB\n")
	if got := vmHWM(st); got != 1234*1024 {
		t.Errorf("vmHWM = %d, want %d", got, 1234*1024)
	}
	if got := vmHWM([]byte("Name:\tzombie\n")); got != 0 {
		t.Errorf("vmHWM of a status without the line = %d, want 0", got)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"--rate", "0"}, {"--pairs", "0"}, {"--output-tokens", "0"}, {"extra"}} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), args, &out, &errs); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}
