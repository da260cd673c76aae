package limits

import (
	"testing"
	"time"

	"taskgate/internal/redistest"
)

// BenchmarkReserveSettle is one call's limit work: Reserve then Settle, with
// task and user windows in three units, on each store.
func BenchmarkReserveSettle(b *testing.B) {
	task := newTask("bench", lim(tS, req, pDay, 1<<40), lim(tS, tok, pDay, 1<<50), lim(tS, mo, pMonth, 1<<50),
		lim(uS, req, pMin, 1<<40), lim(uS, tok, pDay, 1<<50))
	task.MaxCallsPerHour = 1 << 30
	for _, k := range []struct {
		name string
		st   func(b *testing.B) Store
	}{
		{"memory", func(*testing.B) Store { return NewMemoryStore() }},
		{"redis", func(b *testing.B) Store { return newRedis(b, redistest.URL(b), time.Second) }},
	} {
		b.Run(k.name, func(b *testing.B) {
			l := New(Options{Store: k.st(b)})
			call := Call{Task: task, User: "bench-user", Estimate: Usage{InputTokens: 1500, OutputTokens: 300, Money: 405}}
			out := Outcome{Actual: Usage{InputTokens: 1500, OutputTokens: 120, Money: 297}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d, err := l.Reserve(bg, call)
				if err != nil || d.Hold == nil {
					b.Fatalf("Reserve: %v %+v", err, d.Refusal)
				}
				if _, err := l.Settle(bg, d.Hold, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReserveSettleParallel runs the same from GOMAXPROCS goroutines.
func BenchmarkReserveSettleParallel(b *testing.B) {
	task := newTask("benchp", lim(tS, req, pDay, 1<<40), lim(tS, tok, pDay, 1<<50), lim(uS, req, pMin, 1<<40))
	for _, k := range []struct {
		name string
		st   func(b *testing.B) Store
	}{
		{"memory", func(*testing.B) Store { return NewMemoryStore() }},
		{"redis", func(b *testing.B) Store { return newRedis(b, redistest.URL(b), time.Second) }},
	} {
		b.Run(k.name, func(b *testing.B) {
			l := New(Options{Store: k.st(b)})
			call := Call{Task: task, User: "u", Estimate: Usage{InputTokens: 1500, OutputTokens: 300}}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					d, err := l.Reserve(bg, call)
					if err != nil || d.Hold == nil {
						b.Errorf("Reserve: %v", err)
						return
					}
					if _, err := l.Settle(bg, d.Hold, Outcome{Actual: Usage{InputTokens: 1500, OutputTokens: 100}}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
