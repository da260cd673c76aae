package trim

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

func TestLRUBounded(t *testing.T) {
	c := newLRU[int, int](320) // 10 a shard
	for i := range 10000 {
		c.put(uint64(i), i, i)
	}
	if n := c.len(); n > 320 || n < 160 {
		t.Errorf("holds %d entries, want at most 320", n)
	}
	// The newest are kept.
	if v, ok := c.get(9999, 9999); !ok || v != 9999 {
		t.Error("newest entry lost")
	}
	if _, ok := c.get(0, 0); ok {
		t.Error("oldest entry kept")
	}
	// A hit in the old generation is promoted and survives a rotation.
	c2 := newLRU[int, int](32) // 1 a shard: cur holds one entry
	c2.put(0, 1, 1)
	c2.put(0, 2, 2) // rotates: old={1}
	if _, ok := c2.get(0, 1); !ok {
		t.Fatal("old generation miss")
	}
}

func TestLRUConcurrent(t *testing.T) {
	c := newLRU[int, int](1000)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5000 {
				k := g*5000 + i
				c.put(uint64(k), k, k)
				if v, ok := c.get(uint64(k), k); ok && v != k {
					t.Errorf("got %d for %d", v, k)
				}
			}
		}()
	}
	wg.Wait()
}

// TestCacheGrowingConversation checks that a conversation that grows by a
// turn tokenizes only the new turn.
func TestCacheGrowingConversation(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	body := genHistory(r, 300, genOpts{tools: true, size: 60})
	budgets := []Budget{{Tokenizer: "o200k_base", ContextWindow: 10}, {Tokenizer: "cl100k_base", ContextWindow: 10}}
	// Window 10: everything is counted, then ErrContextLength.
	Chat(body, budgets, Options{Enabled: true})
	before := tokenized.Load()
	Chat(body, budgets, Options{Enabled: true})
	if n := tokenized.Load() - before; n != 0 {
		t.Errorf("the same call tokenized %d texts again", n)
	}
	i := len(body) - len(toolsSuffix) - len(`,"stream":true}`) - 1 // the messages array's ']'
	if body[i] != ']' {
		t.Fatalf("no ] at %d: %q", i, body[i-5:i+5])
	}
	// New texts every run, so -count=N does not find them cached.
	nonce := time.Now().UnixNano()
	next := string(body[:i]) + fmt.Sprintf(`,{"role":"assistant","content":"a new answer %d"},{"role":"user","content":"a new question %d"}`, nonce, nonce) + string(body[i:])
	before = tokenized.Load()
	Chat([]byte(next), budgets, Options{Enabled: true})
	if n := tokenized.Load() - before; n != 4 {
		t.Errorf("a new turn tokenized %d texts, want 2 messages × 2 tokenizers", n)
	}
}

const toolsSuffix = `,"tools":[{"type":"function","function":{"name":"lookup","description":"Look a thing up.","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]`
