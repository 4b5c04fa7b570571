package sim

// Automatic prefix caching, as vLLM does it (on by default in vLLM and SGLang).
//
// A prompt's tokens are cut into blocks of PrefixBlockTokens; each full block is named by
// a chain hash, h_j = H(h_{j-1}, tokens of block j), so equal hashes mean equal prefixes.
// A request hits the longest run of cached blocks from the start of its prompt, never
// the block holding its last token: at least that token is always computed, as in vLLM.
// Blocks live in the KV cache: a block a running request holds counts in the used KV,
// shared by every request that holds it; a block no running request holds stays cached
// in the free KV space and is evicted, least recently freed first, when an admission needs
// that space. The hashing runs on the handler goroutines; the engine only looks up,
// references and releases blocks (map and list operations, no allocation once warm).

// chainSeed is the hash "before" the first block (vLLM's NONE_HASH), fixed so that a run
// is reproducible.
const chainSeed uint64 = 0x6c6c6d7265706c79 // "llmreplay"

// blockHasher turns a token stream into the chain hashes of its full blocks.
type blockHasher struct {
	size   int      // tokens per block
	n      int      // tokens in the current, partial block
	state  uint64   // running state of the current block
	hashes []uint64 // chain hashes of the full blocks so far
}

func newBlockHasher(size int) *blockHasher {
	return &blockHasher{size: size, state: chainSeed}
}

// add absorbs one token. Within a block the state is FNV-1a over whole tokens (each
// step a bijection of the state, so two blocks differing in one token never collide);
// a full block is finished with a 64-bit mixer and seeds the next block's state.
func (h *blockHasher) add(tok uint32) {
	h.state = (h.state ^ uint64(tok)) * 0x100000001b3
	h.n++
	if h.n == h.size {
		v := mix64(h.state)
		h.hashes = append(h.hashes, v)
		h.state, h.n = v, 0
	}
}

func (h *blockHasher) addInts(ids []int) {
	for _, t := range ids {
		h.add(uint32(t))
	}
}

// mix64 is splitmix64's finaliser.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// prefixCache holds the cached blocks: a map from chain hash to a slot of an arena, a
// reference count per block (running requests holding it), and an LRU list of the blocks
// no request holds (evicted from the head). It is owned by the engine goroutine.
type prefixCache struct {
	size   int // tokens per block
	m      map[uint64]int32
	blocks []pblock
	spare  []int32 // arena slots not in use
	// LRU list of unreferenced blocks: head is evicted first, tail was freed last.
	head, tail int32
	nFree      int

	// counters for /metrics: prompt tokens looked up and found (vLLM's
	// prefix_cache_queries / prefix_cache_hits), blocks evicted.
	queries, hits, evictions int64
}

type pblock struct {
	hash       uint64
	ref        int32
	prev, next int32 // LRU links, while ref == 0
}

const nilBlock = -1

func newPrefixCache(size int) *prefixCache {
	return &prefixCache{size: size, m: make(map[uint64]int32), head: nilBlock, tail: nilBlock}
}

// match appends to dst the slots of the cached blocks that start hashes (at most max of
// them), and returns how many of those no running request holds (they move from the
// free space to the used space when the request takes them).
func (p *prefixCache) match(dst []int32, hashes []uint64, max int) ([]int32, int) {
	free := 0
	for _, h := range hashes[:min(max, len(hashes))] {
		i, ok := p.m[h]
		if !ok {
			break
		}
		if p.blocks[i].ref == 0 {
			free++
		}
		dst = append(dst, i)
	}
	return dst, free
}

// acquire references the cached block in slot i.
func (p *prefixCache) acquire(i int32) {
	b := &p.blocks[i]
	if b.ref == 0 {
		p.unlink(i)
	}
	b.ref++
}

// insert caches a block computed by a request. held: the request keeps a reference (a
// prompt block it goes on using); otherwise the block goes straight to the free list (a
// block of a finished request's output). It reports false, changing nothing, when the
// hash is already cached (another request computed the same block): the request's own
// copy then stays private, as in vLLM.
func (p *prefixCache) insert(hash uint64, held bool) (int32, bool) {
	if _, ok := p.m[hash]; ok {
		return 0, false
	}
	var i int32
	if n := len(p.spare); n > 0 {
		i, p.spare = p.spare[n-1], p.spare[:n-1]
	} else {
		p.blocks = append(p.blocks, pblock{})
		i = int32(len(p.blocks) - 1)
	}
	p.blocks[i] = pblock{hash: hash, prev: nilBlock, next: nilBlock}
	p.m[hash] = i
	if held {
		p.blocks[i].ref = 1
	} else {
		p.pushFree(i)
	}
	return i, true
}

// release drops one reference; an unreferenced block joins the tail of the free list.
func (p *prefixCache) release(i int32) {
	b := &p.blocks[i]
	b.ref--
	if b.ref == 0 {
		p.pushFree(i)
	}
}

// evict removes the least recently freed block from the cache; false if none is free.
func (p *prefixCache) evict() bool {
	i := p.head
	if i == nilBlock {
		return false
	}
	p.unlink(i)
	delete(p.m, p.blocks[i].hash)
	p.spare = append(p.spare, i)
	p.evictions++
	return true
}

func (p *prefixCache) pushFree(i int32) {
	b := &p.blocks[i]
	b.prev, b.next = p.tail, nilBlock
	if p.tail != nilBlock {
		p.blocks[p.tail].next = i
	} else {
		p.head = i
	}
	p.tail = i
	p.nFree++
}

func (p *prefixCache) unlink(i int32) {
	b := &p.blocks[i]
	if b.prev != nilBlock {
		p.blocks[b.prev].next = b.next
	} else {
		p.head = b.next
	}
	if b.next != nilBlock {
		p.blocks[b.next].prev = b.prev
	} else {
		p.tail = b.prev
	}
	b.prev, b.next = nilBlock, nilBlock
	p.nFree--
}
