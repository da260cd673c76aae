package limits

import (
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"taskgate/internal/redistest"
	"taskgate/tasks"
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

// gatewayTask has the end-to-end benchmark's limits (docs/PERFORMANCE.md):
// seven windows, task and user, in every unit.
func gatewayTask(key string) *tasks.Task {
	return newTask(key, lim(tS, req, pMin, 1e9), lim(tS, req, pDay, 1e11), lim(tS, tok, pMin, 1e12), lim(tS, mo, pDay, 1e14),
		lim(uS, req, pMin, 1e9), lim(uS, tok, pDay, 1e12), lim(uS, mo, pDay, 1e14))
}

// gatewayOutcome is a plain call's outcome as the proxy settles it: the
// usage and the "call" event taken from the journal line.
func gatewayOutcome(i int) Outcome {
	return Outcome{
		Actual: Usage{InputTokens: 12, OutputTokens: 9, Money: 33},
		// The event as the proxy hands it over: already encoded.
		Events: []Event{{Time: time.Now(), Kind: "call", Task: "bench.chat", User: "bench-user", Source: "load", RequestID: "req-" + strconv.Itoa(i),
			Encoded: gatewayEvent}},
	}
}

var gatewayEvent = []byte(`{"time":"2026-11-30T14:05:07.123456789Z","kind":"call","request_id":"req-1","task":"bench.chat","user":"bench-user","source":"load","detail":{"key":"bench","endpoint":"mini","model":"gpt-4o-mini","status":200,"code":"","input_tokens":12,"output_tokens":9,"cost_micros":33,"cost":"0.000033","latency_ms":0.412,"trimmed":0,"flagged":false,"failed_over":false,"stream":false,"anomalies":[]}}`)

// BenchmarkGatewayCall is the limit work of one plain call of the
// end-to-end benchmark: Reserve, then Settle with one "call" event. One
// user calling back to back is busy enough for leases; redis-per-call has
// them off (two scripts a call).
func BenchmarkGatewayCall(b *testing.B) {
	for _, k := range []struct {
		name     string
		st       func(b *testing.B) Store
		noLeases bool
	}{
		{"memory", func(*testing.B) Store { return NewMemoryStore() }, false},
		{"redis", func(b *testing.B) Store { return newRedis(b, redistest.URL(b), time.Second) }, false},
		{"redis-per-call", func(b *testing.B) Store { return newRedis(b, redistest.URL(b), time.Second) }, true},
	} {
		b.Run(k.name, func(b *testing.B) {
			l := New(Options{Store: k.st(b), NoLeases: k.noLeases})
			task := gatewayTask("bench.chat")
			call := Call{Task: task, User: "bench-user", Estimate: Usage{InputTokens: 12, OutputTokens: 200, Money: 150}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d, err := l.Reserve(bg, call)
				if err != nil || d.Hold == nil {
					b.Fatalf("Reserve: %v %+v", err, d.Refusal)
				}
				if _, err := l.Settle(bg, d.Hold, gatewayOutcome(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGatewayCallConcurrent runs the same as the proxy does, on
// Redis: 32 goroutines (the end-to-end benchmark's connections) each
// reserve a call and settle it in a goroutine of its own, without waiting,
// with leases and without. Besides time, it reports round trips, this
// process's CPU and redis-server's CPU per call.
func BenchmarkGatewayCallConcurrent(b *testing.B) {
	for _, mode := range []struct {
		name     string
		noLeases bool
	}{{"leases", false}, {"per-call", true}} {
		b.Run(mode.name, func(b *testing.B) { gatewayCallConcurrent(b, mode.noLeases) })
	}
}

func gatewayCallConcurrent(b *testing.B, noLeases bool) {
	s := newRedis(b, redistest.URL(b), time.Second)
	l := New(Options{Store: s, NoLeases: noLeases})
	task := gatewayTask("bench.chat")
	call := Call{Task: task, User: "bench-user", Estimate: Usage{InputTokens: 12, OutputTokens: 200, Money: 150}}
	var settles sync.WaitGroup
	b.ReportAllocs()
	b.SetParallelism(16)
	trips0, cpu0, rcpu0 := s.RoundTrips(), processCPU(), redisCPU(b, s)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			d, err := l.Reserve(bg, call)
			if err != nil || d.Hold == nil {
				b.Errorf("Reserve: %v", err)
				return
			}
			settles.Add(1)
			go func(h *Hold, o Outcome) {
				defer settles.Done()
				if _, err := l.Settle(bg, h, o); err != nil {
					b.Error(err)
				}
			}(d.Hold, gatewayOutcome(i))
		}
	})
	settles.Wait()
	b.StopTimer()
	b.ReportMetric(float64(s.RoundTrips()-trips0)/float64(b.N), "trips/op")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(redisCPU(b, s)-rcpu0)/float64(time.Microsecond)/float64(b.N), "redis-cpu-µs/op")
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU time redis-server has used (INFO cpu).
func redisCPU(b *testing.B, s *RedisStore) time.Duration {
	info, err := s.Client().Info(bg, "cpu").Result()
	if err != nil {
		b.Fatalf("INFO cpu: %v", err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}
