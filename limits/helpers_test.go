package limits

import (
	"context"
	"sync"
	"testing"
	"time"

	"taskgate/config"
	"taskgate/internal/redistest"
	"taskgate/tasks"
)

// fakeClock is a settable clock shared by the Limiters of one test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// storeKind makes stores that share one state: every call of open returns
// a store (a new client for Redis) onto the same counts.
type storeKind struct {
	name string
	open func(t testing.TB) func() Store
}

func memoryKind() storeKind {
	return storeKind{name: "memory", open: func(t testing.TB) func() Store {
		st := NewMemoryStore()
		return func() Store { return st }
	}}
}

// redisKind uses one redis-server for the whole test (srvURL) and a fresh
// key prefix per open.
func redisKind(srvURL string) storeKind {
	return storeKind{name: "redis", open: func(t testing.TB) func() Store {
		prefix := redistest.Prefix(t)
		return func() Store {
			s, err := NewRedisStore(RedisOptions{URL: srvURL, Prefix: prefix, Timeout: 2 * time.Second})
			if err != nil {
				t.Fatalf("NewRedisStore: %v", err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}}
}

// storeKinds returns the memory store and a Redis store on a real server.
func storeKinds(t testing.TB) []storeKind {
	return []storeKind{memoryKind(), redisKind(redistest.URL(t))}
}

func i64(v int64) *int64 { return &v }

// lim builds a config.Limit.
func lim(scope, unit, period string, v int64) config.Limit {
	return config.Limit{Scope: scope, Unit: unit, Period: period, Value: v}
}

// newTask builds a resolved task with the given limits.
func newTask(key string, ls ...config.Limit) *tasks.Task {
	t := &tasks.Task{Task: config.Task{Key: key, Enabled: true, UserLimits: true, BlockGroup: key, Thresholds: []float64{0.8, 1.0}}}
	t.Limits = ls
	return t
}

var bg = context.Background()

func mustReserve(t testing.TB, l *Limiter, c Call) Decision {
	t.Helper()
	d, err := l.Reserve(bg, c)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	return d
}

func mustSettle(t testing.TB, l *Limiter, h *Hold, o Outcome) SettleResult {
	t.Helper()
	if h == nil {
		t.Fatal("Settle: no hold (the call was refused)")
	}
	r, err := l.Settle(bg, h, o)
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	return r
}

// usageOf returns one window's usage, failing when it is missing.
func usageOf(t testing.TB, l *Limiter, task *tasks.Task, user, scope, unit, period string) WindowUsage {
	t.Helper()
	us, err := l.Usage(bg, task, user)
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	for _, u := range us {
		if u.Scope == scope && u.Unit == unit && u.Period == period {
			return u
		}
	}
	t.Fatalf("Usage: no %s %s %s window in %+v", scope, unit, period, us)
	return WindowUsage{}
}

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("time zone %s: %v", name, err)
	}
	return loc
}
