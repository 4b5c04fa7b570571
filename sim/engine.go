package sim

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// seq is one generation request inside the engine.
//
// The engine goroutine owns the fields under "engine"; the handler goroutine reads
// produced and done, and the timing fields after it has seen done (the atomic store of
// done publishes them).
type seq struct {
	prompt int // prompt tokens
	target int // tokens to generate (>= 1)
	recv   time.Time
	// visions are the request's images (where each ends in the prompt, its encoder
	// time): the encoder time of those past the cached prefix is added to the step that
	// admits it (again after a preemption: its encoder outputs went with its KV).
	visions []visionSpan

	// Prefix cache (nil hashes: none). hashes are the chain hashes of the full blocks of
	// the prompt followed by the output less its last token (what ends up in the KV
	// cache); the first promptBlocks of them lie wholly inside the prompt.
	hashes       []uint64
	promptBlocks int

	// engine
	fill      int // tokens to prefill: the prompt, or after a preemption the prompt and the tokens generated so far
	recompute bool
	prefilled int
	generated int
	stepTok   int // tokens scheduled in the current step
	// kv is the KV this request reserves privately: prompt + target at admission, less
	// the cached blocks it shares and the blocks it has since handed to the prefix cache.
	kv        int
	cached    int     // prompt tokens read from the prefix cache (set at admission)
	blocks    []int32 // prefix-cache blocks it holds
	nextBlock int     // next prompt block to offer to the prefix cache

	// Model times (durations since the engine's model epoch). Written by the engine
	// before done is stored.
	arrivalM, queuedM, admitM, firstM, lastM time.Duration // queuedM: step start at which the engine took it in
	// answerAt is the first answer token (0-based; the tokens before it are reasoning) and
	// answerM the end of the step that produced it.
	answerAt     int
	answerM      time.Duration
	waitingAhead int // waiting requests ahead of it on arrival
	// The engine's generated-token counter at admission (step start) and at the end of
	// the step that produced the last token: with admitM and lastM these are samples of
	// the engine's aggregate progress in model time.
	genAtAdmit, genAtLast int64

	produced atomic.Int64 // tokens generated so far, as published to the handler
	done     atomic.Bool  // all target tokens published (or engine stopped)
	canceled atomic.Bool  // client went away: the engine drops it at the next step
	notify   chan struct{}
}

func newSeq(prompt, target int) *seq {
	return &seq{prompt: prompt, fill: prompt, target: target, notify: make(chan struct{}, 1)}
}

func (s *seq) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// core is the pure scheduler: iteration-level continuous batching with an FCFS waiting
// queue, admission on KV capacity (prompt + whole output reserved, so no preemption; or,
// with Config.KVAdmission on-demand, the prompt at admission and a token per decode step,
// preempting the newest running sequence when one cannot grow), chunked prefill within a
// per-step token budget and one decode token per running sequence per step. It has no clock: step advances model time by the step's duration.
type core struct {
	cfg     *Config
	now     time.Duration
	waiting []*seq // FIFO; waiting[head:] are live
	head    int
	running []*seq
	kvUsed  int          // KV tokens in use: private reservations and held cached blocks
	touched []*seq       // sequences that produced a token in the last step
	pc      *prefixCache // nil: prefix caching off

	// counters for /metrics
	steps, promptTokens, genTokens, finished int64
	preemptions                              int64 // running requests preempted (on-demand KV admission)
}

func newCore(cfg *Config) *core {
	c := &core{cfg: cfg}
	if cfg.prefixCaching() {
		c.pc = newPrefixCache(cfg.PrefixBlockTokens)
	}
	return c
}

func (c *core) waitingLen() int { return len(c.waiting) - c.head }

func (c *core) idle() bool { return len(c.running) == 0 && c.waitingLen() == 0 }

// enqueue adds s to the waiting queue at model time arrival.
func (c *core) enqueue(s *seq, arrival time.Duration) {
	s.arrivalM, s.queuedM = arrival, c.now
	s.waitingAhead = c.waitingLen()
	if c.head > 0 && c.head == len(c.waiting) {
		c.waiting, c.head = c.waiting[:0], 0
	}
	c.waiting = append(c.waiting, s)
}

// dropCanceled removes sequences whose client has gone, freeing their KV.
func (c *core) dropCanceled() {
	j := 0
	for _, s := range c.running {
		if s.canceled.Load() {
			c.release(s)
			continue
		}
		c.running[j] = s
		j++
	}
	clear(c.running[j:])
	c.running = c.running[:j]
	w := c.waiting[c.head:]
	j = 0
	for _, s := range w {
		if !s.canceled.Load() {
			w[j] = s
			j++
		}
	}
	clear(w[j:])
	c.waiting = c.waiting[:c.head+j]
}

