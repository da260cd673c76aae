package limits

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"taskgate/config"
	"taskgate/internal/redistest"
	"taskgate/tasks"
)

// redisReplicas returns n Limiters (replicas) on one Redis key space.
func redisReplicas(t *testing.T, n int, opts Options) ([]*Limiter, []*RedisStore) {
	t.Helper()
	url, prefix := redistest.URL(t), redistest.Prefix(t)
	ls := make([]*Limiter, n)
	ss := make([]*RedisStore, n)
	for i := range ls {
		s, err := NewRedisStore(RedisOptions{URL: url, Prefix: prefix, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		o := opts
		o.Store = s
		ls[i], ss[i] = New(o), s
		t.Cleanup(func() { _ = ls[i].Close() })
	}
	return ls, ss
}

// bigTask has limits on every unit, task and user, far above what a test
// reaches, so that its busy scopes are served from leases.
func bigTask(key string) *tasks.Task {
	return newTask(key,
		lim(tS, req, pMin, 1_000_000), lim(tS, tok, pDay, 1_000_000_000), lim(tS, mo, pMonth, 1_000_000_000),
		lim(uS, req, pHour, 1_000_000), lim(uS, tok, pMin, 1_000_000_000), lim(uS, mo, pDay, 1_000_000_000))
}

func TestLeaseCountsEveryCallExactly(t *testing.T) {
	ls, ss := redisReplicas(t, 1, Options{})
	l, s := ls[0], ss[0]
	task := bigTask("lease.exact")
	const calls = 400
	var leased int
	var tokens, money int64
	trips0 := s.RoundTrips()
	for i := 0; i < calls; i++ {
		if i == calls/2 {
			// From here on the leased calls' checks read the blocks mirror.
			waitMirror(t, s, true)
			trips0 = s.RoundTrips()
		}
		var space *Hold
		if i%2 == 1 {
			space = new(Hold) // half the calls give their hold's storage
		}
		d := mustReserve(t, l, Call{Task: task, User: "ann", Estimate: Usage{InputTokens: 20, OutputTokens: 100, Money: 90}, HoldSpace: space})
		if space != nil && d.Hold != space {
			t.Fatalf("call %d: the hold is not made in the HoldSpace given", i)
		}
		if d.Hold.lease != nil {
			leased++
		}
		if d.Requests == nil || d.Requests.Remaining >= 1_000_000 {
			t.Fatalf("call %d: requests trio %+v does not count the call", i, d.Requests)
		}
		act := Usage{InputTokens: 20, OutputTokens: int64(i % 101), Money: int64(i % 91)}
		tokens += act.Tokens()
		money += act.Money
		mustSettle(t, l, d.Hold, Outcome{Actual: act, Events: []Event{{Kind: "call"}}})
	}
	trips := s.RoundTrips() - trips0
	if leased < calls/2 {
		t.Fatalf("%d of %d calls served from a lease", leased, calls)
	}
	// A lease's reserve and settle now and then, no round trip of the
	// leased calls' own; without leases: 2 scripts a call.
	if trips > calls/2/4 {
		t.Errorf("%d round trips for the last %d calls", trips, calls/2)
	}
	assertBigTaskUsage(t, l, task, "ann", calls, tokens, money)
	assertNoLeaseLeft(t, s, task.Key)
}

// assertBigTaskUsage checks every window of a bigTask for user after
// calls calls that used tokens and money: exact, nothing reserved, and one
// call event a call.
func assertBigTaskUsage(t *testing.T, l *Limiter, task *tasks.Task, user string, calls, tokens, money int64) {
	t.Helper()
	for _, w := range []struct {
		scope, unit, period string
		want                int64
	}{
		{tS, req, pMin, calls}, {tS, tok, pDay, tokens}, {tS, mo, pMonth, money},
		{uS, req, pHour, calls}, {uS, tok, pMin, tokens}, {uS, mo, pDay, money},
	} {
		u := usageOf(t, l, task, user, w.scope, w.unit, w.period)
		if u.Used != w.want || u.Reserved != 0 {
			t.Errorf("%s %s %s: used %d reserved %d, want %d and 0", w.scope, w.unit, w.period, u.Used, u.Reserved, w.want)
		}
	}
	evs, err := l.Events(bg, EventFilter{Tasks: []string{task.Key}, Kind: "call"})
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(evs)) != calls {
		t.Errorf("%d call events, want %d", len(evs), calls)
	}
}

// assertNoLeaseLeft checks that no window of task still counts a lease.
func assertNoLeaseLeft(t *testing.T, s *RedisStore, task string) {
	t.Helper()
	keys, err := s.Client().Keys(bg, s.prefix+"{"+task+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if typ, _ := s.Client().Type(bg, k).Result(); typ != "hash" {
			continue
		}
		if v, err := s.Client().HGet(bg, k, "l").Int64(); err == nil && v != 0 {
			t.Errorf("%s: leased %d after every lease ended", k, v)
		}
	}
	if n, _ := s.Client().HLen(bg, s.prefix+"{"+task+"}:holds").Result(); n != 0 {
		t.Errorf("%d holds left", n)
	}
}

// TestLeasesExactlyNAcrossReplicas: three replicas, a limit of N large
// enough for leases (N requests; or money for N calls, each using what it
// reserved), 2N calls at once: exactly N go through, and the count is
// exactly what they used.
func TestLeasesExactlyNAcrossReplicas(t *testing.T) {
	const n = 1500
	for _, c := range []struct {
		name  string
		limit config.Limit
		check [3]string // the window that must hold exactly n calls' worth
		per   int64     // what a call counts in it
		est   Usage
	}{
		{"requests", lim(tS, req, pMin, n), [3]string{tS, req, pMin}, 1, Usage{InputTokens: 10}},
		{"money", lim(uS, mo, pDay, n*90), [3]string{uS, mo, pDay}, 90, Usage{InputTokens: 10, Money: 90}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ls, ss := redisReplicas(t, 3, Options{})
			task := newTask("lease.n."+c.name, c.limit, lim(uS, tok, pDay, 1_000_000_000))
			const goroutines, each = 48, 2 * n / 48
			var ok, refused, leased atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					l := ls[g%3]
					<-start
					for i := 0; i < each; i++ {
						d, err := l.Reserve(bg, Call{Task: task, User: "bob", Estimate: c.est})
						if err != nil {
							t.Error(err)
							return
						}
						if d.Hold == nil {
							refused.Add(1)
							continue
						}
						ok.Add(1)
						if d.Hold.lease != nil {
							leased.Add(1)
						}
						if _, err := l.Settle(bg, d.Hold, Outcome{Actual: Usage{InputTokens: 7, Money: c.est.Money}}); err != nil {
							t.Error(err)
						}
					}
				}(g)
			}
			close(start)
			wg.Wait()
			if ok.Load() != n || refused.Load() != goroutines*each-n {
				t.Fatalf("served %d, refused %d; want exactly %d served of %d", ok.Load(), refused.Load(), n, goroutines*each)
			}
			if leased.Load() == 0 {
				t.Error("no call was served from a lease")
			}
			for _, l := range ls[:2] {
				l.endLeases("", true) // the other replicas' leases end now
			}
			u := usageOf(t, ls[2], task, "bob", c.check[0], c.check[1], c.check[2])
			if u.Used != n*c.per || u.Reserved != 0 {
				t.Errorf("used %d reserved %d, want %d and 0", u.Used, u.Reserved, n*c.per)
			}
			assertNoLeaseLeft(t, ss[0], task.Key)
		})
	}
}

