package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
)

func TestReplayDefaultsToSampleAndSim(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.parquet")
	t.Setenv("OPENAI_API_KEY", "sk-secret-do-not-store")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"replay", "--sim-profile", "tiny", "--limit", "30", "--speedup", "40",
		"-H", "X-Tenant: secret-tenant", "-q", "-o", out}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "started the simulated engine") {
		t.Errorf("stderr does not say the sim was started:\n%s", stderr.String())
	}
	res, meta, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 30 {
		t.Fatalf("%d records, want 30", len(res))
	}
	for _, r := range res {
		if r.Status != results.StatusOK || r.OutputTokens != r.OutputTokensTarget {
			t.Errorf("request %d: %s %q, output %d of %d", r.RequestID, r.Status, r.Error, r.OutputTokens, r.OutputTokensTarget)
		}
	}
	if !meta.Simulated || meta.SimProfile != "tiny" || meta.TraceFile == "" || meta.Speedup != 40 || meta.Mode != "open" || meta.Model == "" {
		t.Errorf("metadata %+v", meta)
	}
	raw, _ := os.ReadFile(out)
	for _, secret := range []string{"sk-secret-do-not-store", "secret-tenant"} {
		if bytes.Contains(raw, []byte(secret)) || strings.Contains(stdout.String()+stderr.String(), secret) {
			t.Errorf("%q leaked into the results or the output", secret)
		}
	}
	if meta.Flags["header"] != "X-Tenant" {
		t.Errorf("flags.header = %q, want the header name only", meta.Flags["header"])
	}
	if want := autoClient(); meta.Flags["http-client"] != want {
		t.Errorf("flags.http-client = %q, want what auto chose (%s)", meta.Flags["http-client"], want)
	}
	if _, err := os.Stat(out + results.JournalSuffix); !os.IsNotExist(err) {
		t.Errorf("journal left behind after a clean run")
	}
	if !strings.Contains(stdout.String(), "results: "+out) || !strings.Contains(stdout.String(), "TTFT") {
		t.Errorf("summary:\n%s", stdout.String())
	}
}

func TestReplayStrictExitCode(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.parquet")
	err := run(context.Background(), []string{"replay", "--sim-profile", "tiny", "--limit", "5", "--speedup", "40",
		"--strict", "--max-lateness", "1ns", "-q", "-o", out}, new(bytes.Buffer), new(bytes.Buffer))
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 3 {
		t.Fatalf("got %v, want exit status 3", err)
	}
}

func TestReplayUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--speedup", "2", "--rate", "3"},
		{"--api", "grpc"},
		{"--backend", "triton"},
		{"--shard", "3/2"},
		{"--header", "novalue"},
		{"--speedup", "-1"},
		{"--http-client", "curl"},
		{"--ramp-up", "1s"},
		{"--rate", "3", "--ramp-up", "1s"},
		{"--concurrency", "4", "--ramp-up", "-1s"},
		{"--session-header", "X Session"},
		{"--header", "X-Request-Id: 1"},
		{"--model-map", "gpt-4"},
	} {
		err := run(context.Background(), append([]string{"replay"}, args...), new(bytes.Buffer), new(bytes.Buffer))
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
		if slices.Contains(args, "--ramp-up") && !strings.Contains(err.Error(), "--ramp-up") {
			t.Errorf("%v: %v does not name --ramp-up", args, err)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"replay", "--help"}, &out, new(bytes.Buffer)); err != nil && !strings.Contains(out.String(), "Examples:") {
		t.Errorf("--help: %v", err)
	}
}

// TestReplayKill9ThenRecover runs the built binary, kills it with SIGKILL mid-run, and
// checks that recover keeps every record the run had finished a second before the kill.
func TestReplayBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "llmreplay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	t.Run("kill -9 then recover", func(t *testing.T) { testKill9ThenRecover(t, bin) })
	t.Run("SIGINT twice", func(t *testing.T) { testInterrupt(t, bin) })
}