// step schedules and runs one engine iteration: decodes first (one token each), then the
// prefill chunks of running sequences, then FCFS admissions while the batch, the token
// budget and the KV cache allow (the head of the queue blocks the rest: strict FCFS).
// It advances c.now by the step time and returns it; c.touched lists the sequences that
// produced a token. A step with nothing to do returns 0.
func (c *core) step() time.Duration {
	c.touched = c.touched[:0]
	budget := c.cfg.MaxBatchedTokens
	prefill, decode, context := 0, 0, 0
	var pairs int64          // prefill attention: each chunk's tokens against the sequence before them
	var vision time.Duration // the vision encoder, for the images of the requests admitted
	preempted := c.cfg.onDemand() && c.grow(budget)
	for _, s := range c.running {
		s.stepTok = 0
		if s.prefilled == s.fill && budget > 0 {
			s.stepTok = 1
			budget--
			decode++
			context += s.prompt + s.generated
		}
	}
	for _, s := range c.running {
		if s.prefilled < s.fill && budget > 0 {
			n := min(s.fill-s.prefilled, budget)
			s.stepTok = n
			budget -= n
			prefill += n
			context += s.prefilled + n
			pairs += AttentionPairs(s.prefilled, n)
		}
	}
	// A step that preempted admits nothing (vLLM v1): the space freed is for the running.
	for !preempted && c.waitingLen() > 0 && budget > 0 && len(c.running) < c.cfg.MaxBatch {
		s := c.waiting[c.head]
		if !c.admit(s) {
			break
		}
		c.waiting[c.head] = nil
		c.head++
		s.admitM = c.now
		s.genAtAdmit = c.genTokens
		c.running = append(c.running, s)
		vision += visionTime(s.visions, s.cached)
		n := min(s.fill-s.prefilled, budget)
		s.stepTok = n
		budget -= n
		prefill += n
		context += s.prefilled + n
		pairs += AttentionPairs(s.prefilled, n) // s.prefilled: the tokens it found cached
	}
	if prefill+decode == 0 {
		return 0
	}
	d := c.cfg.StepTime(prefill, decode, context, pairs) + vision
	c.now += d
	c.steps++
	c.promptTokens += int64(prefill)
	j := 0
	for _, s := range c.running {
		switch {
		case s.stepTok == 0:
		case s.prefilled == s.fill: // decoded one token
			s.generated++
			s.lastM = c.now
			c.touched = append(c.touched, s)
		default:
			s.prefilled += s.stepTok
			if c.pc != nil {
				c.cacheComputed(s)
			}
			if s.prefilled == s.fill && s.recompute { // recomputed: the step samples the next token
				s.generated++
				s.lastM = c.now
				c.touched = append(c.touched, s)
			} else if s.prefilled == s.fill { // prefill done: the step samples the first token
				s.generated = 1
				s.firstM, s.lastM = c.now, c.now
				c.touched = append(c.touched, s)
			}
		}
		s.stepTok = 0
		if s.generated == s.answerAt+1 && s.answerM == 0 {
			s.answerM = c.now
		}
		if s.generated == s.target {
			if c.pc != nil {
				c.cacheOutput(s)
			}
			c.release(s)
			c.finished++
			continue
		}
		c.running[j] = s
		j++
	}
	clear(c.running[j:])
	c.running = c.running[:j]
	c.genTokens += int64(len(c.touched))
	for _, s := range c.touched {
		if s.generated == s.target {
			s.genAtLast = c.genTokens
		}
	}
	return d
}

// admit takes s into the KV cache if it fits and reports whether it did. With the prefix
// cache, s first takes the cached blocks that match its prompt (the longest run from the
// start, never the block holding the prompt's last token): those it need not compute nor
// reserve, and cached blocks no request held are evicted, least recently freed first,
// until the used and the cached KV fit the capacity again.
func (c *core) admit(s *seq) bool {
	kv := s.prompt + s.target
	if c.cfg.onDemand() {
		kv = s.fill
	}
	if c.pc == nil || s.hashes == nil {
		if c.kvUsed+kv > c.cfg.KVCacheTokens {
			return false
		}
		c.kvUsed += kv
		s.kv = kv
		return true
	}
	p := c.pc
	size := p.size
	var free int
	s.blocks, free = p.match(s.blocks[:0], s.hashes, min(s.promptBlocks, (s.prompt-1)/size))
	hit := len(s.blocks)
	kv -= hit * size
	// Held blocks taken from the free list move into the used KV; the rest is new.
	if c.kvUsed+free*size+kv > c.cfg.KVCacheTokens {
		s.blocks = s.blocks[:0]
		return false
	}
	for _, i := range s.blocks {
		p.acquire(i)
	}
	c.kvUsed += free*size + kv
	s.kv = kv
	for c.kvUsed+p.nFree*size > c.cfg.KVCacheTokens && p.evict() {
	}
	s.cached = hit * size
	s.prefilled = s.cached
	s.nextBlock = hit
	p.queries += int64(s.prompt)
	p.hits += int64(s.cached)
	c.promptTokens += int64(s.cached)
	return true
}

