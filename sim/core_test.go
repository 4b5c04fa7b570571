package sim

import (
	"math"
	"testing"
	"time"
)

// linear is a dense test model with round numbers, so expected times are easy sums.
func linear() Config {
	c, _ := Profile("tiny")
	c.StepBase = time.Millisecond
	c.PrefillPerToken = 10 * time.Microsecond
	c.DecodePerSeq = 100 * time.Microsecond
	c.ContextPerToken = time.Microsecond
	c.MaxBatch = 4
	c.MaxBatchedTokens = 64
	c.KVCacheTokens = 10000
	c.MaxModelLen = 8192
	return c
}

// run steps c until idle and returns the step count.
func runCore(t *testing.T, c *core) int {
	t.Helper()
	n := 0
	for !c.idle() {
		if c.step() == 0 {
			t.Fatalf("step made no progress with %d running, %d waiting", len(c.running), c.waitingLen())
		}
		n++
		if n > 1e6 {
			t.Fatal("no end")
		}
	}
	return n
}

func TestStepTimeFormula(t *testing.T) {
	c := linear()
	// 1ms + 10us*20 + 100us*3 + 1us*500 (+ 1ns per attention pair)
	if got, want := c.StepTime(20, 3, 500, 0), 2*time.Millisecond; got != want {
		t.Errorf("StepTime = %v, want %v", got, want)
	}
	if got, want := c.StepTime(20, 3, 500, 1000), 2*time.Millisecond+time.Microsecond; got != want {
		t.Errorf("StepTime with 1,000 attention pairs = %v, want %v", got, want)
	}
	// A chunk of 3 after 4 tokens: 3*4 pairs with those, and 0+1+2 among themselves.
	if got := AttentionPairs(4, 3); got != 15 {
		t.Errorf("AttentionPairs(4, 3) = %d, want 15", got)
	}
	if got := AttentionPairs(99_000, 1000); got != 1000*99_000+1000*999/2 {
		t.Errorf("AttentionPairs(99000, 1000) = %d", got)
	}
	m, _ := Profile("moe-230b-8gpu")
	for _, tc := range []struct {
		n    int
		want float64
	}{{0, 0}, {1, 8}, {8, 256 * (1 - math.Pow(248.0/256, 8))}, {100000, 256}} {
		if got := m.ExpectedExperts(tc.n); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("ExpectedExperts(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestCoreSingleSequenceExact(t *testing.T) {
	cfg := linear()
	c := newCore(&cfg)
	s := newSeq(150, 5) // budget 64: prefill chunks 64, 64, 22
	c.enqueue(s, 0)
	steps := runCore(t, c)
	// prefill: contexts 64, 128, 150; decode contexts 151..154
	// and the chunks attend over the tokens before them.
	want := cfg.StepTime(64, 0, 64, AttentionPairs(0, 64)) + cfg.StepTime(64, 0, 128, AttentionPairs(64, 64)) +
		cfg.StepTime(22, 0, 150, AttentionPairs(128, 22))
	first := want
	if pf := cfg.PrefillTime(150, 0); pf != first {
		t.Fatalf("PrefillTime(150, 0) = %v, the three chunks sum to %v", pf, first)
	}
	for k := 1; k <= 4; k++ {
		want += cfg.StepTime(0, 1, 150+k, 0)
	}
	if steps != 7 || c.now != want {
		t.Fatalf("steps %d now %v, want 7 and %v", steps, c.now, want)
	}
	if s.firstM != first || s.lastM != want || s.generated != 5 || c.kvUsed != 0 || c.genTokens != 5 || c.promptTokens != 150 {
		t.Fatalf("first %v last %v gen %d kv %d genTokens %d prompt %d", s.firstM, s.lastM, s.generated, c.kvUsed, c.genTokens, c.promptTokens)
	}
}

func TestCoreBatchCapAndOneTokenPerStep(t *testing.T) {
	cfg := linear()
	c := newCore(&cfg)
	var seqs []*seq
	for range 6 {
		s := newSeq(4, 10)
		seqs = append(seqs, s)
		c.enqueue(s, 0)
	}
	c.step() // admits 4 (MaxBatch), prefills 16 tokens, each gets its first token
	if len(c.running) != 4 || c.waitingLen() != 2 || len(c.touched) != 4 {
		t.Fatalf("running %d waiting %d touched %d", len(c.running), c.waitingLen(), len(c.touched))
	}
	before := c.now
	c.step() // pure decode: one token each
	if got, want := c.now-before, cfg.StepTime(0, 4, 4*(4+1), 0); got != want {
		t.Fatalf("decode step %v, want %v", got, want)
	}
	for _, s := range seqs[:4] {
		if s.generated != 2 {
			t.Fatalf("generated %d, want 2", s.generated)
		}
	}
	runCore(t, c)
	// FCFS: the last two are admitted only when the first four finish.
	if !(seqs[4].admitM >= seqs[0].lastM && seqs[4].admitM == seqs[5].admitM) {
		t.Fatalf("admit %v %v, first wave ended %v", seqs[4].admitM, seqs[5].admitM, seqs[0].lastM)
	}
}

func TestCoreKVAdmissionAndFCFS(t *testing.T) {
	cfg := linear()
	cfg.KVCacheTokens = 100
	cfg.MaxModelLen = 100
	c := newCore(&cfg)
	a, b, small := newSeq(30, 30), newSeq(30, 30), newSeq(1, 1) // a+b need 120 > 100
	c.enqueue(a, 0)
	c.enqueue(b, 0)
	c.enqueue(small, 0)
	c.step()
	if len(c.running) != 1 || c.kvUsed != 60 {
		t.Fatalf("running %d kv %d: want only a admitted", len(c.running), c.kvUsed)
	}
	// small would fit but is behind b: strict FCFS keeps it waiting.
	if small.admitM != 0 || c.waitingLen() != 2 {
		t.Fatal("small jumped the queue")
	}
	runCore(t, c)
	if !(b.admitM >= a.lastM && small.admitM >= b.admitM) {
		t.Fatalf("order: a last %v, b admit %v, small admit %v", a.lastM, b.admitM, small.admitM)
	}
}

func TestCoreChunkedPrefillSharesBudgetWithDecodes(t *testing.T) {
	cfg := linear()
	c := newCore(&cfg)
	d := newSeq(2, 100)
	c.enqueue(d, 0)
	c.step() // d prefilled, first token
	long := newSeq(200, 2)
	c.enqueue(long, c.now)
	before := c.now
	c.step() // 1 decode + 63 prefill tokens of long
	if long.prefilled != 63 || d.generated != 2 {
		t.Fatalf("prefilled %d generated %d", long.prefilled, d.generated)
	}
	if got, want := c.now-before, cfg.StepTime(63, 1, (2+1)+63, AttentionPairs(0, 63)); got != want {
		t.Fatalf("mixed step %v, want %v", got, want)
	}
}

func TestCoreCancel(t *testing.T) {
	cfg := linear()
	c := newCore(&cfg)
	a, b := newSeq(10, 100), newSeq(10, 100)
	c.enqueue(a, 0)
	c.enqueue(b, 0)
	c.step()
	a.canceled.Store(true)
	b.canceled.Store(true)
	c.dropCanceled()
	if !c.idle() || c.kvUsed != 0 {
		t.Fatalf("after cancel: idle %v kv %d", c.idle(), c.kvUsed)
	}
}

func TestProfilesValidAndCalibrated(t *testing.T) {
	for _, n := range Profiles() {
		c, err := Profile(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := Profile("nope"); err == nil {
		t.Error("unknown profile accepted")
	}
	m, _ := Profile("moe-230b-8gpu")
	in := Analyze(m)
	rate := func(b int) float64 { return in.Steps[b-1].TokPerSec }
	for _, tc := range []struct {
		name      string
		got, want float64
		tol       float64
	}{
		{"single stream", in.SingleStreamTokPerSec, 84, 0.01},
		{"batch 8", rate(8), 350, 0.05},
		{"batch 256", rate(256), 4000, 0.01},
		{"max decode", in.MaxDecodeTokPerSec, 4000, 0.01},
	} {
		if math.Abs(tc.got/tc.want-1) > tc.tol {
			t.Errorf("moe-230b-8gpu %s: %.1f tok/s, want %.0f within %.0f%%", tc.name, tc.got, tc.want, tc.tol*100)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	base := linear()
	for name, mut := range map[string]func(*Config){
		"time scale":   func(c *Config) { c.TimeScale = 0 },
		"max batch":    func(c *Config) { c.MaxBatch = 0 },
		"budget":       func(c *Config) { c.MaxBatchedTokens = c.MaxBatch - 1 },
		"kv":           func(c *Config) { c.KVCacheTokens = c.MaxModelLen - 1 },
		"no step time": func(c *Config) { c.StepBase, c.DecodePerSeq, c.PerExpert = 0, 0, 0 },
		"experts":      func(c *Config) { c.Experts, c.ExpertsPerToken = 4, 8 },
		"fault sum":    func(c *Config) { c.Faults.Status429, c.Faults.Status503 = 0.6, 0.6 },
		"fault rate":   func(c *Config) { c.Faults.Disconnect = 1.5 },
		"stall dur":    func(c *Config) { c.Faults.Stall = 0.1 },
		"model":        func(c *Config) { c.Model = "" },
	} {
		c := base
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseFault(t *testing.T) {
	var f Faults
	for _, s := range []string{"429=0.1", "500=0.2", "503=0.3", "disconnect=0.01", "malformed=1", "stall=0.5:2s", "slow-first-byte=0.25", "stream-error=0.125"} {
		if err := ParseFault(s, &f); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	want := Faults{Status429: 0.1, Status500: 0.2, Status503: 0.3, Disconnect: 0.01, Malformed: 1, Stall: 0.5, StallFor: 2 * time.Second, SlowFirstByte: 0.25, SlowFirstByteFor: time.Second, StreamError: 0.125}
	if f != want {
		t.Fatalf("got %+v\nwant %+v", f, want)
	}
	for _, s := range []string{"", "429", "429=x", "429=-1", "429=2", "bogus=0.1", "429=0.1:1s", "stall=0.1:x", "stall=0.1:-1s", "stall=NaN", "stream-error=0.1:1s"} {
		if err := ParseFault(s, &f); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func FuzzParseFault(f *testing.F) {
	for _, s := range []string{"429=0.1", "stall=0.5:2s", "slow-first-byte=1:1ms", "x", "=", "stall=:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var fs Faults
		if ParseFault(s, &fs) == nil {
			c := linear()
			c.Faults = fs
			if err := c.Validate(); err != nil {
				t.Fatalf("ParseFault(%q) gave invalid faults: %v", s, err)
			}
		}
	})
}

func TestInfoWarnings(t *testing.T) {
	c, _ := Profile("tiny")
	if w := Analyze(c).Warnings; len(w) != 0 {
		t.Errorf("tiny at scale 1 warns: %v", w)
	}
	c.KVCacheTokens = c.MaxModelLen // 8192 / 128 = 64 >= 16: fine
	c.RefContextTokens = 1024       // 8192 / 1024 = 8 < 16
	c.TimeScale = 1e5
	if w := Analyze(c).Warnings; len(w) != 2 {
		t.Errorf("want KV and timer warnings, got %v", w)
	}
}

// closedLoop runs the scheduler with conc requests always in the system (a finished one
// is replaced at once, as a closed-loop benchmark does) and returns the output tokens per
// second of model time after a warm-up, prefill included.
func closedLoop(cfg *Config, conc, prompt, output, requests int) float64 {
	c := newCore(cfg)
	for range conc {
		c.enqueue(newSeq(prompt, output), c.now)
	}
	done, warm := 0, requests/5
	var t0 time.Duration
	var tok0 int64
	for done < requests {
		before := c.finished
		c.step()
		for range c.finished - before {
			done++
			if done == warm {
				t0, tok0 = c.now, c.genTokens
			}
			c.enqueue(newSeq(prompt, output), c.now)
		}
	}
	return float64(c.genTokens-tok0) / (c.now - t0).Seconds()
}

// TestMoEClosedLoop checks the moe-230b-8gpu profile the way it was measured in the
// field: closed-loop concurrency. With 24-token prompts and 2,000-token outputs (mean
// decode context 1,024 = ref_context_tokens, prefill negligible) the engine must deliver
// /sim/info's decode figures within 3%, plateauing at max_batch; with 924-token prompts and
// 200-token outputs (the same mean context) prefill takes its share, so the rate is lower
// but never above the analytical figure.
func TestMoEClosedLoop(t *testing.T) {
	cfg, _ := Profile("moe-230b-8gpu")
	in := Analyze(cfg)
	for _, tc := range []struct {
		conc int
		want float64
	}{
		{1, in.SingleStreamTokPerSec},
		{8, in.Steps[7].TokPerSec},
		{256, in.MaxDecodeTokPerSec},
		{512, in.MaxDecodeTokPerSec}, // beyond max_batch: the rest queue, same rate
	} {
		short := closedLoop(&cfg, tc.conc, 24, 2000, max(20, 3*tc.conc))
		long := closedLoop(&cfg, tc.conc, 924, 200, max(20, 3*tc.conc))
		if short > tc.want*1.001 || short < tc.want*0.97 {
			t.Errorf("concurrency %d, short prompts: %.1f tok/s, want %.1f within 3%%", tc.conc, short, tc.want)
		}
		if long > tc.want*1.001 || long < tc.want*0.5 {
			t.Errorf("concurrency %d, 924-token prompts: %.1f tok/s, want below %.1f (and not absurdly)", tc.conc, long, tc.want)
		}
		t.Logf("concurrency %d: analytical %.1f, closed loop 24/2000 %.1f, 924/200 %.1f tok/s", tc.conc, tc.want, short, long)
	}
}

// TestCoreOnDemandPreempts: four requests of 40 + 40 tokens in a 200-token cache. Reserving
// prompt + output, two fit at once and nothing is preempted. On demand, all four prompts
// are admitted, the cache runs full as they grow, the newest are preempted and
// recomputed, and every request still gets all its tokens; KV never exceeds capacity and
// returns to 0.
func TestCoreOnDemandPreempts(t *testing.T) {
	for _, mode := range []string{KVReserve, KVOnDemand} {
		cfg := linear()
		cfg.KVCacheTokens, cfg.MaxModelLen, cfg.KVAdmission = 200, 200, mode
		cfg.PrefixCache = false
		c := newCore(&cfg)
		seqs := make([]*seq, 4)
		for i := range seqs {
			seqs[i] = newSeq(40, 40)
			c.enqueue(seqs[i], 0)
		}
		maxUsed, maxRunning := 0, 0
		for n := 0; !c.idle(); n++ {
			if c.step() == 0 || n > 1e5 {
				t.Fatalf("%s: no progress with %d running, %d waiting", mode, len(c.running), c.waitingLen())
			}
			if c.kvUsed > cfg.KVCacheTokens {
				t.Fatalf("%s: KV used %d > capacity %d", mode, c.kvUsed, cfg.KVCacheTokens)
			}
			maxUsed, maxRunning = max(maxUsed, c.kvUsed), max(maxRunning, len(c.running))
		}
		for i, s := range seqs {
			if s.generated != s.target {
				t.Errorf("%s: request %d generated %d of %d", mode, i, s.generated, s.target)
			}
		}
		t.Logf("%s: %d preemptions, max KV used %d of %d, max running %d, %d tokens generated", mode, c.preemptions, maxUsed, cfg.KVCacheTokens, maxRunning, c.genTokens)
		if c.kvUsed != 0 || c.genTokens != 160 {
			t.Errorf("%s: at the end KV used %d, %d tokens generated; want 0 and 160", mode, c.kvUsed, c.genTokens)
		}
		switch mode {
		case KVReserve:
			if c.preemptions != 0 || maxRunning != 2 {
				t.Errorf("reserve: %d preemptions, max running %d; want 0 and 2", c.preemptions, maxRunning)
			}
		case KVOnDemand:
			if c.preemptions == 0 || maxRunning != 4 || maxUsed < cfg.KVCacheTokens-len(seqs) {
				t.Errorf("on-demand: %d preemptions, max running %d, max KV used %d; want > 0, 4 and near %d", c.preemptions, maxRunning, maxUsed, cfg.KVCacheTokens)
			}
		}
	}
}

// TestPrefillAttention: the same 1,024 prompt tokens cost more to prefill after 6,144
// cached tokens than at the start of a fresh prompt, because they attend over the cached
// tokens (which are not prefilled again): the step is exactly the step model's with
// AttentionPairs(6144, 1024), and the difference from the fresh prompt's step is the
// attention and the KV read of the cached tokens.
func TestPrefillAttention(t *testing.T) {
	cfg, _ := Profile("tiny")
	if cfg.AttentionPerPairNs <= 0 {
		t.Fatal("tiny has no attention term: tests cannot tell it is applied")
	}
	c := newCore(&cfg)
	long := ids(7168)
	for i := range long {
		long[i] = 20000 + i
	}
	warmup := idsSeq(&cfg, long[:6145], 1) // leaves 384 full blocks cached
	c.enqueue(warmup, c.now)
	runCore(t, c)
	late := idsSeq(&cfg, long, 1)
	c.enqueue(late, c.now)
	runCore(t, c)
	if late.cached != 6144 {
		t.Fatalf("cached %d, want 6144", late.cached)
	}
	fresh := idsSeq(&cfg, ids(1024), 1)
	c.enqueue(fresh, c.now)
	runCore(t, c)
	lateStep, freshStep := late.firstM-late.admitM, fresh.firstM-fresh.admitM
	if want := cfg.StepTime(1024, 0, 7168, AttentionPairs(6144, 1024)); lateStep != want {
		t.Errorf("1,024 tokens after 6,144 cached: step %v, want %v", lateStep, want)
	}
	if want := cfg.StepTime(1024, 0, 1024, AttentionPairs(0, 1024)); freshStep != want {
		t.Errorf("1,024 fresh tokens: step %v, want %v", freshStep, want)
	}
	attn := time.Duration(cfg.AttentionPerPairNs * float64(1024*6144))
	if got, want := lateStep-freshStep, attn+6144*cfg.ContextPerToken; got != want {
		t.Errorf("late chunk costs %v more, want %v (attention over the cached tokens and their KV read)", got, want)
	}
}

func TestInfoPrefillAt(t *testing.T) {
	for _, tc := range []struct {
		profile string
		ctxs    []int
	}{
		{"tiny", []int{0, 6144}},
		{"moe-230b-8gpu", []int{0, 8192, 32768, 65536, 131072, 196608 - 8192}},
	} {
		cfg, _ := Profile(tc.profile)
		in := Analyze(cfg)
		n := cfg.MaxBatchedTokens
		if len(in.PrefillAt) != len(tc.ctxs) {
			t.Fatalf("%s: prefill_at %+v, want contexts %v", tc.profile, in.PrefillAt, tc.ctxs)
		}
		for i, p := range in.PrefillAt {
			step := cfg.StepTime(n, 0, p.ContextTokens+n, AttentionPairs(p.ContextTokens, n))
			if p.ContextTokens != tc.ctxs[i] || math.Abs(p.ChunkMs-float64(step)/1e6) > 1e-9 ||
				math.Abs(p.PromptMs-float64(cfg.PrefillTime(p.ContextTokens+n, 0))/1e6) > 1e-9 {
				t.Errorf("%s: point %d %+v, want context %d, chunk %v", tc.profile, i, p, tc.ctxs[i], step)
			}
			if i > 0 && !(p.ChunkTokPerSec < in.PrefillAt[i-1].ChunkTokPerSec) {
				t.Errorf("%s: prefill at %d tokens of context %.0f tok/s, not slower than at %d", tc.profile, p.ContextTokens, p.ChunkTokPerSec, in.PrefillAt[i-1].ContextTokens)
			}
		}
		if in.PrefillAt[0].ChunkTokPerSec != in.PrefillTokPerSec {
			t.Errorf("%s: prefill_tok_per_sec %v, prefill_at[0] %v", tc.profile, in.PrefillTokPerSec, in.PrefillAt[0].ChunkTokPerSec)
		}
		t.Logf("%s: %+v", tc.profile, in.PrefillAt)
	}
}
