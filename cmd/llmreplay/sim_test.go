package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmreplay/llmreplay/sim"
	"github.com/spf13/pflag"
)

func TestSimHelpAndInfo(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"sim", "--help"}, &out, &errb); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"Examples:", "--fault", "--time-scale", "--kv-cache-tokens", "llmreplay sim --addr 127.0.0.1:8000", "--reasoning-share 0.75", "--reasoning-usage", "--pool-max-batched-tokens", "/v1/embeddings"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	out.Reset()
	err := run(context.Background(), []string{"sim", "--profile", "tiny", "--max-batch", "8", "--step-base", "2ms",
		"--attention-per-pair", "0.25", "--fault", "503=0.25", "--fault", "stall=0.5:3s", "--reasoning-share", "0.75", "--reasoning-usage",
		"--embedding-dim", "96", "--pool-max-batched-tokens", "1024", "--pool-max-batch", "3", "--print-info"}, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	var in sim.Info
	if err := json.Unmarshal(out.Bytes(), &in); err != nil {
		t.Fatal(err)
	}
	c := in.Config
	if c.Model != "sim-tiny" || c.MaxBatch != 8 || c.StepBase != 2*time.Millisecond || len(in.Steps) != 8 ||
		c.Faults.Status503 != 0.25 || c.Faults.Stall != 0.5 || c.Faults.StallFor != 3*time.Second || c.DecodePerSeq == 0 ||
		c.AttentionPerPairNs != 0.25 || c.ReasoningShare != 0.75 || !c.ReasoningUsage ||
		c.EmbeddingDim != 96 || c.PoolMaxBatchedTokens != 1024 || c.PoolMaxBatch != 3 || in.Pooling == nil || in.Pooling.FullStepInputs != 3 {
		t.Fatalf("overrides not applied: %+v", c)
	}
}

func TestSimRequestLogWritesNeedsRequestLog(t *testing.T) {
	err := run(context.Background(), []string{"sim", "--profile", "fixed", "--request-log-writes", "--print-info"}, io.Discard, io.Discard)
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--request-log-writes") || !strings.Contains(err.Error(), "--request-log FILE") {
		t.Fatalf("got %v, want a usage error naming --request-log-writes and --request-log", err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"sim", "--help"}, &out, io.Discard); !errors.Is(err, pflag.ErrHelp) {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "--request-log-writes") {
		t.Error("--help lacks --request-log-writes")
	}
}

func TestSimBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--profile", "huge"},
		{"--fault", "404=0.1"},
		{"--fault", "stall=2"},
		{"--ttft", "1s"}, // not the fixed profile
		{"--max-batch", "0"},
		{"--time-scale", "-1"},
		{"extra"},
		{"--request-log-writes"}, // without --request-log
		{"--reasoning-share", "1.5"},
		{"--embedding-dim", "0"},
		{"--pool-max-batch", "0"},
		{"--pool-max-batched-tokens", "-5"},
	} {
		err := run(context.Background(), append([]string{"sim", "--print-info"}, args...), io.Discard, io.Discard)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: got %v, want a usage error", args, err)
		}
	}
}

