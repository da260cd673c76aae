package jsonstr

import (
	"sync"
	"testing"
	"time"
)

// TestAppendTimeMatchesFormat compares AppendTime with time.Format over
// fractions, zones and years, each twice (formatted, then cached).
func TestAppendTimeMatchesFormat(t *testing.T) {
	plus := time.FixedZone("plus", 5*3600+30*60)
	minus := time.FixedZone("minus", -8*3600)
	times := []time.Time{
		time.Date(2026, 11, 30, 17, 20, 5, 0, time.UTC),
		time.Date(2026, 11, 30, 17, 20, 5, 1, time.UTC),
		time.Date(2026, 11, 30, 17, 20, 5, 120000000, time.UTC),
		time.Date(2026, 11, 30, 17, 20, 5, 999999999, time.UTC),
		time.Date(2026, 11, 30, 17, 20, 5, 123456789, plus),
		time.Date(2026, 11, 30, 17, 20, 5, 123456789, minus),
		time.Date(2026, 11, 30, 17, 20, 6, 5000, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 10, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(12345, 1, 1, 0, 0, 0, 50, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 50, time.UTC),
		time.Now(),
		time.Now().UTC(),
	}
	for _, tm := range times {
		for pass := range 2 {
			if got, want := string(AppendTime([]byte("x"), tm)), "x"+tm.Format(time.RFC3339Nano); got != want {
				t.Errorf("pass %d: AppendTime(%v) = %s, want %s", pass, tm, got, want)
			}
		}
	}
}

// TestAppendTimeConcurrently formats times of two seconds and two zones
// from many goroutines at once (run with -race).
func TestAppendTimeConcurrently(t *testing.T) {
	base := time.Date(2026, 11, 30, 17, 20, 5, 0, time.UTC)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				tm := base.Add(time.Duration(i*7919+g) * time.Millisecond / 3)
				if g%2 == 1 {
					tm = tm.In(time.FixedZone("x", 3600))
				}
				if got, want := string(AppendTime(nil, tm)), tm.Format(time.RFC3339Nano); got != want {
					t.Errorf("AppendTime(%v) = %s, want %s", tm, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}
