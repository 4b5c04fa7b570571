package replay

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/replay/results"
	"github.com/llmreplay/llmreplay/replay/transport"
	"github.com/llmreplay/llmreplay/trace"
	"github.com/llmreplay/llmreplay/wire"
)

// wordPrompter builds a prompt of "w " repeated PromptTokens times.
var wordPrompter = PrompterFunc(func(dst []byte, r *trace.Request) ([]byte, error) {
	for range r.PromptTokens {
		dst = append(dst, "w "...)
	}
	return dst, nil
})

func newTestClient(t *testing.T, base *url.URL, mod func(*transport.ClientOptions)) *transport.Client {
	t.Helper()
	o := transport.ClientOptions{BaseURL: base, API: wire.APICompletions, Backend: wire.BackendVLLM, Model: "m", Timeout: 5 * time.Second, MaxInflight: 64}
	if mod != nil {
		mod(&o)
	}
	c, err := transport.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// uniformTrace returns n requests arriving every gap.
func uniformTrace(n int, gap time.Duration, prompt, output int32) []trace.Request {
	reqs := make([]trace.Request, n)
	for i := range reqs {
		reqs[i] = trace.Request{ID: int64(100 + i), Arrival: time.Duration(i) * gap, PromptTokens: prompt, OutputTokens: output}
	}
	return reqs
}

// runTrace replays reqs at speedup 1 against c and reads the results back.
func runTrace(t *testing.T, ctx context.Context, c *transport.Client, reqs []trace.Request, mod func(*Options)) (*Summary, []results.Result, *results.RunMeta) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "results.parquet")
	o := Options{Source: trace.NewSliceSource(reqs), Client: c, Prompter: wordPrompter, Speedup: 1, Output: out, Grace: time.Second}
	if mod != nil {
		mod(&o)
	}
	sum, err := Run(ctx, o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	res, meta, err := results.ReadFile(o.Output)
	if err != nil {
		t.Fatal(err)
	}
	return sum, res, meta
}

func byStatus(res []results.Result) map[results.Status]int {
	m := map[results.Status]int{}
	for _, r := range res {
		m[r.Status]++
	}
	return m
}
