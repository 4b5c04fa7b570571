package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/sim"
	"github.com/llmreplay/llmreplay/stats"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// simReasoningShare is the share of every answer the simulated engine streams as
// reasoning in these tests: 6 of a 20-token answer, then 14 of answer.
const simReasoningShare = 0.3

// apiRun is one replay of TestE2EAPIsAgainstSim: an API, whether chat's usage says the
// reasoning count (Config.ReasoningUsage), and where the record's reasoning count must come
// from: the usage where the API's usage says it (Responses always, chat with the detail),
// else the running usage of every chunk (chat: vLLM's continuous_usage_stats, which the
// sim serves), else the client's tokenizer (Messages: the sim, as vLLM, sends one
// message_delta, at the end); completions have no reasoning field.
type apiRun struct {
	api    string
	usage  bool
	source string
}

// TestE2EAPIsAgainstSim is the proof of every API against the simulated engine (started
// in the test with its request log, reasoning share 0.3): for completions, chat (the usage
// detail on and off), messages and responses, on both HTTP clients, every record of a
// small trace is checked against the engine's own log line for it (by X-Request-Id):
// status ok; output tokens and reasoning tokens equal to what the engine served, from the
// source the API allows; the prompt tokens the engine counted; the first token and the
// first answer token never seen before the engine's write that carried it (completions:
// the first answer is the first token). With LLMREPLAY_E2E=1 (scripts/test's real-time
// pass, alone on the cores) each is also at most 25 ms after that write: the HTTP and
// scheduling overhead TestE2EFixedEngine allows a loaded 2-core machine on TTFT. Then
// analyze's JSON of the run: its TTFT, TTFA and reasoning figures are the records' own.
func TestE2EAPIsAgainstSim(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.parquet")
	if msg, err := runArgs(t, "trace", "synth", "--arrival", "constant", "--rate", "20", "--count", "6",
		"--prompt-tokens", "uniform:40,200", "--output-tokens", "fixed:20", "--seed", "3", "-o", tr); err != nil {
		t.Fatalf("synth: %v %s", err, msg)
	}
	clients := []string{transport.HTTPClientNetHTTP}
	if autoClient() == transport.HTTPClientRaw {
		clients = append(clients, transport.HTTPClientRaw)
	}
	runs := []apiRun{
		{"completions", false, ""},
		{"chat", true, results.SourceUsage},
		{"chat", false, results.SourceChunkUsage},
		{"messages", false, results.SourceTokenizer},
		{"responses", false, results.SourceUsage},
	}
	for _, c := range runs {
		for _, client := range clients {
			name := fmt.Sprintf("%s-usage=%v-%s", c.api, c.usage, strings.ReplaceAll(client, "/", ""))
			t.Run(name, func(t *testing.T) {
				res, log := replayAgainstSim(t, filepath.Join(dir, name), tr, c, client)
				checkAPIRun(t, c, res, log)
			})
		}
	}
}

// replayAgainstSim replays trace tr against a simulated engine of this test's reasoning
// share, started for the run with a request log, and returns the results file and the
// log's lines by request id (the preflight's left out).
func replayAgainstSim(t *testing.T, base, tr string, c apiRun, client string) (string, map[int64]sim.LogRecord) {
	t.Helper()
	cfg, err := sim.Profile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	logPath := base + ".log"
	cfg.ReasoningShare, cfg.ReasoningUsage, cfg.RequestLog = simReasoningShare, c.usage, logPath
	srv, err := sim.Start(context.Background(), "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	res := base + ".parquet"
	var out, errb bytes.Buffer
	err = run(context.Background(), []string{"replay", "--trace", tr, "--endpoint", srv.BaseURL(), "--api", c.api,
		"--http-client", client, "--scrape", "none", "-q", "-o", res}, &out, &errb)
	srv.Close() // writes the log
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, errb.String())
	}
	return res, readSimLog(t, logPath)
}

// readSimLog reads a simulated engine's request log into its lines by the request id of
// their X-Request-Id (RUNID-ID), the preflight's left out.
func readSimLog(t *testing.T, path string) map[int64]sim.LogRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byID := map[int64]sim.LogRecord{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec sim.LogRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if rec.RequestID == wire.PreflightRequestID {
			continue
		}
		id, err := strconv.ParseInt(rec.RequestID[strings.LastIndexByte(rec.RequestID, '-')+1:], 10, 64)
		if err != nil {
			t.Fatalf("%s: X-Request-Id %q: %v", path, rec.RequestID, err)
		}
		byID[id] = rec
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return byID
}

