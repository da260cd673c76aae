package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"taskgate/internal/redistest"
)

// slowScript holds Redis busy for ARGV[1] ms, so that runs sent meanwhile
// queue behind it in the batcher.
var slowScript = newLuaScript(`
local t = redis.call('TIME')
local until_us = (t[1] * 1000000 + t[2]) + tonumber(ARGV[1]) * 1000
repeat
  t = redis.call('TIME')
until t[1] * 1000000 + t[2] >= until_us
return 0`)

// countScript counts its runs in KEYS[1] and echoes ARGV[1].
var countScript = newLuaScript(`redis.call('INCR', KEYS[1]) return ARGV[1]`)

// TestScriptBatcher checks, on plain Redis and on Cluster, that runs made
// while the in-flight slots are taken go out together (in batches of at
// most maxBatch), each with its own reply; that a script missing from the
// server is sent again with EVAL; and that a run whose context ends while
// it waits is not sent.
func TestScriptBatcher(t *testing.T) {
	// Servers of its own: the test blocks Redis and flushes its scripts.
	urls := []struct{ name, url string }{{"redis", redistest.Start(t).URL()}}
	if !testing.Short() {
		urls = append(urls, struct{ name, url string }{"cluster", startCluster(t)})
	}
	for _, u := range urls {
		for _, c := range []struct {
			name     string
			maxBatch int
			waiting  int
			flush    bool // SCRIPT FLUSH first: the batch meets NOSCRIPT
			cancel   int  // this many waiting runs give up before they are sent
			trips    int  // round trips after the slow run's
		}{
			{name: "one batch", maxBatch: 64, waiting: 10, trips: 1},
			{name: "batches of three", maxBatch: 3, waiting: 7, trips: 3},
			{name: "one waiting goes alone", maxBatch: 64, waiting: 1, trips: 1},
			{name: "noscript", maxBatch: 64, waiting: 5, flush: true, trips: 2},
			{name: "cancelled while waiting", maxBatch: 64, waiting: 6, cancel: 2, trips: 1},
		} {
			t.Run(u.name+"/"+c.name, func(t *testing.T) {
				s := newRedis(t, u.url, 5*time.Second)
				b := newScriptBatcher(s.c, 1, c.maxBatch)
				counter := s.prefix + "{batch}:n"
				if err := s.c.ScriptFlush(bg).Err(); err != nil {
					t.Fatal(err)
				}
				scripts := []*luaScript{slowScript}
				if !c.flush {
					scripts = append(scripts, countScript)
				}
				for _, sc := range scripts {
					if h, err := s.c.ScriptLoad(bg, sc.src).Result(); err != nil || h != sc.hash {
						t.Fatalf("SCRIPT LOAD: %s, %v; want %s", h, err, sc.hash)
					}
				}
				slowDone := make(chan error, 1)
				go func() {
					sc := newScriptCmd(slowScript, 2)
					sc.key(s.prefix + "{batch}:slow")
					sc.num(300)
					_, err := b.run(bg, sc)
					slowDone <- err
				}()
				waitQueue(t, b, 0, func() bool { return b.inFlight == 1 })
				var trips atomic.Int64 // script round trips from here on (not connection setup)
				s.c.AddHook(scriptTripHook{&trips})
				type result struct {
					i   int
					res any
					err error
				}
				results := make(chan result, c.waiting)
				ctx, cancel := context.WithCancel(bg)
				defer cancel()
				for i := 0; i < c.waiting; i++ {
					runCtx := bg
					if i < c.cancel {
						runCtx = ctx
					}
					go func() {
						sc := newScriptCmd(countScript, 2)
						sc.key(counter)
						sc.str(fmt.Sprint("run-", i))
						res, err := b.run(runCtx, sc)
						results <- result{i, res, err}
					}()
					waitQueue(t, b, i+1, nil)
				}
				cancel()
				if c.cancel > 0 {
					waitQueue(t, b, c.waiting-c.cancel, nil)
				}
				if err := <-slowDone; err != nil {
					t.Fatalf("slow run: %v", err)
				}
				for range c.waiting {
					r := <-results
					if r.i < c.cancel {
						if !errors.Is(r.err, context.Canceled) {
							t.Errorf("run %d: %v, %v; want context.Canceled", r.i, r.res, r.err)
						}
						continue
					}
					if r.err != nil || r.res != fmt.Sprint("run-", r.i) {
						t.Errorf("run %d: %v, %v", r.i, r.res, r.err)
					}
				}
				if got := trips.Load(); got != int64(c.trips) {
					t.Errorf("%d round trips for %d waiting runs, want %d", got, c.waiting, c.trips)
				}
				if n, err := s.c.Get(bg, counter).Int(); err != nil || n != c.waiting-c.cancel {
					t.Errorf("scripts run: %d (%v), want %d", n, err, c.waiting-c.cancel)
				}
				waitQueue(t, b, 0, func() bool { return b.inFlight == 0 })
			})
		}
	}
}

// scriptTripHook counts EVAL and EVALSHA commands and pipelines of them
// (not the commands that set up a new connection).
type scriptTripHook struct{ n *atomic.Int64 }

