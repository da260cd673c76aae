package trim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

var benchSizes = []int{10, 100, 1000, 10000}

// BenchmarkChat counts and trims generated histories (about 100 bytes of
// text a message, tool rounds, names) of 10 to 10,000 messages with
// o200k_base:
//
//	bound: the cheap bound settles it, nothing is tokenized
//	count: the bound does not settle it; every message is counted, none dropped
//	trim:  half the tokens must go
//
// cold empties the count cache before each call; warm is a repeated call.
func BenchmarkChat(b *testing.B) {
	for _, n := range benchSizes {
		r := rand.New(rand.NewPCG(uint64(n), 99))
		body := genHistory(r, n, genOpts{tools: true, size: 50})
		full := promptTokens(b, "o200k_base", body)
		cases := []struct {
			name   string
			window int
			cold   bool
		}{
			{"bound", 100 * len(body), false},
			{"count/cold", full + 1, true},
			{"count/warm", full + 1, false},
			{"trim/cold", full / 2, true},
			{"trim/warm", full / 2, false},
		}
		for _, c := range cases {
			b.Run(fmt.Sprintf("n=%d/%s", n, c.name), func(b *testing.B) {
				budgets := []Budget{{Tokenizer: "o200k_base", ContextWindow: c.window}}
				opt := Options{Enabled: true, AttachmentsShare: 0.5}
				if _, err := Chat(body, budgets, opt); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				before := tokenized.Load()
				defer func() { b.ReportMetric(float64(tokenized.Load()-before)/float64(b.N), "tokenized/op") }()
				for b.Loop() {
					if c.cold {
						counts.reset()
					}
					res, err := Chat(body, budgets, opt)
					if err != nil || (c.name == "trim/cold" || c.name == "trim/warm") && res.Dropped == 0 {
						b.Fatal(err, res.Dropped)
					}
				}
			})
		}
	}
}

// BenchmarkGrowingConversation replays a conversation that grows by a turn
// (a user and an assistant message) per call, from 100 or 1,000 messages,
// with a window the cheap bound does not settle, so every call counts. With
// the cache each call tokenizes only the new turn; the rest is parsing and
// hashing. Compare with BenchmarkChat's count/cold and count/warm.
func BenchmarkGrowingConversation(b *testing.B) {
	for _, start := range []int{100, 1000} {
		b.Run(fmt.Sprintf("from=%d", start), func(b *testing.B) {
			r := rand.New(rand.NewPCG(5, uint64(start)))
			msgs := rawMessages(genHistory(r, start+400, genOpts{tools: true, size: 50}))
			build := func(k int) []byte {
				return []byte(`{"model":"gpt-4o","messages":[` + strings.Join(msgs[:k], ",") + `]}`)
			}
			var bodies [][]byte
			for k := start; k <= len(msgs); k += 2 {
				bodies = append(bodies, build(k))
			}
			// A window just over the largest prompt: the bound never settles it.
			budgets := []Budget{{Tokenizer: "o200k_base", ContextWindow: promptTokens(b, "o200k_base", bodies[len(bodies)-1]) + 1}}
			opt := Options{Enabled: true}
			b.ReportAllocs()
			b.ResetTimer()
			var tok int64
			for i := 0; i < b.N; i++ {
				j := i%(len(bodies)-1) + 1
				if j == 1 {
					// Start over: the first body is counted whole, untimed.
					b.StopTimer()
					counts.reset()
					Chat(bodies[0], budgets, opt)
					b.StartTimer()
				}
				before := tokenized.Load()
				if _, err := Chat(bodies[j], budgets, opt); err != nil {
					b.Fatal(err)
				}
				tok += tokenized.Load() - before
			}
			b.ReportMetric(float64(tok)/float64(b.N), "tokenized/op")
		})
	}
}

func BenchmarkCountText(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	text := bigText(r, 100<<10)
	for _, tok := range []string{"o200k_base", "cl100k_base", "estimate"} {
		b.Run(tok, func(b *testing.B) {
			CountText(tok, "warm up")
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				CountText(tok, text)
			}
		})
	}
}
