package sim

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/llmreplay/llmreplay/tokenize"
)

// idsSeq is a core sequence for a token-id prompt with its block hashes, as the handler
// builds it (output tokens hashed with word offset 0).
func idsSeq(cfg *Config, ids []int, target int) *seq {
	s := newSeq(len(ids), target)
	h := newBlockHasher(cfg.PrefixBlockTokens)
	h.addInts(ids)
	for i := range target - 1 {
		h.add(uint32(1 + i%7))
	}
	s.hashes, s.promptBlocks = h.hashes, len(ids)/h.size
	return s
}

func TestBlockHasherChain(t *testing.T) {
	a := newBlockHasher(4)
	a.addInts([]int{1, 2, 3, 4, 5, 6, 7, 8, 9})
	b := newBlockHasher(4)
	b.addInts([]int{1, 2, 3, 4, 5, 6, 7, 9})
	c := newBlockHasher(4)
	c.addInts([]int{0, 2, 3, 4, 5, 6, 7, 8})
	if len(a.hashes) != 2 || a.n != 1 || len(b.hashes) != 2 {
		t.Fatalf("blocks %d (+%d), %d", len(a.hashes), a.n, len(b.hashes))
	}
	// Equal prefixes, equal hashes; a change in a block changes it and every later one.
	if a.hashes[0] != b.hashes[0] || a.hashes[1] == b.hashes[1] || c.hashes[0] == a.hashes[0] || c.hashes[1] == a.hashes[1] {
		t.Fatalf("a %x b %x c %x", a.hashes, b.hashes, c.hashes)
	}
}

