package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/internal/parquettest"
	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/stats"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/wire"
)

// How a reasoning server says how much it reasoned.
const (
	countDetail     = "usage"       // completion_tokens_details.reasoning_tokens in the final usage (OpenAI's chat usage)
	countChunkUsage = "chunk_usage" // the running usage on every chunk (vLLM's continuous_usage_stats), no detail
	countNone       = "tokenizer"   // neither: the client counts the reasoning text
)

// reasoningChat is a chat server of a reasoning model, streaming in the shape of vLLM's chat
// endpoint with --reasoning-parser (vllm/entrypoints/openai/serving_chat.py; vLLM's
// docs/features/reasoning_outputs.md): a role chunk, 300 chunks of one reasoning token under
// field (reasoning_content, or reasoning as vLLM names it since late 2025), a pause, then 100 chunks
// of one content token flushed ten at a time 2 ms apart, the last with finish_reason, the
// usage chunk, [DONE]. It records,
// per request, how long after it read the request it flushed the first answer chunk: no
// client can see the answer sooner after sending.
type reasoningChat struct {
	field, count string
	pause        time.Duration

	mu     sync.Mutex
	served []time.Duration // time to first answer, as the server saw it
}

func (s *reasoningChat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var b struct {
		MaxTokens     int `json:"max_tokens"`
		StreamOptions struct {
			ContinuousUsageStats bool `json:"continuous_usage_stats"`
		} `json:"stream_options"`
	}
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &b); err != nil {
		http.Error(w, "bad json", 400)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	f := w.(http.Flusher)
	reasoning, answer := 300, 100
	if b.MaxTokens < reasoning+answer { // the preflight's short request: an answer only
		reasoning, answer = 0, b.MaxTokens
	}
	n := 0
	chunk := func(delta, fin string) {
		usage := ""
		if s.count == countChunkUsage && b.StreamOptions.ContinuousUsageStats {
			usage = fmt.Sprintf(`,"usage":{"prompt_tokens":16,"completion_tokens":%d,"total_tokens":%d}`, n, 16+n)
		}
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":%s,\"finish_reason\":%s}]%s}\n\n", delta, fin, usage)
	}
	chunk(`{"role":"assistant","content":""}`, "null")
	for range reasoning {
		n++
		chunk(`{"`+s.field+`":" think"}`, "null")
	}
	f.Flush()
	if reasoning > 0 {
		time.Sleep(s.pause)
	}
	for i := 1; i <= answer; i++ {
		n++
		fin := "null"
		if i == answer {
			fin = `"stop"`
		}
		if i == 1 && reasoning > 0 && r.Header.Get("X-Request-Id") != wire.PreflightRequestID {
			s.mu.Lock()
			s.served = append(s.served, time.Since(start)) // before the answer's first byte is written
			s.mu.Unlock()
		}
		chunk(`{"content":" word"}`, fin)
		if i == 1 {
			f.Flush()
		}
		if i%10 == 0 && reasoning > 0 { // the answer streams in steps, as a decode does
			f.Flush()
			time.Sleep(2 * time.Millisecond)
		}
	}
	detail := ""
	if s.count == countDetail {
		detail = fmt.Sprintf(`,"completion_tokens_details":{"reasoning_tokens":%d}`, reasoning)
	}
	fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":16,\"completion_tokens\":%d,\"total_tokens\":%d%s}}\n\ndata: [DONE]\n\n",
		n, 16+n, detail)
	f.Flush()
}

