//go:build unix

package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/ollamatest"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/tokenize"
)

// The real-engine tests: llmreplay against Ollama serving the tiny model of
// internal/ollamatest, whose behaviour is known exactly: a prompt of n builder tokens is
// n+1 to the engine (BOS), every request generates exactly max_tokens tokens, one chunk
// each. They skip without $LLMREPLAY_OLLAMA; scripts/test builds the engine and runs them
// alone (docs/engines.md).

// ollamaTrace writes a synthetic trace of short prompts (the engine prefills ~1,500 tokens
// a second on two cores) and returns its path.
func ollamaTrace(t *testing.T, dir string, extra ...string) string {
	t.Helper()
	tr := filepath.Join(dir, "trace.parquet")
	args := append([]string{"trace", "synth", "--arrival", "poisson", "--rate", "4", "--duration", "6s",
		"--prompt-tokens", "uniform:16,200", "--output-tokens", "uniform:4,40", "--seed", "29", "-o", tr}, extra...)
	mustRun(t, args...)
	return tr
}

// analyzeJSON returns analyze --json of a results file.
func analyzeJSON(t *testing.T, res string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(mustRun(t, "analyze", res, "--json")), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOllamaReplay replays a trace against Ollama with both HTTP clients, through both
// APIs, and checks every record against what the engine does and says: every request ok
// with exactly its target's output tokens as the server's usage counts them, one chunk a
// token, the prompt counted by the server as its target plus BOS; and the analysis'
// sustained and peak output tok/s are not zero (Ollama's zero usage placeholders on every
// completions chunk once made every chunk count 0).
func TestOllamaReplay(t *testing.T) {
	srv := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	dir := t.TempDir()
	tr := ollamaTrace(t, dir)
	for _, api := range []string{"completions", "chat"} {
		for _, client := range []string{"raw", "net/http"} {
			t.Run(api+"/"+strings.ReplaceAll(client, "/", ""), func(t *testing.T) {
				res := filepath.Join(dir, fmt.Sprintf("%s-%s.parquet", api, strings.ReplaceAll(client, "/", "")))
				mustRun(t, "replay", "--trace", tr, "--endpoint", srv.BaseURL, "--model", ollamatest.Model,
					"--api", api, "--http-client", client, "--quiet", "-o", res)
				checkExactRows(t, readRows(t, res))
				th := analyzeJSON(t, res)["throughput"].(map[string]any)
				for _, k := range []string{"sustained_output_tokens_per_s", "peak_output_tokens_per_s", "output_tokens_per_s"} {
					if v, _ := th[k].(float64); v <= 0 {
						t.Errorf("analyze: %s = %v; the engine generated tokens throughout", k, th[k])
					}
				}
			})
		}
	}
}

// checkExactRows checks a replay's records against what the tiny model does: at least the
// trace's 10 requests, every one ok with exactly its target's output tokens as the
// server's usage counts them, one chunk a token (chunk_tokens, when kept, summing to the
// usage), the prompt counted by the server as its target plus BOS.
func checkExactRows(t *testing.T, rows []results.Result) {
	t.Helper()
	if len(rows) < 10 {
		t.Fatalf("%d rows; want the trace's (>= 10)", len(rows))
	}
	for _, r := range rows {
		if r.Status != results.StatusOK {
			t.Fatalf("request %d: %s: %s", r.RequestID, r.Status, r.Error)
		}
		if r.OutputTokens != r.OutputTokensTarget || r.OutputTokensSource != results.SourceUsage {
			t.Errorf("request %d: output %d tokens (source %s); the engine generates exactly the target, %d",
				r.RequestID, r.OutputTokens, r.OutputTokensSource, r.OutputTokensTarget)
		}
		if len(r.ChunkNS) != int(r.OutputTokens) {
			t.Errorf("request %d: %d chunks for %d tokens; the engine streams one a token", r.RequestID, len(r.ChunkNS), r.OutputTokens)
		}
		if r.ChunkTokens != nil {
			var sum int32
			for _, n := range r.ChunkTokens {
				sum += n
			}
			if sum != r.OutputTokens {
				t.Errorf("request %d: chunk_tokens sum to %d, usage says %d", r.RequestID, sum, r.OutputTokens)
			}
		}
		if r.PromptTokensServer != r.PromptTokens+1 {
			t.Errorf("request %d: the server counted %d prompt tokens; the tiny model counts the target %d plus BOS",
				r.RequestID, r.PromptTokensServer, r.PromptTokens)
		}
	}
}

// readRows reads a results file's records.
func readRows(t *testing.T, path string) []results.Result {
	t.Helper()
	rows, _, err := results.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestOllamaSessions replays conversations in sequential mode through the chat API, one at
// a time (closed loop, one worker, which keeps each conversation it starts), and checks
// each turn against the runner's own account of its prompt cache (its debug log, one line
// a request, in the order they came): every turn ok with its exact output and its prompt
// counted by the server as its target plus BOS; with actual history a later turn's prompt
// begins with the previous turn's prompt and answer, token for token, so the runner finds
// exactly those in its cache but the answer's last token (sampled, never fed back); with
// synthetic history it finds less, since the answers are not in the prompt.
func TestOllamaSessions(t *testing.T) {
	srv := ollamatest.Start(t, ollamatest.Options{Parallel: 2, Debug: true})
	dir := t.TempDir()
	tr := filepath.Join(dir, "conv.parquet")
	mustRun(t, "trace", "synth", "--arrival", "poisson", "--rate", "2", "--duration", "15s",
		"--prompt-tokens", "uniform:16,64", "--output-tokens", "uniform:8,24", "--turns", "uniform:3,5",
		"--sessions", "2", "--seed", "3", "-o", tr)
	for _, history := range []string{"actual", "synthetic"} {
		before := len(srv.CacheLoads())
		res := filepath.Join(dir, history+".parquet")
		mustRun(t, "replay", "--trace", tr, "--endpoint", srv.BaseURL, "--model", ollamatest.Model, "--api", "chat",
			"--concurrency", "1", "--sessions", "sequential", "--history", history, "--quiet", "-o", res)
		rows := readRows(t, res)
		slices.SortFunc(rows, func(a, b results.Result) int { return cmp.Compare(a.SentNS, b.SentNS) })
		// The first is the preflight's check of the length field, before the trace.
		loads := srv.CacheLoads()[before+1:]
		if len(loads) != len(rows) {
			t.Fatalf("%s: the runner loaded %d prompts for %d requests", history, len(loads), len(rows))
		}
		prev := map[int64]results.Result{}
		var later, want, used int
		for i, r := range rows {
			if r.Status != results.StatusOK || r.OutputTokens != r.OutputTokensTarget {
				t.Fatalf("%s: request %d: %s %q, output %d of %d", history, r.RequestID, r.Status, r.Error, r.OutputTokens, r.OutputTokensTarget)
			}
			if r.PromptTokensServer != r.PromptTokens+1 || loads[i].Prompt != int(r.PromptTokensServer) {
				t.Errorf("%s: request %d (turn %d): %d prompt tokens by usage, %d by the runner, for a target of %d (+1 BOS)",
					history, r.RequestID, r.Turn, r.PromptTokensServer, loads[i].Prompt, r.PromptTokens)
			}
			q, ok := prev[r.SessionID]
			prev[r.SessionID] = r
			if !ok {
				continue
			}
			ctx := int(q.PromptTokensServer+q.OutputTokens) - 1
			later++
			want += ctx
			used += loads[i].Used
			if history == "actual" && loads[i].Used != ctx {
				t.Errorf("actual history: request %d (turn %d): the runner found %d of its %d prompt tokens in its cache; the previous turn's prompt and answer but its last token are %d",
					r.RequestID, r.Turn, loads[i].Used, loads[i].Prompt, ctx)
			}
		}
		t.Logf("%s history: %d later turns; the runner found %d prompt tokens in its cache, of the previous turns' %d", history, later, used, want)
		if later == 0 {
			t.Fatalf("%s: no later turns: the trace has no conversations", history)
		}
		if history == "synthetic" && used >= want {
			t.Errorf("synthetic history: the runner found %d prompt tokens in its cache, as many as the previous turns' %d: the answers cannot be there", used, want)
		}
	}
}

// TestOllamaLoad measures the engine's capacity the ways a user does and checks each answer
// against what the engine is: Ollama decodes OLLAMA_NUM_PARALLEL sequences at once and
// queues the rest. On a CPU a decode step of two sequences costs about what two of one do,
// so the slots do not show in throughput (the sweep's throughput saturation is logged);
// they show in latency: up to the slots a request's first token comes after its short
// prefill, beyond them after another request's whole answer.
//   - A closed-loop sweep over concurrencies 1, 2, 4, 8 with a TTFT objective between the
//     two finds the highest concurrency meeting it at the engine's two slots.
//   - An open-loop run at twice that point's request rate is flagged overloaded, and one at
//     half of it is not.
//   - compare of one slot against two, at concurrency 2, says the second slot cut the TTFT,
//     with an interval that excludes no change.
func TestOllamaLoad(t *testing.T) {
	two := ollamatest.Start(t, ollamatest.Options{Parallel: 2})
	one := ollamatest.Start(t, ollamatest.Options{Parallel: 1})
	dir := t.TempDir()
	tr := filepath.Join(dir, "decode.parquet")
	// Short prompts (a prefill of milliseconds), long answers (hundreds of milliseconds).
	mustRun(t, "trace", "synth", "--arrival", "poisson", "--rate", "4", "--duration", "120s",
		"--prompt-tokens", "uniform:16,48", "--output-tokens", "uniform:256,512", "--seed", "7", "-o", tr)
	common := []string{"--trace", tr, "--model", ollamatest.Model, "--quiet"}

	sw := filepath.Join(dir, "sweep")
	mustRun(t, append([]string{"sweep", "--endpoint", two.BaseURL, "--concurrencies", "1,2,4,8", "--duration", "8s",
		"--slo", "ttft=250ms", "--attainment", "95", "-o", sw}, common...)...)
	type bracket struct {
		Found    bool    `json:"found"`
		PassLoad float64 `json:"pass_load"`
		Summary  string  `json:"summary"`
	}
	var sweep struct {
		Saturation bracket `json:"saturation"`
		SLOLimit   bracket `json:"slo_limit"`
		Points     []struct {
			Load       float64  `json:"load"`
			ReqPerS    float64  `json:"requests_per_s"`
			Sustained  float64  `json:"sustained_output_tokens_per_s"`
			Attainment *float64 `json:"attainment"`
			TTFT       struct {
				P50 float64 `json:"p50"`
			} `json:"ttft_ms"`
		} `json:"points"`
	}
	readJSON(t, filepath.Join(sw, "sweep.json"), &sweep)
	for _, p := range sweep.Points {
		t.Logf("concurrency %g: %.2f req/s, sustained %.1f output tok/s, TTFT p50 %.1f ms, attainment %v", p.Load, p.ReqPerS, p.Sustained, p.TTFT.P50, fmtPtr(p.Attainment))
	}
	t.Logf("sweep: %s", sweep.Saturation.Summary)
	if !sweep.SLOLimit.Found || sweep.SLOLimit.PassLoad != 2 {
		t.Fatalf("sweep: %s; want the highest concurrency meeting TTFT 250 ms at the engine's 2 slots", sweep.SLOLimit.Summary)
	}
	knee := sweep.Points[1].ReqPerS

	for _, c := range []struct {
		factor     float64
		overloaded bool
	}{{2, true}, {0.5, false}} {
		res := filepath.Join(dir, fmt.Sprintf("open-%g.parquet", c.factor))
		mustRun(t, append([]string{"replay", "--endpoint", two.BaseURL, "--rate", fmt.Sprint(c.factor * knee),
			"--duration", "20s", "-o", res}, common...)...)
		flags := analyzeJSON(t, res)["flags"].(map[string]any)
		if got, _ := flags["overloaded"].(bool); got != c.overloaded {
			// The text report says the evidence (the slopes, their t, the window), which
			// the JSON flags do not: what the next reader needs to judge a failure.
			var evidence []string
			for _, line := range strings.Split(mustRun(t, "analyze", res), "\n") {
				if strings.Contains(line, "overloaded:") || strings.Contains(line, "sustained output tok/s") {
					evidence = append(evidence, strings.TrimSpace(line))
				}
			}
			t.Errorf("open loop at %g x the knee's %.2f req/s: overloaded %v; want %v\n%s", c.factor, knee, flags["overloaded"], c.overloaded, strings.Join(evidence, "\n"))
		}
	}

	runs := map[string]string{}
	for name, srv := range map[string]*ollamatest.Server{"one": one, "two": two} {
		runs[name] = filepath.Join(dir, "slots-"+name+".parquet")
		mustRun(t, append([]string{"replay", "--endpoint", srv.BaseURL, "--concurrency", "2", "--duration", "12s", "-o", runs[name]}, common...)...)
	}
	var cmpOut struct {
		Sections []struct {
			Figures []struct {
				Key     string    `json:"key"`
				Values  []float64 `json:"values"`
				Changes []struct {
					Delta       float64 `json:"delta"`
					Significant bool    `json:"significant"`
				} `json:"changes"`
			} `json:"figures"`
		} `json:"sections"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "compare", runs["one"], runs["two"], "--json")), &cmpOut); err != nil {
		t.Fatal(err)
	}
	figs := map[string]int{}
	for i, f := range cmpOut.Sections[0].Figures {
		figs[f.Key] = i
		if f.Key == "ttft_p50_ms" || f.Key == "sustained_output_tokens_per_s" {
			t.Logf("compare one slot -> two: %s %.1f -> %.1f, %+.1f%% (significant %v)", f.Key, f.Values[0], f.Values[1], f.Changes[0].Delta, f.Changes[0].Significant)
		}
	}
	i, ok := figs["ttft_p50_ms"]
	if !ok {
		t.Fatal("compare: no ttft_p50_ms figure")
	}
	// With one slot, each of the two requests in flight waits for the other's whole answer
	// (hundreds of tokens) before its first token; with two, for nothing.
	if f := cmpOut.Sections[0].Figures[i]; !f.Changes[0].Significant || f.Changes[0].Delta > -50 {
		t.Errorf("compare one slot -> two: TTFT p50 %.1f -> %.1f ms, %+.1f%% significant %v; want a significant fall of more than half",
			f.Values[0], f.Values[1], f.Changes[0].Delta, f.Changes[0].Significant)
	}
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100**p)
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// ollamaRunErr runs the CLI and returns its error and stderr.
func ollamaRunErr(args ...string) (string, error) {
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	return errb.String(), err
}

// TestOllamaCalibrate checks calibration against the engine's tokenizer, which counts a
// builder prompt of n tokens as n+1 (BOS): at a 16k context the fit is exact (overhead 1,
// ratio 1, held-out error 0) and every replayed prompt is counted by the server as exactly
// its target. At a 2,048-token context Ollama truncates the longer probes silently; the
// held-out error passes --calibrate-max-error and the run stops before the trace's first
// request (the server saw the preflight's check and the probes, nothing else). Without
// --calibrate, prompts longer than that context are counted short, and analyze says so
// at the top of its report.
func TestOllamaCalibrate(t *testing.T) {
	dir := t.TempDir()
	tr := ollamaTrace(t, dir)

	full := ollamatest.Start(t, ollamatest.Options{})
	res := filepath.Join(dir, "calibrated.parquet")
	mustRun(t, "replay", "--trace", tr, "--endpoint", full.BaseURL, "--model", ollamatest.Model, "--calibrate", "--limit", "12", "--quiet", "-o", res)
	for _, r := range readRows(t, res) {
		if r.Status != results.StatusOK || r.PromptTokensServer != r.PromptTokens {
			t.Errorf("calibrated: request %d: %s, the server counted %d prompt tokens for a target of %d", r.RequestID, r.Status, r.PromptTokensServer, r.PromptTokens)
		}
	}

	short := ollamatest.Start(t, ollamatest.Options{Context: 2048})
	before := short.Completions(0)
	msg, err := ollamaRunErr("replay", "--trace", tr, "--endpoint", short.BaseURL, "--model", ollamatest.Model, "--calibrate", "--quiet",
		"-o", filepath.Join(dir, "short.parquet"))
	if err == nil || !strings.Contains(err.Error()+msg, "--calibrate-max-error") {
		t.Fatalf("a calibration truncated by a 2,048-token context: err %v; want a stop naming --calibrate-max-error\n%s", err, msg)
	}
	probes := 3*len(tokenize.DefaultFitLengths) + len(tokenize.DefaultCheckLengths)
	if got := short.Completions(before+1+probes) - before; got != 1+probes {
		t.Errorf("the server saw %d completion requests; want the length check and the %d probes, none of the trace's", got, probes)
	}
	if _, err := os.Stat(filepath.Join(dir, "short.parquet")); err == nil {
		t.Error("a stopped run wrote a results file")
	}

	long := filepath.Join(dir, "long.parquet")
	mustRun(t, "trace", "synth", "--arrival", "poisson", "--rate", "2", "--duration", "2s",
		"--prompt-tokens", "uniform:2600,3000", "--output-tokens", "fixed:4", "--seed", "5", "-o", long)
	res = filepath.Join(dir, "truncated.parquet")
	mustRun(t, "replay", "--trace", long, "--endpoint", short.BaseURL, "--model", ollamatest.Model, "--quiet", "-o", res)
	report := mustRun(t, "analyze", res)
	head, _, _ := strings.Cut(report, "Throughput")
	if !strings.Contains(head, "PROMPT TOKENS OFF TARGET") {
		t.Errorf("prompts cut to a 2,048-token context: the report's top does not say so:\n%s", head)
	}
	for _, r := range readRows(t, res) {
		if r.PromptTokensServer > 2048 {
			t.Errorf("request %d: the server counted %d prompt tokens at a 2,048-token context", r.RequestID, r.PromptTokensServer)
		}
	}
}

// TestOllamaLengthField checks the preflight's look at the backend's length field: Ollama
// ignores max_completion_tokens, which --backend openai sends on the chat API, and the run
// stops before the trace's first request saying so; max_tokens (--backend vllm) it honours.
// And the model column: Ollama lists "tiny:latest", and a trace whose column says "tiny"
// is sent as it is.
func TestOllamaLengthField(t *testing.T) {
	srv := ollamatest.Start(t, ollamatest.Options{})
	dir := t.TempDir()
	tr := ollamaTrace(t, dir, "--model", ollamatest.Model)
	before := srv.Completions(0)
	msg, err := ollamaRunErr("replay", "--trace", tr, "--endpoint", srv.BaseURL, "--api", "chat", "--backend", "openai", "--quiet",
		"-o", filepath.Join(dir, "openai.parquet"))
	if err == nil || !strings.Contains(err.Error(), "max_completion_tokens") {
		t.Fatalf("--backend openai --api chat against Ollama: err %v; want a stop naming max_completion_tokens\n%s", err, msg)
	}
	if got := srv.Completions(before+1) - before; got != 1 {
		t.Errorf("the server saw %d completion requests; want the length check alone", got)
	}
	res := filepath.Join(dir, "vllm.parquet")
	msg, err = ollamaRunErr("replay", "--trace", tr, "--endpoint", srv.BaseURL, "--api", "chat", "--limit", "5", "-o", res)
	if err != nil {
		t.Fatalf("--backend vllm: %v\n%s", err, msg)
	}
	if !strings.Contains(msg, "each request goes to its trace model") {
		t.Errorf("a model column of %q against a server listing %q:%q: not used:\n%s", ollamatest.Model, ollamatest.Model, "latest", msg)
	}
	for _, r := range readRows(t, res) {
		if r.Status != results.StatusOK || r.OutputTokens != r.OutputTokensTarget {
			t.Errorf("request %d: %s %q, %d of %d output tokens", r.RequestID, r.Status, r.Error, r.OutputTokens, r.OutputTokensTarget)
		}
	}
}

// TestOllamaAgents replays an agent session against the real engine with two slots: call 0,
// then after a tool gap two branches forked from it (call 1 appends to 0's context; call 2,
// a subagent, shares only 0's prompt), a join of both (3) and one more call (4). The
// engine's own accounts say the contexts grew as the trace says: every prompt is its
// target plus BOS; the runner found in its cache, for the join and the call after it,
// exactly their first parent's prompt and answer but its last token; and of the two
// branches, the one that took the slot holding call 0's context found what it shares
// with it (call 1: 0's prompt and answer; call 2: 0's prompt), the other an empty slot.
// The branches overlapped on the two slots.
func TestOllamaAgents(t *testing.T) {
	srv := ollamatest.Start(t, ollamatest.Options{Parallel: 2, Debug: true})
	dir := t.TempDir()
	tr := filepath.Join(dir, "agents.parquet")
	reqs := writeAgentTrace(t, tr, 1, 4, 300, 60, 12, 200*time.Millisecond)
	res := filepath.Join(dir, "r.parquet")
	before := len(srv.CacheLoads())
	mustRun(t, "replay", "--trace", tr, "--endpoint", srv.BaseURL, "--model", ollamatest.Model, "--api", "chat", "--quiet", "-o", res)
	loads := srv.CacheLoads()[before+1:] // the first is the preflight's length check
	rows := readRows(t, res)
	if len(rows) != len(reqs) || len(loads) != len(rows) {
		t.Fatalf("%d rows, %d runner loads, for %d calls", len(rows), len(loads), len(reqs))
	}
	byID := map[int64]results.Result{}
	used := map[int64]int{}
	for _, r := range rows {
		byID[r.RequestID] = r
		if r.Status != results.StatusOK || r.OutputTokens != r.OutputTokensTarget || r.PromptTokensServer != r.PromptTokens+1 {
			t.Fatalf("call %d: %s %q, output %d of %d, prompt %d by usage for a target of %d (+1 BOS)",
				r.RequestID, r.Status, r.Error, r.OutputTokens, r.OutputTokensTarget, r.PromptTokensServer, r.PromptTokens)
		}
		n := 0
		for _, l := range loads {
			if l.Prompt == int(r.PromptTokensServer) {
				used[r.RequestID] = l.Used
				n++
			}
		}
		if n != 1 {
			t.Fatalf("call %d: %d runner loads of %d tokens, want 1 (the calls' lengths are distinct)", r.RequestID, n, r.PromptTokensServer)
		}
	}
	ctxOf := func(id int64) int { p := byID[id]; return int(p.PromptTokensServer+p.OutputTokens) - 1 }
	for _, id := range []int64{3, 4} {
		if parent := reqs[id].Call.Parents[0]; used[id] != ctxOf(parent) {
			t.Errorf("call %d: the runner found %d of its %d prompt tokens cached; its first parent %d's prompt and answer but the last token are %d",
				id, used[id], byID[id].PromptTokensServer, parent, ctxOf(parent))
		}
	}
	rootPrompt := int(byID[0].PromptTokensServer)
	if !(used[1] == ctxOf(0) && used[2] == 0) && !(used[2] == rootPrompt && used[1] == 0) {
		t.Errorf("branches: the runner found %d (call 1) and %d (call 2) cached tokens; want %d and 0, or 0 and %d", used[1], used[2], ctxOf(0), rootPrompt)
	}
	a, b := byID[1], byID[2]
	if !(a.SentNS < b.EndNS && b.SentNS < a.EndNS) {
		t.Errorf("the branches did not overlap on the two slots: [%d, %d] and [%d, %d]", a.SentNS, a.EndNS, b.SentNS, b.EndNS)
	}
	t.Logf("runner cache use by call: %v", used)
}