// TestCorePrefixShareAndAccounting runs a random workload of prompts drawn from a few
// shared prefixes through the core, checking after every step that the used KV is the
// private reservations plus the held blocks, that used plus cached KV fits the capacity,
// and at the end that everything is free again and the cache's counters add up.
func TestCorePrefixShareAndAccounting(t *testing.T) {
	cfg := linear()
	cfg.KVCacheTokens, cfg.MaxModelLen, cfg.MaxBatch = 3000, 1000, 8
	c := newCore(&cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	prefixes := make([][]int, 4)
	for i := range prefixes {
		prefixes[i] = make([]int, 64+rng.IntN(200))
		for j := range prefixes[i] {
			prefixes[i][j] = 1000*(i+1) + j
		}
	}
	var all []*seq
	var hits int64
	check := func() {
		t.Helper()
		p := c.pc
		used := 0
		for _, s := range c.running {
			used += s.kv
			for _, i := range s.blocks {
				if p.blocks[i].ref < 1 {
					t.Fatalf("held block with ref %d", p.blocks[i].ref)
				}
			}
		}
		held := 0
		for _, i := range p.m {
			if p.blocks[i].ref > 0 {
				held++
			}
		}
		free := 0
		for i := p.head; i != nilBlock; i = p.blocks[i].next {
			free++
		}
		if free != p.nFree || held+free != len(p.m) {
			t.Fatalf("free list %d, nFree %d, held %d, cached %d", free, p.nFree, held, len(p.m))
		}
		if c.kvUsed != used+held*p.size || c.kvUsed+p.nFree*p.size > cfg.KVCacheTokens {
			t.Fatalf("kvUsed %d, private %d + held %d blocks, free %d blocks, capacity %d", c.kvUsed, used, held, p.nFree, cfg.KVCacheTokens)
		}
	}
	for round := range 300 {
		for range rng.IntN(3) {
			pre := prefixes[rng.IntN(len(prefixes))]
			ids := append(append([]int(nil), pre...), make([]int, 1+rng.IntN(40))...)
			for j := len(pre); j < len(ids); j++ {
				ids[j] = 50000 + round*100 + j
			}
			s := idsSeq(&cfg, ids, 1+rng.IntN(60))
			all = append(all, s)
			c.enqueue(s, c.now)
		}
		if rng.IntN(10) == 0 && len(c.running) > 0 {
			c.running[rng.IntN(len(c.running))].canceled.Store(true)
			c.dropCanceled()
			check()
		}
		if !c.idle() {
			c.step()
			check()
		}
	}
	runCore(t, c)
	check()
	for _, s := range all {
		hits += int64(s.cached)
		if s.cached%16 != 0 || s.cached >= s.prompt {
			t.Fatalf("cached %d of %d", s.cached, s.prompt)
		}
	}
	if c.kvUsed != 0 || c.pc.hits != hits || hits == 0 || c.pc.evictions == 0 {
		t.Fatalf("kvUsed %d, hits %d (sum %d), evictions %d", c.kvUsed, c.pc.hits, hits, c.pc.evictions)
	}
	t.Logf("%d requests, %d cached tokens, %d evictions", len(all), hits, c.pc.evictions)
}

// TestCoreConcurrentShare: a request admitted while another holds the prefix shares its
// blocks (reserving only the rest), and prefills only the uncached part.
func TestCoreConcurrentShare(t *testing.T) {
	cfg := linear()
	c := newCore(&cfg)
	pre := ids(100) // 6 full blocks of 16
	a := idsSeq(&cfg, append(append([]int(nil), pre...), 1, 2, 3), 50)
	c.enqueue(a, 0)
	for a.prefilled < a.prompt {
		c.step()
	}
	if a.kv != 103+50-6*16 || c.kvUsed != 103+50 || len(a.blocks) != 6 {
		t.Fatalf("a: private %d, used %d, blocks %d", a.kv, c.kvUsed, len(a.blocks))
	}
	b := idsSeq(&cfg, append(append([]int(nil), pre...), 4, 5), 10)
	c.enqueue(b, c.now)
	c.step()
	if b.cached != 96 || b.kv != 102+10-96 || c.kvUsed != 103+50+102+10-96 {
		t.Fatalf("b: cached %d, private %d, used %d", b.cached, b.kv, c.kvUsed)
	}
	runCore(t, c)
	if c.kvUsed != 0 || c.pc.nFree != len(c.pc.m) {
		t.Fatalf("after: used %d, free %d of %d", c.kvUsed, c.pc.nFree, len(c.pc.m))
	}
}

// prefixSim starts a tiny sim whose time runs fast (model time is what the tests check).
func prefixSim(t *testing.T, mod func(*Config)) (*Running, Config) {
	t.Helper()
	cfg, _ := Profile("tiny")
	cfg.TimeScale = 1000
	if mod != nil {
		mod(&cfg)
	}
	return startSim(t, cfg), cfg
}

// wholeUsage posts a non-streaming request and returns its usage.
func wholeUsage(t *testing.T, url string, body map[string]any) (prompt, cached int, res *result) {
	t.Helper()
	res = post(t, http.DefaultClient, url, body)
	var v struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Details      *struct {
				CachedTokens *int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if res.status != 200 || json.Unmarshal(res.body, &v) != nil {
		t.Fatalf("status %d body %s", res.status, res.body)
	}
	if v.Usage.Details == nil || v.Usage.Details.CachedTokens == nil {
		t.Fatalf("usage without prompt_tokens_details.cached_tokens: %s", res.body)
	}
	return v.Usage.PromptTokens, *v.Usage.Details.CachedTokens, res
}

// sharedPrefixPrompts builds, through the replayer's token-id builder, n prompts of
// prefix+tail tokens: request i starts with the blocks of prefix i%k (trace blocks of
// 64 tokens), then a tail of its own.
func sharedPrefixPrompts(t *testing.T, n, k, prefix, tail int) [][]int32 {
	t.Helper()
	enc, err := tokenize.Get(tokenize.CL100kBase)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tokenize.NewBuilder(enc, tokenize.BuilderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]int32, n)
	for i := range out {
		var blocks []int64
		for j := range prefix / 64 {
			blocks = append(blocks, int64(1000*(i%k)+j))
		}
		if out[i], err = b.AppendTokenIDs(nil, tokenize.PromptSpec{RequestID: int64(i), Tokens: prefix + tail, Blocks: blocks, BlockTokens: 64}, 100256); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestPrefixHitRate sends, one at a time, n token-id prompts of a 256-token prefix
// (one of k, used round robin) and a 16-token tail of their own, each generating one
// token, and holds the hit rate (cached / prompt tokens, from usage and from /metrics)
// against the analytical one.
//
// With the cache ample, every request after the first of its prefix reads the whole
// prefix: rate = (n-k)*256 / (n*272). With a small KV cache (docs/sim.md): each request
// reserves 273 tokens while it runs, so C = (kv_cache_tokens - 273) / 16 blocks stay
// cached beside it; a request frees its 17 blocks tail first, so at the last admission
// before prefix p comes back, the k-2 requests that ended since p's last use have freed
// 17 blocks each, all more recent, and the cache has kept p's first
// m = clamp(C - 17(k-2), 0, 16) blocks: rate = (n-k)*16m / (n*272).
func TestPrefixHitRate(t *testing.T) {
	const n, k, prefix, tail = 40, 4, 256, 16
	prompts := sharedPrefixPrompts(t, n, k, prefix, tail)
	for _, tc := range []struct {
		name string
		kv   int
		m    int // prefix blocks kept, by the rule above
	}{
		{"ample", 65536, 16},
		{"C=42", 273 + 42*16, 8},
		{"C=45", 273 + 45*16 + 15, 11},
		{"C=30", 273 + 30*16, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, cfg := prefixSim(t, func(c *Config) { c.KVCacheTokens, c.MaxModelLen = tc.kv, 512 })
			if C := (cfg.KVCacheTokens - (prefix + tail + 1)) / 16; tc.m != min(16, max(0, C-17*(k-2))) {
				t.Fatalf("table: C = %d gives m = %d", C, min(16, max(0, C-17*(k-2))))
			}
			var promptSum, cachedSum int
			for i, p := range prompts {
				pt, ct, _ := wholeUsage(t, r.BaseURL()+"/completions", map[string]any{"prompt": p, "max_tokens": 1, "ignore_eos": true})
				want := 0
				if i >= k {
					want = 16 * tc.m
				}
				if pt != prefix+tail || ct != want {
					t.Errorf("request %d: prompt %d cached %d, want %d cached", i, pt, ct, want)
				}
				promptSum += pt
				cachedSum += ct
			}
			got := float64(cachedSum) / float64(promptSum)
			analytical := float64((n-k)*16*tc.m) / float64(n*(prefix+tail))
			if math.Abs(got-analytical) > 0.02 {
				t.Errorf("hit rate %.4f, analytical %.4f", got, analytical)
			}
			m := scrapeAll(t, r)
			if m["vllm:prefix_cache_queries_total"] != float64(promptSum) || m["vllm:prefix_cache_hits_total"] != float64(cachedSum) {
				t.Errorf("/metrics queries %v hits %v, usage says %d and %d", m["vllm:prefix_cache_queries_total"], m["vllm:prefix_cache_hits_total"], promptSum, cachedSum)
			}
			t.Logf("kv %d: hit rate %.4f (analytical %.4f)", tc.kv, got, analytical)
		})
	}
}

// scrapeAll reads /metrics into name (without labels) -> value.
func scrapeAll(t *testing.T, r *Running) map[string]float64 {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(r.BaseURL(), "/v1") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("metric line %q", sc.Text())
		}
		m[name[:strings.IndexByte(name+"{", '{')]] += v
	}
	return m
}

