package record

import (
	"container/list"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"math"
	"sync"
	"sync/atomic"
)

// Hashing. Every hash a recording writes (messages, identifiers, prefix blocks) is
// HMAC-SHA256 (RFC 2104, FIPS 198-1) keyed by the recording's secret salt, truncated to
// 64 bits. A keyed hash, not a plain one, because prompts are guessable: without the salt
// anyone holding the trace could hash candidate texts ("You are a helpful assistant.")
// and look for them; with it, the ids are pseudo-random to whoever lacks the salt (HMAC
// is a PRF when SHA-256's compression function is). HMAC-SHA256 because it is in the
// standard library (crypto/hmac, crypto/sha256: no new dependency; blake2b would need
// golang.org/x/crypto), runs on the SHA extensions of current x86 and ARM cores, and is
// the keyed hash auditors already accept. 64 bits are plenty: a collision between two of
// a recording's billion distinct messages has odds of about 2^-4.
//
// Each use starts with its own tag byte, so that a message's hash can never equal a
// block's or an identifier's.
const (
	tagKey     = 'k' // an identifier: a session header's value, a user, a response id
	tagMessage = 'm' // one message's canonical form (role and pieces)
	tagChain   = 'c' // the chain over messages[0..j]
	tagBlock   = 'b' // one prefix block: the previous block's id and the block's token ids
	tagImage   = 'i' // an image's URL or data, so that two images differ in a message's hash
)

// macs hands out HMAC-SHA256 states keyed by the salt. hmac.New costs a few allocations
// and two compressions of the key; a pooled state is Reset instead, which restores the
// keyed state without either.
type macs struct{ pool sync.Pool }

func newMACs(salt [32]byte) *macs {
	key := salt
	return &macs{pool: sync.Pool{New: func() any { return hmac.New(sha256.New, key[:]) }}}
}

func (m *macs) get() hash.Hash {
	h := m.pool.Get().(hash.Hash)
	h.Reset()
	return h
}

func (m *macs) put(h hash.Hash) { m.pool.Put(h) }

// sum64 returns the first 8 bytes of h's sum, big-endian.
func sum64(h hash.Hash) uint64 {
	var b [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(b[:0]))
}

// nonZero maps 0, which the Request's fields use for "none", to 1.
func nonZero(x uint64) uint64 { return max(x, 1) }

// writeString writes s to h through buf, in pieces of buf's size: hash.Hash takes bytes,
// and converting a long message's string to bytes would copy all of it at once.
func writeString(h hash.Hash, buf []byte, s string) {
	for len(s) > 0 {
		n := copy(buf, s)
		h.Write(buf[:n])
		s = s[n:]
	}
}

// tokenCache holds the token ids of messages by their content hash, least recently used
// first out, its size bounded by the tokens it holds (4 bytes each, plus about 100 bytes
// an entry). An agent resends its whole context with every call, so without it a
// session's k-th call would tokenize all k-1 earlier calls' messages again: quadratic in
// the session's length. Safe for concurrent use; the ids it returns are shared and must
// not be changed.
type tokenCache struct {
	mu   sync.Mutex
	max  int // tokens
	size int
	m    map[uint64]*list.Element
	lru  list.List // of *cached, most recently used at the front

	encodes atomic.Int64 // texts tokenized (misses): for tests and the benchmark
}

type cached struct {
	key uint64
	ids []uint32
}

func newTokenCache(maxTokens int) *tokenCache {
	return &tokenCache{max: maxTokens, m: map[uint64]*list.Element{}}
}

func (c *tokenCache) get(key uint64) ([]uint32, bool) {
	if c.max <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(e)
	return e.Value.(*cached).ids, true
}

// put caches ids under key. A message larger than the whole cache is not cached: it
// would evict everything for one entry.
func (c *tokenCache) put(key uint64, ids []uint32) {
	// An empty message is cached too (as one entry of no tokens): a miss costs a hash.
	if len(ids) > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; ok {
		return // another parser tokenized it meanwhile
	}
	for c.size+len(ids) > c.max && c.lru.Len() > 0 {
		old := c.lru.Remove(c.lru.Back()).(*cached)
		delete(c.m, old.key)
		c.size -= len(old.ids)
	}
	c.m[key] = c.lru.PushFront(&cached{key: key, ids: ids})
	c.size += len(ids)
}

// stats returns the cache's entries and tokens held (for tests).
func (c *tokenCache) stats() (entries, tokens int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.size
}