func (h scriptTripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptTripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "eval" || n == "evalsha" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h scriptTripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && (cmds[0].Name() == "eval" || cmds[0].Name() == "evalsha") {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// waitQueue waits until b has n runs queued (and ok, if given, holds).
func waitQueue(t *testing.T, b *scriptBatcher, n int, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		done := len(b.queue) == n && (ok == nil || ok())
		b.mu.Unlock()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("batcher queue never reached %d", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentSettlesCoalesce settles many holds at once through a
// Limiter on Redis: every result is right, the counts add up, and the
// settles took fewer round trips than there were settles.
func TestConcurrentSettlesCoalesce(t *testing.T) {
	s := newRedis(t, redistest.URL(t), 5*time.Second)
	l := New(Options{Store: s})
	task := newTask("coalesce", lim(tS, req, pDay, 1000), lim(tS, tok, pDay, 1_000_000), lim(uS, tok, pDay, 1_000_000))
	task.Thresholds = []float64{0.5}
	const n = 100
	holds := make([]*Hold, n)
	for i := range holds {
		holds[i] = mustReserve(t, l, Call{Task: task, User: fmt.Sprint("u", i%3), Estimate: Usage{InputTokens: 10_000}}).Hold
	}
	trips0 := s.RoundTrips()
	var wg sync.WaitGroup
	var mu sync.Mutex
	crossings := 0
	start := make(chan struct{})
	for i, h := range holds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := l.Settle(bg, h, Outcome{Actual: Usage{InputTokens: int64(5000 + i)}})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			crossings += len(r.Crossings)
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	if trips := s.RoundTrips() - trips0; trips >= n {
		t.Errorf("%d settles took %d round trips", n, trips)
	} else {
		t.Logf("%d settles took %d round trips", n, trips)
	}
	want := int64(0)
	for i := range n {
		want += int64(5000 + i)
	}
	if u := usageOf(t, l, task, "u0", tS, tok, pDay); u.Used != want || u.Reserved != 0 {
		t.Errorf("task tokens %+v, want used %d", u, want)
	}
	if u := usageOf(t, l, task, "u0", tS, req, pDay); u.Used != n || u.Reserved != 0 {
		t.Errorf("task requests %+v, want used %d", u, n)
	}
	if crossings != 1 { // 0.5 of the task's tokens, once; user windows stay below
		t.Errorf("%d crossings, want 1", crossings)
	}
}

// TestPushLogGoesWithTheScript: the log entries a script command carries
// (pushLog) reach their list once, newest first and capped at eventCap,
// in the script's round trip: alone, after NOSCRIPT (the script goes again
// as EVAL, the entries do not), and in a batch.
func TestPushLogGoesWithTheScript(t *testing.T) {
	s := newRedis(t, redistest.Start(t).URL(), 5*time.Second) // a server of its own: the test flushes its scripts
	for _, c := range []struct {
		name    string
		flush   bool // SCRIPT FLUSH first
		batched bool // sent by a batcher with a batch of other runs
		entries int
		trips   int
	}{
		{name: "alone", entries: 3, trips: 1},
		{name: "noscript", flush: true, entries: 3, trips: 2},
		{name: "batched", batched: true, entries: 3, trips: 1},
		{name: "past the cap", entries: eventCap + 5, trips: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			key, counter := s.prefix+"{push}:"+c.name, s.prefix+"{push}:n:"+c.name
			if err := s.c.ScriptFlush(bg).Err(); err != nil {
				t.Fatal(err)
			}
			if !c.flush {
				if err := s.c.ScriptLoad(bg, countScript.src).Err(); err != nil {
					t.Fatal(err)
				}
			}
			entries := make([][]byte, c.entries)
			for i := range entries {
				entries[i] = []byte(fmt.Sprint("e", i))
			}
			sc := newScriptCmd(countScript, 2)
			sc.key(counter)
			sc.str("done")
			sc.pushLog(key, entries)
			var trips atomic.Int64
			s.c.AddHook(scriptTripHook{&trips})
			var res any
			var err error
			if c.batched {
				b := newScriptBatcher(s.c, 1, 64)
				other := newScriptCmd(countScript, 2)
				other.key(counter + ":other")
				other.str("other")
				res, err = sendBatch(b, other, sc)
			} else {
				res, err = runScript(bg, s.c, sc)
			}
			if err != nil || res != "done" {
				t.Fatalf("script: %v, %v", res, err)
			}
			if got := trips.Load(); got != int64(c.trips) {
				t.Errorf("%d round trips, want %d", got, c.trips)
			}
			if n, err := s.c.Get(bg, counter).Int(); err != nil || n != 1 {
				t.Errorf("script ran %d times (%v), want once", n, err)
			}
			got, err := s.c.LRange(bg, key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			want := min(c.entries, eventCap)
			if len(got) != want || got[0] != fmt.Sprint("e", c.entries-1) || got[want-1] != fmt.Sprint("e", c.entries-want) {
				t.Errorf("log holds %d entries from %q to %q, want %d from e%d to e%d", len(got), got[0], got[len(got)-1], want, c.entries-1, c.entries-want)
			}
		})
	}
}

// sendBatch sends runs as one batch of b and returns the last one's reply.
func sendBatch(b *scriptBatcher, scs ...*scriptCmd) (any, error) {
	batch := make([]*scriptRun, len(scs))
	for i, sc := range scs {
		batch[i] = &scriptRun{ctx: bg, sc: sc, done: make(chan struct{})}
	}
	b.send(batch)
	last := batch[len(batch)-1]
	return last.res, last.err
}