// lateBound is how much later than the engine's write a client may see a token: the
// HTTP and scheduling overhead TestE2EFixedEngine allows on TTFT (+25 ms). It is checked
// only in the real-time pass (LLMREPLAY_E2E=1); the lower bound, causality, always is.
const lateBound = 25 * time.Millisecond

// checkAPIRun checks one run's records against the engine's log, and analyze's figures
// against the records.
func checkAPIRun(t *testing.T, c apiRun, res string, log map[int64]sim.LogRecord) {
	t.Helper()
	recs, meta, err := results.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 6 || len(log) != 6 {
		t.Fatalf("%d records, %d logged by the engine; want 6", len(recs), len(log))
	}
	realTime := os.Getenv("LLMREPLAY_E2E") != ""
	// seen checks that the client saw a write no sooner than the engine made it: the raw
	// client dates a read by the kernel's receive time, CLOCK_REALTIME put on the run's
	// monotonic clock, which a slewing wall clock may move by up to 500 ppm of the run,
	// under 1 ms here, the slack allowed (as TestReasoningRunEndToEnd).
	seen := func(id int64, what string, runNS, writeUnix int64) {
		if writeUnix <= 0 {
			t.Errorf("request %d: the engine logged no %s write", id, what)
			return
		}
		d := time.Duration(meta.RunStartUnixNS + runNS - writeUnix)
		if d < -time.Millisecond || (realTime && d > lateBound) {
			t.Errorf("request %d: %s seen %v after the engine's write (want [-1ms, %v])", id, what, d, lateBound)
		}
	}
	var ttft, ttfa, reasoning []float64
	for _, r := range recs {
		s, ok := log[r.RequestID]
		if !ok {
			t.Errorf("request %d: not in the engine's log", r.RequestID)
			continue
		}
		if r.Status != results.StatusOK || s.Outcome != "ok" {
			t.Errorf("request %d: %s %q; the engine: %s %q", r.RequestID, r.Status, r.Error, s.Outcome, s.Error)
			continue
		}
		if r.OutputTokens != int32(s.CompletionTokens) || r.OutputTokensSource != results.SourceUsage {
			t.Errorf("request %d: %d output tokens (%s), the engine served %d", r.RequestID, r.OutputTokens, r.OutputTokensSource, s.CompletionTokens)
		}
		if r.PromptTokensServer != int32(s.PromptTokens) {
			t.Errorf("request %d: prompt_tokens_server %d, the engine counted %d", r.RequestID, r.PromptTokensServer, s.PromptTokens)
		}
		wantR, wantSrc := int32(s.ReasoningTokens), c.source
		if c.api == "completions" {
			wantR = results.Null // no reasoning field: none seen
		}
		if s.ReasoningTokens == 0 && c.api != "completions" {
			t.Errorf("request %d: the engine streamed no reasoning", r.RequestID)
		}
		if r.ReasoningTokens != wantR || r.ReasoningTokensSource != wantSrc {
			t.Errorf("request %d: %d reasoning tokens (%q), the engine served %d: want %d (%q)", r.RequestID, r.ReasoningTokens, r.ReasoningTokensSource, s.ReasoningTokens, wantR, wantSrc)
		}
		seen(r.RequestID, "first token", r.FirstTokenNS, s.FirstWriteUnixNs)
		if c.api == "completions" {
			if r.FirstAnswerNS != r.FirstTokenNS {
				t.Errorf("request %d: first answer %d, first token %d: completions answer from the first token", r.RequestID, r.FirstAnswerNS, r.FirstTokenNS)
			}
		} else {
			seen(r.RequestID, "first answer", r.FirstAnswerNS, s.FirstAnswerWriteUnixNs)
			reasoning = append(reasoning, float64(r.ReasoningTokens))
		}
		ttft = append(ttft, float64(r.FirstTokenNS-r.SentNS)/1e6)
		ttfa = append(ttfa, float64(r.FirstAnswerNS-r.SentNS)/1e6)
	}
	want := map[string]stats.Quantiles{"ttft_ms": stats.Summarize(ttft)}
	if c.api != "completions" { // analyze reports TTFA and reasoning for a run that reasoned
		want["ttfa_ms"], want["reasoning_tokens"] = stats.Summarize(ttfa), stats.Summarize(reasoning)
	}
	checkAnalyzeFigures(t, want, res)
}