// TestPrefixCachedTTFT: a prompt sent a second time reads all its full blocks but the
// last token's from the cache, and its TTFT (model time) is the step model's prefill
// step over the uncached tokens only, attending over the whole prompt.
func TestPrefixCachedTTFT(t *testing.T) {
	r, cfg := prefixSim(t, nil)
	url := r.BaseURL() + "/completions"
	for _, tc := range []struct{ prompt, cached int }{
		{129, 128}, // 8 blocks + 1 token: all 8 blocks hit
		{128, 112}, // exactly 8 blocks: the last holds the last token, so it is computed
	} {
		p := ids(tc.prompt)
		p[0] = tc.prompt // a prefix of its own
		var ttft [2]int64
		for i := range 2 {
			_, ct, res := wholeUsage(t, url, map[string]any{"prompt": p, "max_tokens": 2, "ignore_eos": true})
			ttft[i] = int64(res.modelNs(t, TrailerFirst) - res.modelNs(t, TrailerArrival))
			if want := []int{0, tc.cached}[i]; ct != want {
				t.Fatalf("prompt %d, send %d: cached %d, want %d", tc.prompt, i, ct, want)
			}
		}
		// The uncached tokens attend over the cached ones too.
		cold := cfg.StepTime(tc.prompt, 0, tc.prompt, AttentionPairs(0, tc.prompt))
		warm := cfg.StepTime(tc.prompt-tc.cached, 0, tc.prompt, AttentionPairs(tc.cached, tc.prompt-tc.cached))
		if ttft[0] != int64(cold) || ttft[1] != int64(warm) {
			t.Errorf("prompt %d: TTFT %v then %v, want %v then %v", tc.prompt, ttft[0], ttft[1], cold, warm)
		}
		// Saved: the cached tokens' prefill and the attention among them; the uncached
		// tokens' attention over them is still paid.
		saved := float64(tc.cached)*float64(cfg.PrefillPerToken) + cfg.AttentionPerPairNs*float64(AttentionPairs(0, tc.cached))
		if got := float64(ttft[0] - ttft[1]); math.Abs(got-saved) > 1 {
			t.Errorf("prompt %d: TTFT fell by %vns, want %d x prefill_per_token + the cached tokens' own attention = %vns", tc.prompt, got, tc.cached, saved)
		}
	}
}