// testInterrupt: the first SIGINT stops dispatching and waits for the requests in flight,
// the second cancels them; the process exits with a complete results file in which the
// interrupted requests are canceled.
//
// The signals follow what the process says, not a clock: the first once its progress
// shows a request in flight, the second once it has said it is stopping. (Sent 2 s and
// 2.5 s after the start, on a loaded machine they came before any request was sent, and
// the run rightly ended with nothing to cancel.)
func testInterrupt(t *testing.T, bin string) {
	out := filepath.Join(t.TempDir(), "r.parquet")
	// The sample at 16x needs ~14x the prefill the moe profile has: requests queue in the
	// engine for seconds, so many are in flight when the signals come.
	cmd := exec.Command(bin, "replay", "--sim-profile", "moe-230b-8gpu", "--speedup", "16", "--grace", "1m", "--progress-interval", "50ms", "-o", out)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		stderr strings.Builder
	)
	text := func() string { mu.Lock(); defer mu.Unlock(); return stderr.String() }
	inflight, stopping, eof := make(chan struct{}), make(chan struct{}), make(chan struct{})
	inflightRE := regexp.MustCompile(`in flight [1-9]`)
	go func() {
		defer close(eof)
		sawInflight, sawStopping := false, false
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			stderr.WriteString(line + "\n")
			mu.Unlock()
			if !sawInflight && inflightRE.MatchString(line) {
				sawInflight = true
				close(inflight)
			}
			if !sawStopping && strings.Contains(line, "stopping:") {
				sawStopping = true
				close(stopping)
			}
		}
	}()
	waitFor := func(ch chan struct{}, what string) {
		select {
		case <-ch:
		case <-eof:
			cmd.Wait()
			t.Fatalf("exited before %s\n%s", what, text())
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("no %s within 60 s\n%s", what, text())
		}
	}
	waitFor(inflight, "a request was in flight")
	cmd.Process.Signal(os.Interrupt)
	waitFor(stopping, "it said it was stopping")
	cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { <-eof; done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, text())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("did not exit after two SIGINTs\n%s", text())
	}
	res, _, err := results.ReadFile(out)
	if err != nil {
		t.Fatalf("results file after interrupt: %v\n%s", err, text())
	}
	st := map[results.Status]int{}
	for _, r := range res {
		st[r.Status]++
	}
	if len(res) == 0 || st[results.StatusCanceled] == 0 || !strings.Contains(text(), "canceling the requests in flight") ||
		!strings.Contains(text(), "llmreplay: stopping: no more requests; waiting up to 1m0s for those in flight (Ctrl-C again to cancel them)") {
		t.Errorf("records %d, statuses %v\n%s", len(res), st, text())
	}
}

func testKill9ThenRecover(t *testing.T, bin string) {
	dir := t.TempDir()
	out := filepath.Join(dir, "r.parquet")
	cmd := exec.Command(bin, "replay", "--sim-profile", "tiny", "--speedup", "8", "--progress-interval", "50ms", "-o", out)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	type line struct {
		at   time.Time
		done int64
	}
	var (
		mu    sync.Mutex
		lines []line
	)
	doneRE := regexp.MustCompile(`done (\d+)`)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := doneRE.FindStringSubmatch(sc.Text()); m != nil {
				n, _ := strconv.ParseInt(m[1], 10, 64)
				mu.Lock()
				lines = append(lines, line{time.Now(), n})
				mu.Unlock()
			}
		}
	}()
	// Kill once a few hundred records are done (or after 20 s).
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		n := len(lines)
		enough := n > 0 && lines[n-1].done >= 200
		mu.Unlock()
		if enough {
			break
		}
	}
	killedAt := time.Now()
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	mu.Lock()
	var doneSecondBefore, doneAtKill int64
	for _, l := range lines {
		if l.at.Before(killedAt.Add(-time.Second)) {
			doneSecondBefore = l.done
		}
		doneAtKill = l.done
	}
	mu.Unlock()
	if doneSecondBefore == 0 {
		t.Fatalf("no progress a second before the kill: %d lines", len(lines))
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a results file exists although the run was killed")
	}
	var so, se bytes.Buffer
	if err := run(context.Background(), []string{"recover", out + results.JournalSuffix}, &so, &se); err != nil {
		t.Fatalf("recover: %v", err)
	}
	res, meta, err := results.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(res))
	t.Logf("done 1 s before the kill %d, at the kill >= %d, recovered %d", doneSecondBefore, doneAtKill, n)
	if n < doneSecondBefore {
		t.Errorf("recovered %d records, fewer than the %d done a second before the kill", n, doneSecondBefore)
	}
	if meta.RunID == "" || !meta.Simulated {
		t.Errorf("recovered metadata %+v", meta)
	}
}