// checkAnalyzeFigures runs analyze --json with args (a results file and any other flag)
// and checks that each of want's keys has want's p50, p99 and mean.
func checkAnalyzeFigures(t *testing.T, want map[string]stats.Quantiles, args ...string) {
	t.Helper()
	var out, errb bytes.Buffer
	if err := run(context.Background(), append([]string{"analyze", "--json"}, args...), &out, &errb); err != nil {
		t.Fatalf("analyze: %v\n%s", err, errb.String())
	}
	var j map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	for key, q := range want {
		var got struct{ P50, P99, Mean float64 }
		if err := json.Unmarshal(j[key], &got); err != nil {
			t.Errorf("analyze --json %s: %v (%s)", key, err, j[key])
			continue
		}
		if !same(got.P50, q.P50) || !same(got.P99, q.P99) || !same(got.Mean, q.Mean) {
			t.Errorf("analyze --json %s = %+v, want the records' p50 %v p99 %v mean %v", key, got, q.P50, q.P99, q.Mean)
		}
	}
}

// TestE2EToolsAgainstSim replays a trace whose requests send 500 tokens of tools (trace
// synth --tool-tokens) against the in-process simulated engine with each API that takes
// tools. The engine counts a tool as its description plus sim.ToolOverheadTokens, which is
// replay's default overhead, so without --calibrate the tools cost exactly their
// tool_tokens: every request's prompt_tokens_server exceeds the trace's prompt_tokens by
// what the same request without tools (the same trace synthesized without
// --tool-tokens) exceeds it, the engine's chat template around the message, which only
// --calibrate takes off. With --calibrate, every request's prompt_tokens_server is the
// trace's prompt_tokens (the tools' overhead then measured against the engine).
func TestE2EToolsAgainstSim(t *testing.T) {
	dir := t.TempDir()
	synth := func(name string, tools string) string {
		tr := filepath.Join(dir, name+".parquet")
		if msg, err := runArgs(t, "trace", "synth", "--tool-tokens", tools, "--arrival", "constant", "--rate", "50", "--count", "10",
			"--prompt-tokens", "uniform:600,1500", "--output-tokens", "fixed:8", "--seed", "2", "-o", tr); err != nil {
			t.Fatalf("synth: %v %s", err, msg)
		}
		return tr
	}
	withTools, without := synth("tools", "500"), synth("none", "0")
	// --calibrate does not speak messages yet (calibrate: want completions, chat or
	// responses): that case waits for it.
	for _, c := range []struct {
		api       string
		calibrate bool
	}{{"chat", false}, {"chat", true}, {"messages", false}, {"responses", false}, {"responses", true}} {
		api, calibrate := c.api, c.calibrate
		name := fmt.Sprintf("%s-calibrate=%v", api, calibrate)
		t.Run(name, func(t *testing.T) {
			replayTools := func(tr, tag string) map[int64]results.Result {
				args := []string{"replay", "--trace", tr, "--api", api, "--sim-profile", "tiny", "-q", "-o", filepath.Join(dir, name+tag+".parquet")}
				if calibrate {
					args = append(args, "--calibrate")
				}
				byID := map[int64]results.Result{}
				for _, r := range replayInProcess(t, args) {
					if r.Status != results.StatusOK {
						t.Errorf("%s: request %d: %s %q", tag, r.RequestID, r.Status, r.Error)
					}
					byID[r.RequestID] = r
				}
				if len(byID) != 10 {
					t.Fatalf("%s: %d records, want 10", tag, len(byID))
				}
				return byID
			}
			got, base := replayTools(withTools, "tools"), replayTools(without, "none")
			for id, r := range got {
				template := base[id].PromptTokensServer - base[id].PromptTokens
				if calibrate {
					template = 0
				}
				if r.PromptTokens != base[id].PromptTokens+500 || r.PromptTokensServer-r.PromptTokens != template {
					t.Errorf("request %d: the engine counted %d prompt tokens, the trace has %d (%d without its 500 of tools, counted %d): want the trace's + %d",
						id, r.PromptTokensServer, r.PromptTokens, base[id].PromptTokens, base[id].PromptTokensServer, template)
				}
			}
		})
	}
}