// messageTokens returns the token ids of m's text, from the cache when its content hash
// (key) is there. The text is what the encoding tokenizes: m's pieces that are text
// (content, tool calls' names and arguments, tool results), each followed by a newline
// but the last. The server's chat template is not known here, so its role markers and
// separators are not counted: PromptTokens is the text's count, which the recorder
// replaces by the server's usage.prompt_tokens when the response has it.
func (p *Parser) messageTokens(m *message, key uint64, scratch []byte) ([]uint32, []byte) {
	if ids, ok := p.cache.get(key); ok {
		return ids, scratch
	}
	text := scratch[:0]
	for _, pc := range m.pieces {
		if !pc.tokens() {
			continue
		}
		if len(text) > 0 {
			text = append(text, '\n')
		}
		text = append(text, pc.s...)
	}
	p.cache.encodes.Add(1)
	var ids []uint32
	if len(text) > 0 {
		ids = toUint32(p.enc.Encode(string(text)))
	}
	p.cache.put(key, ids)
	return ids, text
}

// blockIDs returns the ids of the leading whole blocks of blockTokens tokens in the
// prompt whose tokens are the concatenation of parts: block i's id is the keyed hash of
// block i-1's id (0 before the first) and block i's token ids, as a non-negative int64
// (63 bits). By the chain, two prompts have equal ids at block i exactly when their
// first (i+1)*blockTokens tokens are equal (up to a 2^-63 collision), which is what
// trace's prefix_blocks says; a partial last block gets no id, as a prefix cache caches
// whole blocks only.
func (p *Parser) blockIDs(h hash.Hash, parts [][]uint32, total int) []int64 {
	bt := p.blockTokens
	if bt <= 0 || total < bt {
		return nil
	}
	ids := make([]int64, 0, total/bt)
	buf := make([]byte, 9, 9+4*bt)
	buf[0] = tagBlock
	var prev uint64
	for _, part := range parts {
		for _, t := range part {
			buf = binary.LittleEndian.AppendUint32(buf, t)
			if len(buf) < cap(buf) {
				continue
			}
			binary.BigEndian.PutUint64(buf[1:9], prev)
			h.Reset()
			h.Write(buf)
			prev = sum64(h) &^ (1 << 63)
			ids = append(ids, int64(prev))
			buf = buf[:9]
		}
	}
	return ids
}

// hash returns the keyed hash of m's canonical form: the content hash, also its token
// ids' key in the cache.
func (m *message) hash(h hash.Hash, buf []byte) uint64 {
	h.Reset()
	var hdr [2 + binary.MaxVarintLen64]byte
	hdr[0], hdr[1] = tagMessage, m.role
	h.Write(hdr[:2])
	for _, pc := range m.pieces {
		hdr[0] = pc.kind
		n := binary.PutUvarint(hdr[1:], uint64(len(pc.s)))
		h.Write(hdr[:1+n])
		writeString(h, buf, pc.s)
	}
	return sum64(h)
}

// finish hashes x's messages into r.Msgs and, when count is set, counts the tokens and
// makes the blocks. The tools are counted either way: their count is the trace's
// tool_tokens, which the server's usage does not give, and an application sends the
// same tools with every request, so their tokens come from the cache.
func (p *Parser) finish(r *Request, x *extract, count bool) {
	h := p.macs.get()
	defer p.macs.put(h)
	buf := make([]byte, 4096)
	r.Images = int32(min(x.images, math.MaxInt32))
	parts := make([][]uint32, 0, len(x.msgs)+1)
	var total int
	if x.tools != "" {
		h.Reset()
		buf[0] = tagMessage
		h.Write(buf[:1])
		writeString(h, buf, x.tools)
		key := sum64(h)
		ids, ok := p.cache.get(key)
		if !ok {
			p.cache.encodes.Add(1)
			ids = toUint32(p.enc.Encode(x.tools))
			p.cache.put(key, ids)
		}
		parts = append(parts, ids)
		total += len(ids)
		r.ToolTokens = int32(min(len(ids), math.MaxInt32))
	}
	if len(x.msgs) > 0 {
		r.Msgs = make([]uint64, len(x.msgs))
		r.Roles = make([]byte, len(x.msgs))
	}
	var chain [17]byte
	chain[0] = tagChain
	var prev uint64 // Msgs[j-1]; 0 before the first message
	var scratch []byte
	for j := range x.msgs {
		m := &x.msgs[j]
		c := m.hash(h, buf)
		binary.BigEndian.PutUint64(chain[1:9], prev)
		binary.BigEndian.PutUint64(chain[9:17], c)
		h.Reset()
		h.Write(chain[:])
		prev = nonZero(sum64(h))
		r.Msgs[j], r.Roles[j] = prev, m.role
		if !count {
			continue
		}
		var ids []uint32
		if m.ids != nil {
			ids = m.ids
		} else {
			ids, scratch = p.messageTokens(m, c, scratch)
		}
		parts = append(parts, ids)
		total += len(ids)
	}
	if !count {
		return
	}
	r.PromptTokens = int32(min(total, math.MaxInt32))
	if !x.separate && r.PrevKey == 0 {
		r.Blocks = p.blockIDs(h, parts, total)
	}
}

func toUint32(ids []int) []uint32 {
	out := make([]uint32, len(ids))
	for i, t := range ids {
		out[i] = uint32(t)
	}
	return out
}