// TestPrefixUsageShapes checks prompt_tokens_details for completions and chat,
// streaming (final usage chunk only, as vLLM) and not, and that a conversation's next
// turn reads the previous turn's prompt and answer from the cache.
func TestPrefixUsageShapes(t *testing.T) {
	r, _ := prefixSim(t, nil)
	sys := strings.Repeat("You are a careful assistant who answers in full sentences. ", 20)
	turn1 := []map[string]any{{"role": "system", "content": sys}, {"role": "user", "content": "Name three rivers."}}
	p1, c1, res := wholeUsage(t, r.BaseURL()+"/chat/completions", map[string]any{"messages": turn1, "max_tokens": 40, "ignore_eos": true})
	var whole struct {
		Choices []struct{ Message struct{ Content string } }
	}
	json.Unmarshal(res.body, &whole)
	if c1 != 0 {
		t.Fatalf("first turn cached %d", c1)
	}
	// Turn 2 sends the conversation back: the KV of turn 1 (prompt and answer less its
	// last token) is cached in full blocks.
	turn2 := append(turn1, map[string]any{"role": "assistant", "content": whole.Choices[0].Message.Content},
		map[string]any{"role": "user", "content": "And three mountains?"})
	res2 := post(t, http.DefaultClient, r.BaseURL()+"/chat/completions", map[string]any{"messages": turn2, "max_tokens": 5, "stream": true,
		"stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}})
	if !res2.done || len(res2.chunks) != 7 {
		t.Fatalf("stream: done %v, %d chunks", res2.done, len(res2.chunks))
	}
	for _, ch := range res2.chunks[:6] {
		if _, has := ch["usage"].(map[string]any)["prompt_tokens_details"]; has {
			t.Fatalf("continuous usage carries prompt_tokens_details: %v", ch)
		}
	}
	d, _ := res2.usage["prompt_tokens_details"].(map[string]any)
	if want := (p1 + 40 - 1) / 16 * 16; d == nil || d["cached_tokens"] != float64(want) {
		t.Fatalf("turn 2 final usage %v, want cached_tokens %d", res2.usage, want)
	}

	// completions, streaming: the same text prompt twice
	text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 10)
	var cached []float64
	for range 2 {
		res := post(t, http.DefaultClient, r.BaseURL()+"/completions", map[string]any{"prompt": text, "max_tokens": 3, "stream": true,
			"stream_options": map[string]any{"include_usage": true}})
		d, _ := res.usage["prompt_tokens_details"].(map[string]any)
		if d == nil {
			t.Fatalf("no prompt_tokens_details in %v", res.usage)
		}
		cached = append(cached, d["cached_tokens"].(float64))
	}
	enc, _ := tokenize.Get(tokenize.CL100kBase)
	if n := enc.Count(text); cached[0] != 0 || cached[1] != float64((n-1)/16*16) {
		t.Fatalf("completions text prompt of %d tokens: cached %v", n, cached)
	}

	// Off: usage is what it was, and /metrics has no prefix counters.
	off, _ := prefixSim(t, func(c *Config) { c.PrefixCache = false })
	for range 2 {
		res := post(t, http.DefaultClient, off.BaseURL()+"/completions", map[string]any{"prompt": ids(100), "max_tokens": 2})
		if strings.Contains(string(res.body), "prompt_tokens_details") {
			t.Fatalf("prefix cache off: %s", res.body)
		}
		res = post(t, http.DefaultClient, off.BaseURL()+"/completions", map[string]any{"prompt": ids(100), "max_tokens": 2, "stream": true,
			"stream_options": map[string]any{"include_usage": true}})
		if _, has := res.usage["prompt_tokens_details"]; has {
			t.Fatalf("prefix cache off: %v", res.usage)
		}
	}
	if m := scrapeAll(t, off); len(m) == 0 || m["vllm:prefix_cache_queries_total"] != 0 {
		t.Fatalf("prefix cache off: metrics %v", m)
	}
}

func TestPrefixInfo(t *testing.T) {
	cfg, _ := Profile("moe-230b-8gpu")
	in := Analyze(cfg)
	if pc := in.PrefixCache; pc == nil || !pc.Enabled || pc.BlockTokens != 16 || pc.CapacityBlocks != 1_000_000/16 || pc.Rule == "" {
		t.Fatalf("prefix cache info %+v", in.PrefixCache)
	}
	cfg.PrefixCache = false
	if pc := Analyze(cfg).PrefixCache; pc == nil || pc.Enabled || pc.CapacityBlocks != 0 {
		t.Fatalf("off: %+v", pc)
	}
	cfg.PrefixCache, cfg.PrefixBlockTokens = true, 0
	if cfg.Validate() == nil {
		t.Fatal("block size 0 accepted")
	}
}

// TestRequestLog: X-Request-Id is echoed and recorded, with the request's outcome and
// counts, one JSON line per generation request.
func TestRequestLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "req.jsonl")
	r, _ := prefixSim(t, func(c *Config) { c.RequestLog = path })
	send := func(id string, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, r.BaseURL()+"/completions", strings.NewReader(body))
		if id != "" {
			req.Header.Set(RequestIDHeader, id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		// Read to the end: closing a stream early cancels it (the log would say canceled).
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if got := send("run7-42", `{"prompt":[5,6,7],"max_tokens":3}`).Header.Get(RequestIDHeader); got != "run7-42" {
		t.Fatalf("echoed %q", got)
	}
	send("run7-43", `{"prompt":[5,6,7],"max_tokens":0}`)
	send("", `{"prompt":[5,6,7],"max_tokens":2,"stream":true}`)
	r.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), b)
	}
	var recs []LogRecord
	for _, l := range lines {
		var rec LogRecord
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		recs = append(recs, rec)
	}
	if a := recs[0]; a.RequestID != "run7-42" || a.Outcome != "ok" || a.Status != 200 || a.PromptTokens != 3 || a.CompletionTokens != 3 || a.LastNs <= a.ArrivalNs || !strings.HasPrefix(a.ID, "cmpl-") {
		t.Errorf("ok line %+v", a)
	}
	if b := recs[1]; b.RequestID != "run7-43" || b.Outcome != "bad_request" || b.Status != 400 || b.Error == "" {
		t.Errorf("bad request line %+v", b)
	}
	if c := recs[2]; c.RequestID != "" || !c.Stream || c.Outcome != "ok" {
		t.Errorf("stream line %+v", c)
	}
}

