package proxy

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestWorkerPool(t *testing.T) {
	base := runtime.NumGoroutine()
	p := newWorkerPool(100 * time.Millisecond)

	// Many jobs from many goroutines at once: each runs exactly once.
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 40 {
				wg.Add(1)
				p.run(func() { ran.Add(1); wg.Done() })
			}
		})
	}
	wg.Wait()
	if n := ran.Load(); n != 2000 {
		t.Fatalf("%d jobs ran, want 2000", n)
	}

	// Jobs one after the other reuse the idle workers: no goroutine more.
	time.Sleep(10 * time.Millisecond)
	before := runtime.NumGoroutine()
	for range 20 {
		done := make(chan struct{})
		p.run(func() { close(done) })
		<-done
		time.Sleep(time.Millisecond)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines %d after sequential jobs, %d before", after, before)
	}

	// Idle workers end.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines %d, baseline %d: idle workers did not end", runtime.NumGoroutine(), base)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