// grow, under on-demand admission, gives each sequence that will decode this step (those
// the token budget reaches, in batch order) the KV token its new token needs. When the
// cache is full (after evicting unheld cached blocks) it preempts the newest running
// sequence, which may be the one growing, and tries again. It reports whether it
// preempted.
func (c *core) grow(budget int) bool {
	preempted := false
	for i := 0; i < len(c.running) && budget > 0; i++ {
		s := c.running[i]
		if s.prefilled != s.fill {
			continue
		}
		budget--
		for !c.fits(1) && len(c.running) > i {
			c.preempt(c.running[len(c.running)-1])
			c.running[len(c.running)-1] = nil
			c.running = c.running[:len(c.running)-1]
			preempted = true
		}
		if len(c.running) <= i { // s itself was preempted
			break
		}
		c.kvUsed++
		s.kv++
	}
	return preempted
}

// fits reports whether n more KV tokens fit, evicting unheld cached blocks as needed.
func (c *core) fits(n int) bool {
	if c.pc == nil {
		return c.kvUsed+n <= c.cfg.KVCacheTokens
	}
	p := c.pc
	for c.kvUsed+n+p.nFree*p.size > c.cfg.KVCacheTokens && p.evict() {
	}
	return c.kvUsed+n+p.nFree*p.size <= c.cfg.KVCacheTokens
}

// preempt drops s's KV and puts it back at the head of the waiting queue, to recompute
// its prompt and the tokens it has generated when it is admitted again (the client has
// them already: nothing is sent twice).
func (c *core) preempt(s *seq) {
	c.release(s)
	c.preemptions++
	s.fill = s.prompt + s.generated
	s.recompute = s.generated > 0
	s.prefilled, s.cached, s.nextBlock, s.stepTok = 0, 0, 0, 0
	if c.head > 0 {
		c.head--
		c.waiting[c.head] = s
		return
	}
	c.waiting = slices.Insert(c.waiting, 0, s)
}

// cacheComputed offers the prefix cache the prompt blocks s has now wholly computed
// (vLLM caches a block as soon as it is full): s keeps holding them, and their KV moves
// from its private reservation to the shared blocks.
func (c *core) cacheComputed(s *seq) {
	p := c.pc
	full := min(s.prefilled/p.size, s.promptBlocks)
	for ; s.nextBlock < full; s.nextBlock++ {
		if i, ok := p.insert(s.hashes[s.nextBlock], true); ok {
			s.blocks = append(s.blocks, i)
			s.kv -= p.size
		}
	}
}

// cacheOutput, when s has finished, caches the full blocks past its prompt (its output
// less the last token, whose KV is never computed) as free blocks, last block first so
// that eviction takes a conversation's tail before its head. A later turn that sends the
// conversation back finds them.
func (c *core) cacheOutput(s *seq) {
	p := c.pc
	for k := len(s.hashes) - 1; k >= s.promptBlocks; k-- {
		if _, ok := p.insert(s.hashes[k], false); ok {
			s.kv -= p.size
			c.kvUsed -= p.size
		}
	}
}

// release frees s's KV: its private reservation, and its references to cached blocks,
// last block first (an unreferenced block stays cached in the free space).
func (c *core) release(s *seq) {
	c.kvUsed -= s.kv
	s.kv = 0
	if c.pc == nil {
		return
	}
	for k := len(s.blocks) - 1; k >= 0; k-- {
		if c.pc.blocks[s.blocks[k]].ref == 1 {
			c.kvUsed -= c.pc.size
		}
		c.pc.release(s.blocks[k])
	}
	s.blocks = s.blocks[:0]
}