// BenchmarkBlockHash: hashing a 4,096-token prompt into blocks of 16 (handler side).
func BenchmarkBlockHash(b *testing.B) {
	p := ids(4096)
	b.ReportAllocs()
	for b.Loop() {
		h := newBlockHasher(16)
		h.hashes = make([]uint64, 0, 4096/16)
		h.addInts(p)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/4096, "ns/token")
}

// BenchmarkCorePrefix: the engine's serial cost per request, with the prefix cache and
// without, on a stream of requests that share a 1,024-token prefix (8 running, 64
// output tokens, the cache churning through a 64k-token KV cache). One op is one request.
func BenchmarkCorePrefix(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			cfg := linear()
			cfg.PrefixCache, cfg.KVCacheTokens, cfg.MaxBatch, cfg.MaxBatchedTokens = on, 65536, 8, 4096
			c := newCore(&cfg)
			pre := ids(1024)
			var seqs []*seq
			for i := range 512 {
				p := append(append([]int(nil), pre...), 7, 8, 9, i)
				seqs = append(seqs, idsSeq(&cfg, p, 64))
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				src := seqs[i%len(seqs)]
				s := newSeq(src.prompt, src.target)
				s.hashes, s.promptBlocks = src.hashes, src.promptBlocks
				s.blocks = make([]int32, 0, s.promptBlocks)
				c.enqueue(s, c.now)
				for c.waitingLen() > 0 || len(c.running) >= cfg.MaxBatch {
					c.step()
				}
				i++
			}
		})
	}
}