// TestReasoningRunEndToEnd: replays of a reasoning model that sends 300 reasoning tokens
// then 100 answer tokens, through both HTTP clients, under both field names, in each way
// of knowing the reasoning count. Every record says what the server served (400 output
// tokens, 300 of them reasoning, counted as the server allowed; the first answer at the
// 301st chunk); analyze's TTFT, TTFA, reasoning tokens and answer TPOT in text, JSON,
// summary.parquet and HTML are those of the records, TTFA no less than the server's own
// time to its first answer; compare shows them too.
func TestReasoningRunEndToEnd(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.parquet")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"trace", "synth", "--arrival", "constant", "--rate", "20", "--count", "4",
		"--prompt-tokens", "fixed:16", "--output-tokens", "fixed:400", "-o", tr}, &out, &errb); err != nil {
		t.Fatalf("synth: %v\n%s", err, errb.String())
	}
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	byTokenizer := int32(enc.Count(strings.Repeat(" think", 300))) // what the client's tokenizer makes of the reasoning served
	clients := []string{transport.HTTPClientNetHTTP}
	if autoClient() == transport.HTTPClientRaw {
		clients = append(clients, transport.HTTPClientRaw)
	}
	var runs []string
	for _, count := range []string{countDetail, countChunkUsage, countNone} {
		for _, field := range []string{"reasoning_content", "reasoning"} {
			for _, client := range clients {
				name := count + "/" + field + "/" + client
				srv := &reasoningChat{field: field, count: count, pause: 20 * time.Millisecond}
				hs := httptest.NewServer(srv)
				res := filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".parquet")
				args := []string{"replay", "--trace", tr, "--endpoint", hs.URL + "/v1", "--model", "m", "--api", "chat",
					"--encoding", tokenize.CL100kBase, "--http-client", client, "-q", "-o", res}
				out.Reset()
				errb.Reset()
				err := run(context.Background(), args, &out, &errb)
				hs.Close()
				if err != nil {
					t.Fatalf("%s: replay: %v\n%s", name, err, errb.String())
				}
				wantTok, wantSrc := int32(300), count
				if count == countNone {
					wantTok = byTokenizer
				}
				t.Run(name, func(t *testing.T) {
					checkReasoningRun(t, res, srv.served, wantTok, wantSrc)
				})
				runs = append(runs, res)
			}
		}
	}
	// compare: the first two runs (net/http and, on Linux, the raw client, each of the
	// usage detail) side by side, with TTFA, answer TPOT and reasoning tokens among the rows.
	out.Reset()
	if err := run(context.Background(), []string{"compare", "--json", runs[0], runs[1]}, &out, &errb); err != nil {
		t.Fatalf("compare: %v\n%s", err, errb.String())
	}
	var c struct {
		Sections []struct {
			Figures []struct {
				Key     string    `json:"key"`
				Values  []float64 `json:"values"`
				Changes []struct {
					Lo *float64 `json:"ci_lo"`
					Hi *float64 `json:"ci_hi"`
				} `json:"changes"`
			} `json:"figures"`
		} `json:"sections"`
	}
	if err := json.Unmarshal(out.Bytes(), &c); err != nil || len(c.Sections) == 0 {
		t.Fatalf("compare --json: %v\n%s", err, out.String())
	}
	got := map[string][]float64{}
	for _, r := range c.Sections[0].Figures {
		got[r.Key] = r.Values
		if len(r.Changes) != 1 || r.Changes[0].Lo == nil || r.Changes[0].Hi == nil {
			if strings.HasPrefix(r.Key, "ttfa_") || strings.HasPrefix(r.Key, "answer_tpot_") {
				t.Errorf("compare %s: changes %+v, want B's change with its interval", r.Key, r.Changes)
			}
		}
	}
	for i, p := range runs[:2] {
		recs, _, err := results.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var ttfa, tpot []float64
		for _, r := range recs {
			ttfa = append(ttfa, float64(r.FirstAnswerNS-r.SentNS)/1e6)
			tpot = append(tpot, float64(r.EndNS-r.FirstAnswerNS)/1e6/99)
		}
		for key, w := range map[string]float64{"ttfa_p50_ms": stats.Summarize(ttfa).P50, "answer_tpot_p50_ms": stats.Summarize(tpot).P50, "reasoning_tokens_p50": 300} {
			if v := got[key]; len(v) != 2 || math.Abs(v[i]-w) > 1e-9*math.Max(1, w) {
				t.Errorf("compare %s = %v, want run %d's %v", key, v, i, w)
			}
		}
	}
}