// syncBuffer lets the test read what the running command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestSimServesAndStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sim", "--addr", "127.0.0.1:0", "--profile", "fixed", "--ttft", "1ms", "--itl", "1ms", "--reasoning-share", "0.5"}, io.Discard, &errb)
	}()
	re := regexp.MustCompile(`http://127\.0\.0\.1:\d+/v1`)
	var base string
	for deadline := time.Now().Add(10 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		base = re.FindString(errb.String())
	}
	if base == "" {
		t.Fatalf("no base URL announced: %q", errb.String())
	}
	resp, err := http.Post(base+"/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 200 || body.Usage.CompletionTokens != 3 {
		t.Fatalf("status %d usage %+v", resp.StatusCode, body.Usage)
	}
	// The Messages API, with --reasoning-share: half the answer is a thinking block.
	resp, err = http.Post(base+"/messages", "application/json", strings.NewReader(`{"model":"sim-fixed","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Content []struct{ Type string } `json:"content"`
	}
	json.NewDecoder(resp.Body).Decode(&msg)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || msg.Content[1].Type != "text" {
		t.Fatalf("messages: status %d content %+v", resp.StatusCode, msg.Content)
	}
	if !strings.Contains(errb.String(), "reasoning: the first 50% of every answer") {
		t.Errorf("banner does not say the reasoning share: %q", errb.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sim did not stop on cancel")
	}
	if !strings.Contains(errb.String(), "stopping") {
		t.Errorf("no stop message: %q", errb.String())
	}
}

func TestSimPrefixCacheFlags(t *testing.T) {
	info := func(args ...string) (sim.Info, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"sim", "--profile", "tiny", "--print-info"}, args...), &out, io.Discard)
		var in sim.Info
		if err == nil {
			err = json.Unmarshal(out.Bytes(), &in)
		}
		return in, err
	}
	in, err := info()
	if err != nil || !in.Config.PrefixCache || in.PrefixCache == nil || !in.PrefixCache.Enabled || in.PrefixCache.BlockTokens != 16 || in.PrefixCache.CapacityBlocks != 65536/16 {
		t.Fatalf("default: %+v %v", in.PrefixCache, err)
	}
	if in, err = info("--prefix-block-tokens", "32", "--kv-cache-tokens", "100000"); err != nil || in.PrefixCache.BlockTokens != 32 || in.PrefixCache.CapacityBlocks != 3125 {
		t.Fatalf("--prefix-block-tokens 32: %+v %v", in.PrefixCache, err)
	}
	if in, err = info("--no-prefix-cache"); err != nil || in.Config.PrefixCache || in.PrefixCache.Enabled {
		t.Fatalf("--no-prefix-cache: %+v %v", in.PrefixCache, err)
	}
	for _, args := range [][]string{{"--prefix-block-tokens", "0"}, {"--no-prefix-cache", "--prefix-block-tokens", "32"}} {
		_, err := info(args...)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "prefix") {
			t.Errorf("%v: got %v, want a usage error naming the flag", args, err)
		}
	}
}

// TestSimServesEmbeddings: `llmreplay sim --profile embed-0.6b-1gpu` serves
// /v1/embeddings at the announced base URL and /rerank beside it, and its banner states
// the pooling engine's figures.
func TestSimServesEmbeddings(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sim", "--addr", "127.0.0.1:0", "--profile", "embed-0.6b-1gpu", "--time-scale", "100"}, io.Discard, &errb)
	}()
	re := regexp.MustCompile(`http://127\.0\.0\.1:\d+/v1`)
	var base string
	for deadline := time.Now().Add(10 * time.Second); base == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		base = re.FindString(errb.String())
	}
	if base == "" {
		t.Fatalf("no base URL announced: %q", errb.String())
	}
	for _, c := range []struct{ url, body, want string }{
		{base + "/embeddings", `{"input":["a","b c"]}`, `"usage":{"prompt_tokens":3,"total_tokens":3`},
		{strings.TrimSuffix(base, "/v1") + "/rerank", `{"query":"q","documents":["a","b c"]}`, `"usage":{"prompt_tokens":5,"total_tokens":5}`},
	} {
		resp, err := http.Post(c.url, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s, want %s", c.url, resp.StatusCode, b, c.want)
		}
	}
	cfg, _ := sim.Profile("embed-0.6b-1gpu")
	p := sim.Analyze(cfg).Pooling
	if !strings.Contains(errb.String(), fmt.Sprintf("embeddings, rerank: inputs of %d tokens take %.2f ms alone", p.RefInputTokens, p.SingleInputMs)) {
		t.Errorf("banner does not state the pooling figures: %q", errb.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("after cancel: %v", err)
	}
}