// replayInProcess runs replay with args (no --endpoint: the in-process engine) and
// returns its records.
func replayInProcess(t *testing.T, args []string) []results.Result {
	t.Helper()
	var out, errb bytes.Buffer
	if err := run(context.Background(), args, &out, &errb); err != nil {
		t.Fatalf("replay %v: %v\n%s", args, err, errb.String())
	}
	recs, _, err := results.ReadFile(args[slices.Index(args, "-o")+1])
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestE2EAgentsAPIsAgainstSim replays an agent trace (trace synth --agent-sessions: chains,
// forks, joins) against the in-process simulated engine with --api messages and
// responses, chat beside them. Every call is ok: its context went as messages the engine
// could read (it answers 400 to what it cannot). The engine counts every call's context
// alike in each API: the same history, only its wire shape differs. And an append (a call
// of one parent whose context it extends: tool output after the parent's prompt and actual
// answer) exceeds the trace's prompt_tokens by its parent's excess plus one constant, the
// same for every append of the run: the parent's answer went back with exactly the tokens
// the engine made, and the trace's increment was sent as new text. The constant is the
// chat template's markers around the two messages an append adds (the sim's rule,
// sim/server.go promptTokens), which the history counts only with --calibrate
// (TestCalibratedConversationsSim); it is logged.
func TestE2EAgentsAPIsAgainstSim(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "agents.parquet")
	if msg, err := runArgs(t, "trace", "synth", "--agent-sessions", "3", "--rate", "20", "--agent-calls", "fixed:4",
		"--agent-first-prompt", "fixed:300", "--agent-append", "uniform:20,80", "--agent-fork", "0.5", "--agent-branches", "fixed:2",
		"--agent-branch-calls", "fixed:2", "--output-tokens", "uniform:5,30", "--prompt-max", "20000", "--seed", "4", "-o", tr); err != nil {
		t.Fatalf("synth: %v %s", err, msg)
	}
	calls := map[int64]trace.Request{}
	src, err := trace.Open(tr)
	if err != nil {
		t.Fatal(err)
	}
	for src.Next() {
		calls[src.Request().ID] = src.Request()
	}
	src.Close()
	served := map[string]map[int64]int32{}
	for _, api := range []string{"chat", "messages", "responses"} {
		recs := replayInProcess(t, []string{"replay", "--trace", tr, "--api", api, "--gaps", "none", "-q", "-o", filepath.Join(dir, api+".parquet")})
		if len(recs) != len(calls) {
			t.Fatalf("%s: %d records, the trace has %d calls", api, len(recs), len(calls))
		}
		byID := map[int64]results.Result{}
		served[api] = map[int64]int32{}
		for _, r := range recs {
			if r.Status != results.StatusOK {
				t.Errorf("%s: call %d: %s %q", api, r.RequestID, r.Status, r.Error)
			}
			byID[r.RequestID] = r
			served[api][r.RequestID] = r.PromptTokensServer
		}
		excess := func(r results.Result) int32 { return r.PromptTokensServer - r.PromptTokens }
		appends, perAppend := 0, int32(-1)
		for id, q := range calls {
			if q.Call == nil || len(q.Call.Parents) != 1 || q.Call.PrefixTokens != trace.Unknown {
				continue
			}
			appends++
			r, p := byID[id], byID[q.Call.Parents[0]]
			d := excess(r) - excess(p)
			if perAppend < 0 {
				perAppend = d
			}
			if d != perAppend {
				t.Errorf("%s: call %d: the engine counted %d prompt tokens (the trace's %d), its parent %d %d (%d): %+d over the parent's excess, other appends %+d",
					api, id, r.PromptTokensServer, r.PromptTokens, p.RequestID, p.PromptTokensServer, p.PromptTokens, d, perAppend)
			}
		}
		if appends == 0 {
			t.Fatalf("%s: the trace has no append", api)
		}
		t.Logf("%s: %d calls ok, %d appends, each %+d tokens over its parent's excess (the template of the two messages it adds)", api, len(recs), appends, perAppend)
	}
	for id, n := range served["chat"] {
		if served["messages"][id] != n || served["responses"][id] != n {
			t.Errorf("call %d: the engine counted %d prompt tokens on chat, %d on messages, %d on responses", id, n, served["messages"][id], served["responses"][id])
		}
	}
}