// checkReasoningRun checks one replay's records against what its server served, and
// analyze's outputs against the records.
func checkReasoningRun(t *testing.T, res string, served []time.Duration, wantTok int32, wantSrc string) {
	recs, _, err := results.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || len(served) != 4 {
		t.Fatalf("%d records, %d served, want 4", len(recs), len(served))
	}
	var ttft, ttfa, tpot []float64
	for _, r := range recs {
		if r.Status != results.StatusOK || len(r.ChunkNS) != 400 || r.OutputTokens != 400 || r.OutputTokensSource != results.SourceUsage {
			t.Fatalf("request %d: %s %q, %d chunks, %d output tokens (%s); want ok, 400, 400 (usage)",
				r.RequestID, r.Status, r.Error, len(r.ChunkNS), r.OutputTokens, r.OutputTokensSource)
		}
		if r.ReasoningTokens != wantTok || r.ReasoningTokensSource != wantSrc {
			t.Errorf("request %d: reasoning %d (%s), want %d (%s)", r.RequestID, r.ReasoningTokens, r.ReasoningTokensSource, wantTok, wantSrc)
		}
		if r.FirstTokenNS != r.SentNS+r.ChunkNS[0] || r.FirstAnswerNS != r.SentNS+r.ChunkNS[300] {
			t.Errorf("request %d: first token %d, first answer %d; want the arrivals of chunks 0 and 300", r.RequestID, r.FirstTokenNS, r.FirstAnswerNS)
		}
		ttft = append(ttft, float64(r.FirstTokenNS-r.SentNS)/1e6)
		ttfa = append(ttfa, float64(r.FirstAnswerNS-r.SentNS)/1e6)
		tpot = append(tpot, float64(r.EndNS-r.FirstAnswerNS)/1e6/float64(400-r.ReasoningTokens-1))
	}
	// Causality, not timing: the client saw each answer no sooner after its send than the
	// server, which read the request after it was sent, began writing it. The raw client
	// dates a read by the kernel's receive time, CLOCK_REALTIME put on the run's monotonic
	// clock (transport's rawResp.stamp): a slewing wall clock may move that by up to
	// 500 ppm of the run, under 1 ms here, the slack allowed.
	var minServed time.Duration = math.MaxInt64
	for _, d := range served {
		minServed = min(minServed, d)
	}
	if m := slices.Min(ttfa); m < float64(minServed-time.Millisecond)/1e6 {
		t.Errorf("TTFA min %v ms below the server's least time to its first answer, %v", m, minServed)
	}
	want := map[string]stats.Quantiles{"ttft_ms": stats.Summarize(ttft), "ttfa_ms": stats.Summarize(ttfa), "answer_tpot_ms": stats.Summarize(tpot),
		"reasoning_tokens": stats.Summarize([]float64{float64(wantTok), float64(wantTok), float64(wantTok), float64(wantTok)})}

	html := filepath.Join(t.TempDir(), "r.html")
	pq := filepath.Join(t.TempDir(), "pq")
	checkAnalyzeFigures(t, want, "--html", html, "--parquet", pq, res)
	var out, errb bytes.Buffer
	out.Reset()
	if err := run(context.Background(), []string{"analyze", res}, &out, &errb); err != nil {
		t.Fatalf("analyze: %v\n%s", err, errb.String())
	}
	for _, line := range []string{fmt.Sprintf("  %-22s %9d %10.3f %10.3f", "TTFA (first answer)", 4, want["ttfa_ms"].Mean, want["ttfa_ms"].P50),
		fmt.Sprintf("  %-22s %9d %10.3f %10.3f", "TPOT (answer)", 4, want["answer_tpot_ms"].Mean, want["answer_tpot_ms"].P50),
		fmt.Sprintf("  %-22s %9d %10.3f %10.3f", "reasoning tokens", 4, float64(wantTok), float64(wantTok)),
		"; counted by " + wantSrc + " 4)\n"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("analyze's text lacks %q:\n%s", line, out.String())
		}
	}
	h, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`id="plot-ttfa-cdf"`, fmt.Sprintf("<td>TTFA (first answer)</td><td>4</td><td>%.3f</td><td>%.3f</td>", want["ttfa_ms"].Mean, want["ttfa_ms"].P50)} {
		if !bytes.Contains(h, []byte(s)) {
			t.Errorf("HTML lacks %s", s)
		}
	}
	sum := parquettest.Row(t, filepath.Join(pq, "summary.parquet"), 0)
	for col, w := range map[string]float64{"ttfa_ms_p50": want["ttfa_ms"].P50, "answer_tpot_ms_p50": want["answer_tpot_ms"].P50,
		"reasoning_tokens_p50": float64(wantTok), "ttft_ms_p50": want["ttft_ms"].P50} {
		if v, ok := sum[col].(float64); !ok || !same(v, w) {
			t.Errorf("summary.parquet %s = %v, want %v", col, sum[col], w)
		}
	}
}

func same(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