// TestLeaseSeesBlocksAndOverridesAtOnce: a replica serving a busy user from
// a lease refuses the user's very next call once another replica blocks
// them, and applies another replica's override to its very next call.
func TestLeaseSeesBlocksAndOverridesAtOnce(t *testing.T) {
	ls, _ := redisReplicas(t, 2, Options{})
	a, b := ls[0], ls[1]
	task := bigTask("lease.admin")
	call := Call{Task: task, User: "carol", Estimate: Usage{InputTokens: 10}}
	warm := func() {
		t.Helper()
		for i := 0; i < 40; i++ {
			d := mustReserve(t, a, call)
			if d.Hold == nil {
				t.Fatalf("warm-up call refused: %+v %+v", d.Refusal, d.Blocked)
			}
			mustSettle(t, a, d.Hold, Outcome{Actual: Usage{InputTokens: 10}})
		}
		d := mustReserve(t, a, call)
		if d.Hold == nil || d.Hold.lease == nil {
			t.Fatal("a busy user is not served from a lease")
		}
		mustSettle(t, a, d.Hold, Outcome{Actual: Usage{InputTokens: 10}})
	}
	warm()
	if err := b.PutBlock(bg, Block{User: "carol", Group: "*", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if d := mustReserve(t, a, call); d.Blocked == nil {
		t.Fatal("the next call after a block on another replica was not blocked")
	}
	if _, err := b.DeleteBlock(bg, "carol", "*"); err != nil {
		t.Fatal(err)
	}
	warm()
	// Usage on a ends its lease first, so what it shows is exact.
	used := usageOf(t, a, task, "carol", uS, req, pHour)
	if used.Reserved != 0 {
		t.Fatalf("reserved %d with no call in flight", used.Reserved)
	}
	warm()
	// Another replica lowers the user's hourly requests to two more than
	// a's calls made (a's lease has taken more than that).
	if err := b.SetOverrides(bg, task, config.Limits{User: config.ScopeLimits{Requests: config.Periods{Hour: i64(used.Used + 41 + 2)}}}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, true, false} {
		d := mustReserve(t, a, call)
		if (d.Hold != nil) != want {
			t.Fatalf("call %d after the override: served %v, want %v (%+v)", i+1, d.Hold != nil, want, d.Refusal)
		}
		if d.Hold != nil {
			mustSettle(t, a, d.Hold, Outcome{Actual: Usage{InputTokens: 10}})
		}
	}
}

// TestLeaseOfADeadReplicaIsReaped: a replica that dies holding a lease
// strands nothing once the lease's hold runs out.
func TestLeaseOfADeadReplicaIsReaped(t *testing.T) {
	clk := newClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	url, prefix := redistest.URL(t), redistest.Prefix(t)
	open := func() *RedisStore {
		s, err := NewRedisStore(RedisOptions{URL: url, Prefix: prefix, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	dead := New(Options{Store: open(), Now: clk.Now}) // never settles its calls
	t.Cleanup(func() { _ = dead.Close() })
	s := open()
	live := New(Options{Store: s, Now: clk.Now})
	defer live.Close()
	task := bigTask("lease.dead")
	var leased bool
	for i := 0; i < 40; i++ {
		d := mustReserve(t, dead, Call{Task: task, User: "dan", Estimate: Usage{InputTokens: 10}, Lease: time.Minute})
		leased = leased || d.Hold.lease != nil
	}
	if !leased {
		t.Fatal("no lease taken")
	}
	if u := usageOf(t, live, task, "dan", tS, req, pMin); u.Reserved == 0 {
		t.Fatal("the dead replica's lease holds nothing")
	}
	clk.Add(2 * time.Minute)
	for _, w := range [][3]string{{tS, tok, pDay}, {uS, req, pHour}} {
		if u := usageOf(t, live, task, "dan", w[0], w[1], w[2]); u.Reserved != 0 || u.Used != 0 {
			t.Errorf("%v after the lease ran out: used %d reserved %d", w, u.Used, u.Reserved)
		}
	}
	assertNoLeaseLeft(t, s, task.Key)
}

// TestLeaseThresholdsAndHook: crossings found when a lease is settled reach
// the caller of Settle or, for a lease settled in the background, the
// settle hook; each once.
func TestLeaseThresholdsAndHook(t *testing.T) {
	ls, _ := redisReplicas(t, 1, Options{})
	l := ls[0]
	var mu sync.Mutex
	var crossings []Crossing
	l.SetSettleHook(func(_ *tasks.Task, _ string, res SettleResult, err error) {
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		crossings = append(crossings, res.Crossings...)
		mu.Unlock()
	})
	task := newTask("lease.th", lim(tS, tok, pDay, 1_000_000))
	task.Thresholds = []float64{0.5}
	for i := 0; i < 700; i++ {
		d := mustReserve(t, l, Call{Task: task, Estimate: Usage{InputTokens: 1000}})
		res := mustSettle(t, l, d.Hold, Outcome{Actual: Usage{InputTokens: 1000}})
		mu.Lock()
		crossings = append(crossings, res.Crossings...)
		mu.Unlock()
	}
	time.Sleep(leaseLife + 3*sweepEvery) // the last lease ends and is settled
	mu.Lock()
	defer mu.Unlock()
	if len(crossings) != 1 || crossings[0].Threshold != 0.5 || crossings[0].Used < 500_000 {
		t.Fatalf("crossings %+v, want one of 0.5", crossings)
	}
}

// TestLeasesFailOpen: with the store unreachable mid-lease (fail_open), a
// busy user's calls go on from local counts, and once the store answers
// again every call's usage is in it exactly once.
func TestLeasesFailOpen(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedis(t, srv.URL(), 100*time.Millisecond)
	l := New(Options{Store: s, OnError: config.FailOpen})
	defer l.Close()
	task := bigTask("lease.fo")
	call := Call{Task: task, User: "eve", Estimate: Usage{InputTokens: 10}}
	var calls, tokens int64
	settle := func(h *Hold, tok int64) {
		t.Helper()
		mustSettle(t, l, h, Outcome{Actual: Usage{InputTokens: tok}})
		calls++
		tokens += tok
	}
	var leased []*Hold
	for i := 0; i < 60; i++ {
		d := mustReserve(t, l, call)
		if d.Hold.lease != nil && len(leased) < 3 {
			leased = append(leased, d.Hold) // still in flight when the store goes
			continue
		}
		settle(d.Hold, int64(i%7+1))
	}
	if len(leased) < 3 {
		t.Fatal("no call was served from a lease")
	}
	// Every client of the server waits; the store's 100 ms timeout fails
	// the commands meanwhile.
	if err := redis.NewClient(&redis.Options{Addr: srv.Addr}).Do(bg, "client", "pause", 1500, "all").Err(); err != nil {
		t.Fatal(err)
	}
	// The lease admits calls without the store (blocks come from the
	// mirror) until it runs out, and so may one granted ahead (for at most
	// 1.25 leaseLife from its grant); then the next call needs the store.
	time.Sleep(leaseLife * 3 / 2)
	for i := 0; i < 5; i++ {
		d := mustReserve(t, l, call)
		if d.Hold == nil {
			t.Fatalf("call %d with the store paused was refused", i)
		}
		settle(d.Hold, 3)
	}
	if !l.Degraded() {
		t.Fatal("not degraded while the store is paused")
	}
	for _, h := range leased {
		settle(h, 11)
	}
	waitFor(t, "recovery", func() bool { return !l.Degraded() })
	// Every call counted, and nothing left reserved: the holds whose
	// settlement could not reach the store are released with the counts,
	// not when their lease runs out minutes later.
	waitFor(t, "every call counted", func() bool {
		// The hour and day windows: a run across a minute's end would split
		// the minute windows' counts.
		r := usageOf(t, l, task, "eve", uS, req, pHour)
		tk := usageOf(t, l, task, "eve", tS, tok, pDay)
		return r.Used == calls && tk.Used == tokens && r.Reserved == 0 && tk.Reserved == 0
	})
	assertNoLeaseLeft(t, s, task.Key)
}

// TestLeaseKeepsServingAroundALargerCall: a call whose estimate is far above
// what a busy scope's lease was sized for is reserved on its own, and the
// lease goes on serving the calls it was sized for.
func TestLeaseKeepsServingAroundALargerCall(t *testing.T) {
	ls, _ := redisReplicas(t, 1, Options{})
	l := ls[0]
	task := bigTask("lease.sizes")
	small := Call{Task: task, User: "fay", Estimate: Usage{InputTokens: 10, Money: 5}}
	var cur *lease
	for i := 0; i < 40 && cur == nil; i++ {
		d := mustReserve(t, l, small)
		cur = d.Hold.lease
		mustSettle(t, l, d.Hold, Outcome{Actual: Usage{InputTokens: 10, Money: 5}})
	}
	if cur == nil {
		t.Fatal("no lease taken")
	}
	big := mustReserve(t, l, Call{Task: task, User: "fay", Estimate: Usage{InputTokens: 100_000, Money: 5}})
	if big.Hold == nil || big.Hold.lease != nil {
		t.Fatalf("a call 10,000 times the lease's share: hold %v, leased %v", big.Hold != nil, big.Hold != nil && big.Hold.lease != nil)
	}
	mustSettle(t, l, big.Hold, Outcome{Actual: Usage{InputTokens: 100_000, Money: 5}})
	d := mustReserve(t, l, small)
	if d.Hold.lease != cur {
		t.Error("the lease stopped serving after a larger call")
	}
	mustSettle(t, l, d.Hold, Outcome{Actual: Usage{InputTokens: 10, Money: 5}})
}

// TestInProcessLeaseCountsEveryCallExactly: the in-process store serves a
// busy (task, user) from leases too (they spare each call the store's lock
// and maps), and what the admin sees right after is exact: the usage of
// every call, nothing left reserved, every call's journal entry.
func TestInProcessLeaseCountsEveryCallExactly(t *testing.T) {
	l := New(Options{})
	defer l.Close()
	task := bigTask("lease.inprocess")
	const calls = 400
	var leased int
	var tokens, money int64
	for i := 0; i < calls; i++ {
		d := mustReserve(t, l, Call{Task: task, User: "ann", Estimate: Usage{InputTokens: 20, OutputTokens: 100, Money: 90}})
		if d.Hold.Leased() {
			leased++
		}
		act := Usage{InputTokens: 20, OutputTokens: int64(i % 101), Money: int64(i % 91)}
		tokens += act.Tokens()
		money += act.Money
		mustSettle(t, l, d.Hold, Outcome{Actual: act, Events: []Event{{Kind: "call"}}})
	}
	if leased < calls/2 {
		t.Fatalf("%d of %d calls served from a lease", leased, calls)
	}
	assertBigTaskUsage(t, l, task, "ann", calls, tokens, money)
}

// TestNoteCallHotness: when a scope counts as busy enough for a lease.
func TestNoteCallHotness(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		every   time.Duration // between calls
		calls   int
		skip    int // calls before the check starts
		wantHot bool
	}{
		{"a steady 50 calls a second stays hot at every span's start", time.Second / 50, 500, 20, true},
		{"a steady 20 calls a second is never hot", time.Second / 20, 200, 20, false},
		{"four quick calls are not hot", time.Millisecond, 4, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sc leaseScope
			for i := range tt.calls {
				hot := sc.noteCall(t0.Add(time.Duration(i) * tt.every))
				if i >= tt.skip && hot != tt.wantHot {
					t.Fatalf("call %d: hot %v, want %v", i, hot, tt.wantHot)
				}
			}
		})
	}
	// Eight quick calls make a scope hot; after a pause it is not.
	var sc leaseScope
	hot := false
	for i := range 8 {
		hot = sc.noteCall(t0.Add(time.Duration(i) * time.Millisecond))
	}
	if !hot {
		t.Error("eight calls within 8 ms: not hot")
	}
	if sc.noteCall(t0.Add(time.Second)) {
		t.Error("the first call after a second's pause: hot")
	}
}

// TestSteadyCallerNeverWaitsForAGrant: a caller of about 60 calls a second
// on a Redis store is served from leases granted ahead, in the background:
// after the first lease no call waits for a grant's round trip, and every
// call is still counted exactly.
func TestSteadyCallerNeverWaitsForAGrant(t *testing.T) {
	if sec := time.Now().Second(); sec >= 55 {
		time.Sleep(time.Duration(61-sec) * time.Second) // a lease never crosses a minute's end
	}
	ls, ss := redisReplicas(t, 2, Options{})
	l, s := ls[0], ss[0]
	task := bigTask("lease.ahead")
	ctx := context.Background()
	calls := int64(0)
	call := func() {
		d, err := l.Reserve(ctx, Call{Task: task, User: "steady", Estimate: Usage{InputTokens: 50, OutputTokens: 20, Money: 7}})
		if err != nil || d.Hold == nil {
			t.Fatalf("reserve: %v %+v", err, d)
		}
		if _, err := l.Settle(ctx, d.Hold, Outcome{Actual: Usage{InputTokens: 40, OutputTokens: 5, Money: 3}, Events: []Event{{Kind: "call"}}}); err != nil {
			t.Fatal(err)
		}
		calls++
	}
	for range 40 { // until a lease serves the calls
		call()
		time.Sleep(16 * time.Millisecond)
	}
	waits0, trips0, n0 := l.grantWaits.Load(), s.RoundTrips(), calls
	for start := time.Now(); time.Since(start) < 1500*time.Millisecond; {
		call()
		time.Sleep(16 * time.Millisecond)
	}
	if waits := l.grantWaits.Load() - waits0; waits > 0 {
		t.Errorf("%d of %d calls waited for a lease's grant, want none", waits, calls-n0)
	}
	if trips := s.RoundTrips() - trips0; trips == 0 {
		t.Error("no round trip in 1.5 s: no lease was granted ahead")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	assertBigTaskUsage(t, ls[1], task, "steady", calls, 45*calls, 3*calls)
}

// TestAheadLeaseAdmitsForAFullLife: a lease granted ahead admits calls for
// leaseLife from when the lease before it ends, not from its grant (which
// made a steady caller's leases a quarter shorter, and their grants and
// settlements a third more). The calls' clock is the test's: one call
// every 16 ms of it, as fast as they run.
func TestAheadLeaseAdmitsForAFullLife(t *testing.T) {
	if sec := time.Now().Second(); sec >= 50 {
		time.Sleep(time.Duration(61-sec) * time.Second) // a lease never crosses a minute's end
	}
	ls, ss := redisReplicas(t, 1, Options{})
	l := ls[0]
	waitMirror(t, ss[0], true)
	task := bigTask("lease.life")
	const step = 16 * time.Millisecond
	now := time.Now()
	var order []*lease
	admitted := map[*lease]int{}
	for i := 0; i < 220; i++ { // 3.5 s of the test's clock
		d := mustReserve(t, l, Call{Task: task, User: "steady", Now: now, Estimate: Usage{InputTokens: 50, OutputTokens: 20, Money: 7}})
		if ls := d.Hold.lease; ls != nil {
			if admitted[ls] == 0 {
				order = append(order, ls)
			}
			admitted[ls]++
		}
		mustSettle(t, l, d.Hold, Outcome{Actual: Usage{InputTokens: 40, OutputTokens: 5, Money: 3}})
		now = now.Add(step)
	}
	if len(order) < 6 {
		t.Fatalf("%d leases served the calls, want at least 6", len(order))
	}
	want := int(leaseLife / step) // 15 (15.6 calls in a lease's life)
	for i, ls := range order[1 : len(order)-1] {
		if n := admitted[ls]; n < want {
			t.Errorf("lease %d of %d admitted %d calls, want %d or more (%v of calls every %v)", i+2, len(order), n, want, leaseLife, step)
		}
	}
}

// TestLeaseKeepsNoViewOfItsCaller checks that a lease keeps nothing of the
// call that granted it. The proxy's request ids view the call's own memory,
// which holds the call's hold and so the lease that admitted it: a lease
// granted ahead, whose hold kept that view, chained itself to the lease
// before it, and so on back, with every call event they had held (the
// gateway's heap grew by each call's journal entry). Here the leases a
// steady caller has moved on from must be collected.
func TestLeaseKeepsNoViewOfItsCaller(t *testing.T) {
	ls, _ := redisReplicas(t, 1, Options{})
	l := ls[0]
	task := bigTask("lease.noview")
	type callMem struct {
		id   [24]byte
		hold Hold
	}
	const calls = 4000
	var freed atomic.Int64
	seen := map[uintptr]bool{} // the leases met, by address (a pointer would keep them)
	for i := range calls {
		m := new(callMem)
		n := copy(m.id[:], fmt.Sprintf("req-%d", i))
		d := mustReserve(t, l, Call{Task: task, User: "ann", RequestID: unsafe.String(&m.id[0], n), HoldSpace: &m.hold,
			Estimate: Usage{InputTokens: 20, OutputTokens: 100, Money: 90}})
		if ls := d.Hold.lease; ls != nil && !seen[uintptr(unsafe.Pointer(ls))] {
			seen[uintptr(unsafe.Pointer(ls))] = true
			runtime.AddCleanup(ls, func(*atomic.Int64) { freed.Add(1) }, &freed)
		}
		mustSettle(t, l, d.Hold, Outcome{Actual: Usage{InputTokens: 20, OutputTokens: 50, Money: 40}, Events: []Event{{Kind: "call"}}})
	}
	if len(seen) < 4 {
		t.Fatalf("%d leases served %d calls; the test needs more", len(seen), calls)
	}
	// A call still in flight keeps the lease that admitted it, as the
	// gateway's traffic always does; through it, the chain, if any.
	last := new(callMem)
	n := copy(last.id[:], "req-last")
	d := mustReserve(t, l, Call{Task: task, User: "ann", RequestID: unsafe.String(&last.id[0], n), HoldSpace: &last.hold,
		Estimate: Usage{InputTokens: 20, OutputTokens: 100, Money: 90}})
	defer mustSettle(t, l, d.Hold, Outcome{})
	// That lease, the one before (its settlement may still be running) and
	// one granted ahead may stay; the others must go.
	want := int64(len(seen) - 3)
	deadline := time.Now().Add(5 * time.Second)
	for freed.Load() < want && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	if got := freed.Load(); got < want {
		t.Errorf("%d of %d leases collected; want at least %d", got, len(seen), want)
	}
}
