package replay

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/tokenize"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// BenchmarkAgentContexts measures what an agent replay costs the replayer per session, on
// the production path (the builder's prompts, the chat API, the raw client's request
// heads): each iteration is one session whose first call has a 99,000-token prompt and
// whose second call, after a 500-token answer, a 100,500-token one (the first call's
// context, the answer, 1,000 new tokens). It reports the p50 and p99 of building each
// call's request (root: the whole prompt built and escaped; next: the answer and the new
// text appended to the 100k context, which is not copied) and the heap every session
// keeps live after a GC, with its second call's request queued (its context held):
//
//	go test -run '^$' -bench AgentContexts -benchtime 1000x ./replay
//
// -benchtime 1000x holds 1,000 live sessions of 100k-token contexts at the end.
func BenchmarkAgentContexts(b *testing.B) {
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		b.Fatal(err)
	}
	bld, err := tokenize.NewBuilder(enc, tokenize.BuilderOptions{Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	base, _ := wire.BaseURL("http://127.0.0.1:9/v1")
	c, err := transport.NewClient(transport.ClientOptions{BaseURL: base, API: wire.APIChat, Backend: wire.BackendVLLM, Model: "m", MaxInflight: 64})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	answer, err := bld.AppendPrompt(nil, tokenize.PromptSpec{RequestID: -1, Tokens: 500})
	if err != nil {
		b.Fatal(err)
	}
	n := b.N
	var reqs []trace.Request
	for i := range n {
		k := trace.NewCall()
		k.Parents, k.Gap = []int64{int64(2 * i)}, time.Second
		reqs = append(reqs,
			trace.Request{ID: int64(2 * i), PromptTokens: 99000, OutputTokens: 500, SessionID: int64(i), HasSession: true},
			trace.Request{ID: int64(2*i + 1), Arrival: time.Hour, PromptTokens: 100500, OutputTokens: 500, SessionID: int64(i), HasSession: true, Call: k})
	}
	slices.SortStableFunc(reqs, func(a, b trace.Request) int { return int(a.Arrival - b.Arrival) })
	plan, err := PlanAgents(trace.NewSliceSource(reqs), "bench", planner{speedup: 1}, 0)
	if err != nil {
		b.Fatal(err)
	}
	o := &Options{Client: c, Prompter: NewPrompter(PrompterOptions{Builder: bld}), Speedup: 1, Sessions: SessionsDAG, AgentPlan: plan}
	pr := &feed{o: o, tr: c.Transport(), prog: new(Progress), results: newResultQueue(), fail: func(err error) { b.Fatal(err) },
		sess: &sessions{convs: map[int64]*conv{}, wake: make(chan bool, 1), agents: plan, open: plan.Calls}, bodyPrefixes: map[string][]byte{}}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	rootNS, nextNS := make([]float64, 0, n), make([]float64, 0, n)
	b.ResetTimer()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		req, err := pr.rootCall(&reqs[i])
		if err != nil {
			b.Fatal(err)
		}
		rootNS = append(rootNS, float64(time.Since(t0)))
		req.Answer = append(req.Answer, answer...)
		res := results.NewResult(req.ID, 0, 0, req.PromptTokens, req.OutputTokens)
		res.Status, res.OutputTokens = results.StatusOK, 500
		t0 = time.Now()
		pr.callEnded(req, res, 0) // builds and queues the next call
		nextNS = append(nextNS, float64(time.Since(t0)))
	}
	b.StopTimer()
	if len(pr.sess.q) != n {
		b.Fatalf("%d calls queued, want %d", len(pr.sess.q), n)
	}
	if got := pr.sess.q[0].PromptTokens; got != 100500 {
		b.Fatalf("next call of %d tokens, want 100500", got)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(pr)
	slices.Sort(rootNS)
	slices.Sort(nextNS)
	q := func(s []float64, p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
	b.ReportMetric(q(rootNS, 0.5)/1e3, "root-p50-µs")
	b.ReportMetric(q(rootNS, 0.99)/1e3, "root-p99-µs")
	b.ReportMetric(q(nextNS, 0.5)/1e3, "next-p50-µs")
	b.ReportMetric(q(nextNS, 0.99)/1e3, "next-p99-µs")
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(n)/1024, "KiB/session")
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "MiB-live")
}
