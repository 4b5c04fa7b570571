package trace

import "fmt"

// Shard names one share of a trace: Index in [0, Count).
type Shard struct {
	Index, Count int
}

// ParseShard parses "i/N" with 0 <= i < N.
func ParseShard(s string) (Shard, error) {
	var sh Shard
	var rest string
	if n, _ := fmt.Sscanf(s, "%d/%d%s", &sh.Index, &sh.Count, &rest); n != 2 {
		return Shard{}, fmt.Errorf("shard %q: want i/N, e.g. 0/4", s)
	}
	if err := sh.Validate(); err != nil {
		return Shard{}, fmt.Errorf("shard %q: %w", s, err)
	}
	return sh, nil
}

// Validate checks 0 <= Index < Count.
func (sh Shard) Validate() error {
	if sh.Count < 1 || sh.Index < 0 || sh.Index >= sh.Count {
		return fmt.Errorf("index %d of %d shards: want 0 <= index < count", sh.Index, sh.Count)
	}
	return nil
}

func (sh Shard) String() string { return fmt.Sprintf("%d/%d", sh.Index, sh.Count) }

// Owns reports whether r belongs to this shard. The key is the session id when r has one
// (a conversation stays on one shard, so its turns keep their order and their shared
// prefix lands on the same replayer), else the request id. Keys are mixed with splitmix64
// before the modulo, so structured ids (all even, blocks of sessions) still spread evenly.
// The rule is pure and stable: every shard process, given the same trace, agrees on the
// partition without talking to the others.
func (sh Shard) Owns(r *Request) bool {
	if sh.Count <= 1 {
		return true
	}
	key := r.ID
	if r.HasSession {
		key = r.SessionID
	}
	return int(splitmix64(uint64(key))%uint64(sh.Count)) == sh.Index
}

// splitmix64 is the finaliser of Steele et al.'s SplitMix64: a bijective mix of all 64 bits.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// ShardSource yields only the requests of src that sh owns.
type ShardSource struct {
	src Source
	sh  Shard
	cur Request
}

// NewShardSource filters src down to shard sh.
func NewShardSource(src Source, sh Shard) *ShardSource { return &ShardSource{src: src, sh: sh} }

func (s *ShardSource) Next() bool {
	for s.src.Next() {
		s.cur = s.src.Request()
		if s.sh.Owns(&s.cur) {
			return true
		}
	}
	return false
}

func (s *ShardSource) Request() Request { return s.cur }
func (s *ShardSource) Err() error       { return s.src.Err() }
