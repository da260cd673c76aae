package trim

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// countKey identifies a counted message: its tokenizer, hash and length.
type countKey struct {
	hash uint64
	n    uint32
	tok  uint8
}

var seed = maphash.MakeSeed()

func hashString(s string) uint64 { return maphash.String(seed, s) }

// lru is a bounded, concurrency-safe map that forgets the least recently
// used entries roughly: each shard keeps a current and a previous
// generation, and starts a new one when the current is full, so a shard
// holds at most 2×perShard entries and a hit in the previous generation is
// promoted.
type lru[K comparable, V any] struct {
	perShard int
	shards   [16]lruShard[K, V]
}

type lruShard[K comparable, V any] struct {
	mu       sync.Mutex
	cur, old map[K]V
}

func newLRU[K comparable, V any](entries int) *lru[K, V] {
	c := &lru[K, V]{perShard: max(1, entries/32)}
	for i := range c.shards {
		c.shards[i].cur = make(map[K]V)
	}
	return c
}

func (c *lru[K, V]) get(shard uint64, k K) (V, bool) {
	s := &c.shards[shard%uint64(len(c.shards))]
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.cur[k]; ok {
		return v, true
	}
	v, ok := s.old[k]
	if ok {
		s.put(c.perShard, k, v)
	}
	return v, ok
}

// reset empties the cache.
func (c *lru[K, V]) reset() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		s.cur, s.old = make(map[K]V), nil
		s.mu.Unlock()
	}
}

// len is the number of entries held.
func (c *lru[K, V]) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.cur) + len(s.old)
		s.mu.Unlock()
	}
	return n
}

func (c *lru[K, V]) put(shard uint64, k K, v V) {
	s := &c.shards[shard%uint64(len(c.shards))]
	s.mu.Lock()
	s.put(c.perShard, k, v)
	s.mu.Unlock()
}

func (s *lruShard[K, V]) put(max int, k K, v V) {
	if len(s.cur) >= max {
		s.old, s.cur = s.cur, make(map[K]V, max)
	}
	s.cur[k] = v
}

// counts caches per-message token counts (about 4 MB at most).
var counts = newLRU[countKey, int32](1 << 17)

// tokenized counts cache misses: texts given to a tokenizer (for tests).
var tokenized atomic.Int64

// cachedCount returns the count of text under a tokenizer from the cache, or
// computes and stores it.
func cachedCount(c counter, h uint64, text string, count func() int) int {
	k := countKey{hash: h, n: uint32(len(text)), tok: c.id}
	if v, ok := counts.get(h, k); ok {
		return int(v)
	}
	n := count()
	tokenized.Add(1)
	counts.put(h, k, int32(n))
	return n
}