// engine runs a core in real time: each step's tokens are published at
// epoch + model_time/TimeScale. When the loop falls behind real time (a busy machine),
// model time keeps its own pace and tokens go out as soon as they can: measurements in
// model time stay exact, and /metrics reports the lag.
type engine struct {
	cfg   *Config
	epoch time.Time
	scale float64

	mu    sync.Mutex // guards inbox, core counters read by metrics, lag
	inbox []*seq
	spare []*seq
	// pending are the requests received and not yet queued (RequestOverhead), in order
	// of receipt, each with its arrival in arrivalM; lastIn is the latest such arrival.
	pending []*seq
	lastIn  time.Duration
	core    *core
	lag     time.Duration
	wakeCh  chan struct{}
	stopCh  chan struct{}
	stopped chan struct{}
	stop    sync.Once
}

func newEngine(cfg *Config) *engine {
	e := &engine{
		cfg:     cfg,
		epoch:   time.Now(),
		scale:   cfg.TimeScale,
		core:    newCore(cfg),
		wakeCh:  make(chan struct{}, 1),
		stopCh:  make(chan struct{}),
		stopped: make(chan struct{}),
	}
	go e.loop()
	return e
}

func (e *engine) realToModel(t time.Time) time.Duration {
	return scaleDur(t.Sub(e.epoch), e.scale)
}

// scaleDur is d*scale, saturating instead of overflowing int64 nanoseconds (at the
// largest time scale, 1e6, that takes 2.5 hours of real time).
func scaleDur(d time.Duration, scale float64) time.Duration {
	v := float64(d) * scale
	if v >= 1<<62 {
		return 1 << 62
	}
	return time.Duration(v)
}

func (e *engine) modelToReal(m time.Duration) time.Time {
	return e.epoch.Add(time.Duration(float64(m) / e.scale))
}

// submit hands s to the engine; it is queued at the start of the next step.
func (e *engine) submit(s *seq) {
	e.mu.Lock()
	e.inbox = append(e.inbox, s)
	e.mu.Unlock()
	select {
	case e.wakeCh <- struct{}{}:
	default:
	}
}

// queuePending queues the pending requests whose RequestOverhead has passed by the
// step start c.now; with none, every one at once, at c.now at the latest. Model time stood
// still while the engine was idle: it resumes at the first pending request's queuing, so
// that the wake-up latency of the loop is not counted as model time.
func (e *engine) queuePending() {
	c, over := e.core, e.cfg.RequestOverhead
	if c.idle() && len(e.pending) > 0 {
		c.now = max(c.now, e.pending[0].arrivalM+over)
	}
	n := 0
	for _, s := range e.pending {
		if over > 0 && s.arrivalM+over > c.now {
			break
		}
		c.enqueue(s, min(s.arrivalM, c.now))
		n++
	}
	e.pending = e.pending[:copy(e.pending, e.pending[n:])]
}

func (e *engine) close() {
	e.stop.Do(func() { close(e.stopCh) })
	<-e.stopped
}

func (e *engine) loop() {
	defer close(e.stopped)
	c := e.core
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		e.mu.Lock()
		in := e.inbox
		e.inbox, e.spare = e.spare[:0], nil
		// Queue in order of receipt, and keep arrival times in queue order: a request
		// stamped earlier but handed over later (its handler was descheduled) counts as
		// arriving when the one ahead of it did, so FCFS by arrival time holds.
		if len(in) > 1 {
			slices.SortStableFunc(in, func(a, b *seq) int { return a.recv.Compare(b.recv) })
		}
		for _, s := range in {
			e.lastIn = max(e.realToModel(s.recv), e.lastIn)
			s.arrivalM = e.lastIn
			e.pending = append(e.pending, s)
		}
		e.queuePending()
		clear(in)
		e.spare = in[:0]
		c.dropCanceled()
		var d time.Duration
		if !c.idle() {
			d = c.step()
		}
		e.mu.Unlock()
		if d == 0 {
			select {
			case <-e.wakeCh:
				continue
			case <-e.stopCh:
				return
			}
		}
		if wait := time.Until(e.modelToReal(c.now)); wait > 0 {
			e.mu.Lock()
			e.lag = 0
			e.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-e.stopCh:
				timer.Stop()
				return
			}
		} else {
			e.mu.Lock()
			e.lag = -wait
			e.mu.Unlock()
		}
		for _, s := range c.touched {
			// done before produced: a handler that has seen the last token also sees the
			// request's timing as final (trailers, request log).
			if s.generated == s.target {
				s.done.Store(true)
			}
			s.produced.Store(int64(s.generated))
			s.wake()
		}
		select {
		case <-e.stopCh:
			return
		default:
		}
	}
}
