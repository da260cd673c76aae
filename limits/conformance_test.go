package limits

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"taskgate/config"
)

// conformanceCase runs against every store kind; open returns stores that
// share one state (for tests with several Limiters).
type conformanceCase struct {
	name string
	run  func(t *testing.T, open func() Store)
}

// TestConformance runs the same cases on the memory store and on Redis.
func TestConformance(t *testing.T) {
	for _, k := range storeKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			for _, c := range conformanceCases {
				t.Run(c.name, func(t *testing.T) { c.run(t, k.open(t)) })
			}
		})
	}
}

const (
	tS, uS       = config.ScopeTask, config.ScopeUser
	req, tok, mo = config.UnitRequests, config.UnitTokens, config.UnitMoney
	pMin, pHour  = config.PeriodMinute, config.PeriodHour
	pDay, pMonth = config.PeriodDay, config.PeriodMonth
)

var conformanceCases = []conformanceCase{
	{"day boundary in a non-UTC zone", testDayBoundary},
	{"month boundaries", testMonthBoundaries},
	{"minute and hour boundaries", testMinuteHourBoundaries},
	{"every scope unit and period", testEveryWindow},
	{"limit zero refuses everything", testLimitZero},
	{"overrides", testOverrides},
	{"user windows need a user", testUserWindows},
	{"refund on failure", testRefund},
	{"settle above and below the estimate", testSettleActual},
	{"lease expiry releases a hold", testLeaseExpiry},
	{"nothing reserved after settle", testNothingReserved},
	{"blocks", testBlocks},
	{"sliding hour", testSlidingHour},
	{"trios and ratios", testTrios},
	{"thresholds claimed once", testThresholdsOnce},
	{"flags auto-block", testAutoBlock},
	{"events capped newest first", testEvents},
	{"a settlement's events, encoded or not", testSettleEvents},
	{"exactly N of M requests", testExactRequests},
	{"money never passed", testMoneyNeverPassed},
}

func testDayBoundary(t *testing.T, open func() Store) {
	for _, zone := range []string{"America/New_York", "Asia/Kolkata"} {
		loc := mustLoad(t, zone)
		clk := newClock(time.Date(2026, 11, 30, 23, 59, 59, 900e6, loc))
		l := New(Options{Store: open(), Location: loc, Now: clk.Now})
		task := newTask("day."+zone, lim(tS, req, pDay, 1))
		d := mustReserve(t, l, Call{Task: task})
		if d.Hold == nil {
			t.Fatalf("%s: first call of the day refused: %+v", zone, d.Refusal)
		}
		d2 := mustReserve(t, l, Call{Task: task, Now: clk.Now().Add(50 * time.Millisecond)})
		if d2.Refusal == nil {
			t.Fatalf("%s: second call in the same day allowed", zone)
		}
		if want := time.Date(2026, 12, 1, 0, 0, 0, 0, loc); !d2.Refusal.Window.End.Equal(want) {
			t.Errorf("%s: window end %v, want %v", zone, d2.Refusal.Window.End, want)
		}
		d3 := mustReserve(t, l, Call{Task: task, Now: time.Date(2026, 12, 1, 0, 0, 0, 0, loc)})
		if d3.Hold == nil {
			t.Fatalf("%s: call at midnight counted in the previous day: %+v", zone, d3.Refusal)
		}
	}
}

func testMonthBoundaries(t *testing.T, open func() Store) {
	loc := mustLoad(t, "Europe/Berlin")
	l := New(Options{Store: open(), Location: loc})
	for _, c := range []struct {
		y    int
		m    time.Month
		days int
	}{{2027, time.February, 28}, {2028, time.February, 29}, {2026, time.April, 30}, {2026, time.January, 31}, {2026, time.December, 31}} {
		task := newTask(fmt.Sprintf("month.%d.%d", c.y, c.m), lim(tS, req, pMonth, 1))
		last := time.Date(c.y, c.m, c.days, 23, 59, 59, 999e6, loc)
		if d := mustReserve(t, l, Call{Task: task, Now: last}); d.Hold == nil {
			t.Fatalf("%d-%02d: last instant refused", c.y, c.m)
		}
		d := mustReserve(t, l, Call{Task: task, Now: time.Date(c.y, c.m, 1, 0, 0, 0, 0, loc)})
		if d.Refusal == nil {
			t.Fatalf("%d-%02d: first instant of the same month allowed", c.y, c.m)
		}
		if want := time.Date(c.y, c.m, c.days, 0, 0, 0, 0, loc).AddDate(0, 0, 1); !d.Refusal.Window.End.Equal(want) {
			t.Errorf("%d-%02d: end %v, want %v", c.y, c.m, d.Refusal.Window.End, want)
		}
		next := time.Date(c.y, c.m, c.days+1, 0, 0, 0, 0, loc)
		if d := mustReserve(t, l, Call{Task: task, Now: next}); d.Hold == nil {
			t.Fatalf("%d-%02d: first instant of the next month refused", c.y, c.m)
		}
	}
}

func testMinuteHourBoundaries(t *testing.T, open func() Store) {
	loc := mustLoad(t, "Asia/Kolkata") // +05:30: local hours begin at :30 UTC
	l := New(Options{Store: open(), Location: loc})
	for _, c := range []struct {
		period       string
		before, next time.Time
	}{
		{pMin, time.Date(2026, 5, 4, 10, 0, 59, 999e6, loc), time.Date(2026, 5, 4, 10, 1, 0, 0, loc)},
		{pHour, time.Date(2026, 5, 4, 10, 59, 59, 999e6, loc), time.Date(2026, 5, 4, 11, 0, 0, 0, loc)},
	} {
		task := newTask("b."+c.period, lim(tS, req, c.period, 1))
		if d := mustReserve(t, l, Call{Task: task, Now: c.before}); d.Hold == nil {
			t.Fatalf("%s: first refused", c.period)
		}
		d := mustReserve(t, l, Call{Task: task, Now: c.before})
		if d.Refusal == nil {
			t.Fatalf("%s: second in the same window allowed", c.period)
		}
		if !d.Refusal.Window.End.Equal(c.next) {
			t.Errorf("%s: end %v, want %v", c.period, d.Refusal.Window.End, c.next)
		}
		if d := mustReserve(t, l, Call{Task: task, Now: c.next}); d.Hold == nil {
			t.Fatalf("%s: call at the boundary counted in the previous window", c.period)
		}
	}
}

func testEveryWindow(t *testing.T, open func() Store) {
	clk := newClock(time.Date(2026, 3, 10, 12, 30, 0, 0, time.UTC))
	l := New(Options{Store: open(), Now: clk.Now})
	for _, scope := range config.ScopeNames {
		for _, unit := range config.UnitNames {
			for _, period := range config.PeriodNames {
				name := scope + "." + unit + "." + period
				t.Run(name, func(t *testing.T) {
					task := newTask("every."+name, lim(scope, unit, period, 100))
					est := Usage{InputTokens: 40, OutputTokens: 20, Money: 60}
					if unit == req {
						task.Limits[0].Value = 2
					}
					call := Call{Task: task, User: "alice", Estimate: est}
					d1 := mustReserve(t, l, call)
					if d1.Hold == nil {
						t.Fatalf("first refused: %+v", d1.Refusal)
					}
					if unit == req {
						if d := mustReserve(t, l, call); d.Hold == nil {
							t.Fatalf("second refused: %+v", d.Refusal)
						}
					}
					d := mustReserve(t, l, call)
					if d.Refusal == nil {
						t.Fatal("call past the limit allowed")
					}
					r := d.Refusal
					wantUsed := int64(60)
					if unit == req {
						wantUsed = 2
					}
					if r.Window.Scope != scope || r.Window.Unit != unit || r.Window.Period != period ||
						r.Limit != task.Limits[0].Value || r.Used != wantUsed || r.Source != "config" {
						t.Errorf("refusal %+v, want %s %s %s used %d", r, scope, unit, period, wantUsed)
					}
					// The refused call counted nothing.
					u := usageOf(t, l, task, "alice", scope, unit, period)
					if u.Used+u.Reserved != wantUsed {
						t.Errorf("usage %+v after refusal, want %d", u, wantUsed)
					}
				})
			}
		}
	}
}

func testLimitZero(t *testing.T, open func() Store) {
	l := New(Options{Store: open()})
	task := newTask("zero", lim(tS, tok, pDay, 0))
	d := mustReserve(t, l, Call{Task: task})
	if d.Refusal == nil || d.Refusal.Limit != 0 {
		t.Fatalf("limit 0 with a zero estimate allowed: %+v", d)
	}
}

func testOverrides(t *testing.T, open func() Store) {
	l := New(Options{Store: open()})
	l2 := New(Options{Store: open()}) // another replica
	task := newTask("ov", lim(tS, req, pDay, 5), lim(uS, req, pHour, 3))
	if err := l.SetOverrides(bg, task, config.Limits{Task: config.ScopeLimits{Requests: config.Periods{Day: i64(1)}}}); err != nil {
		t.Fatal(err)
	}
	if d := mustReserve(t, l2, Call{Task: task}); d.Hold == nil {
		t.Fatal("first call refused")
	}
	d := mustReserve(t, l2, Call{Task: task})
	if d.Refusal == nil || d.Refusal.Source != "override" || d.Refusal.Limit != 1 {
		t.Fatalf("override not seen by another replica: %+v", d.Refusal)
	}
	// A partial set keeps the other override and the other config limits.
	if err := l.SetOverrides(bg, task, config.Limits{Task: config.ScopeLimits{Tokens: config.Periods{Month: i64(1000)}}}); err != nil {
		t.Fatal(err)
	}
	eff, err := l.EffectiveLimits(bg, task)
	if err != nil {
		t.Fatal(err)
	}
	want := []EffectiveLimit{
		{lim(tS, req, pDay, 1), "override"},
		{lim(tS, tok, pMonth, 1000), "override"},
		{lim(uS, req, pHour, 3), "config"},
	}
	if fmt.Sprint(eff) != fmt.Sprint(want) {
		t.Errorf("effective limits\n got %v\nwant %v", eff, want)
	}
	us, _ := l.Usage(bg, task, "")
	if len(us) != 2 || us[1].Unit != tok || us[1].Limit != 1000 {
		t.Errorf("usage does not list the override-only window: %+v", us)
	}
	if err := l.ClearOverrides(bg, task.Key); err != nil {
		t.Fatal(err)
	}
	if d := mustReserve(t, l2, Call{Task: task}); d.Hold == nil {
		t.Fatalf("config limit 5 not back after clear: %+v", d.Refusal)
	}
	// user_limits: false refuses user overrides and ignores stored ones.
	off := newTask("ov.off", lim(tS, req, pDay, 5))
	off.UserLimits = false
	err = l.SetOverrides(bg, off, config.Limits{User: config.ScopeLimits{Requests: config.Periods{Day: i64(1)}}})
	if !errors.Is(err, ErrUserLimitsOff) {
		t.Fatalf("user override on user_limits:false: %v", err)
	}
	on := newTask("ov.off", lim(tS, req, pDay, 5))
	if err := l.SetOverrides(bg, on, config.Limits{User: config.ScopeLimits{Requests: config.Periods{Day: i64(0)}}}); err != nil {
		t.Fatal(err)
	}
	if d := mustReserve(t, l, Call{Task: off, User: "bob"}); d.Hold == nil {
		t.Fatalf("stale user override applied to a user_limits:false task: %+v", d.Refusal)
	}
	if d := mustReserve(t, l, Call{Task: on, User: "bob"}); d.Refusal == nil {
		t.Fatal("user override 0 not applied")
	}
}

func testUserWindows(t *testing.T, open func() Store) {
	l := New(Options{Store: open()})
	task := newTask("uw", lim(uS, req, pDay, 1))
	for i := 0; i < 3; i++ {
		if d := mustReserve(t, l, Call{Task: task}); d.Hold == nil || d.Requests != nil {
			t.Fatalf("call without a user met a user window: %+v", d)
		}
	}
	if d := mustReserve(t, l, Call{Task: task, User: "a"}); d.Hold == nil {
		t.Fatal("user a refused")
	}
	if d := mustReserve(t, l, Call{Task: task, User: "b"}); d.Hold == nil {
		t.Fatal("user b refused: users share a window")
	}
	if d := mustReserve(t, l, Call{Task: task, User: "a"}); d.Refusal == nil || d.Refusal.Window.Scope != uS {
		t.Fatalf("user a's second call: %+v", d.Refusal)
	}
}

func testRefund(t *testing.T, open func() Store) {
	l := New(Options{Store: open()})
	task := newTask("refund", lim(tS, tok, pDay, 100), lim(tS, mo, pDay, 1000), lim(tS, req, pDay, 10))
	d := mustReserve(t, l, Call{Task: task, Estimate: Usage{InputTokens: 50, OutputTokens: 30, Money: 800}})
	mustSettle(t, l, d.Hold, Outcome{Failed: true})
	for _, c := range []struct {
		unit string
		used int64
	}{{tok, 0}, {mo, 0}, {req, 1}} {
		u := usageOf(t, l, task, "", tS, c.unit, pDay)
		if u.Used != c.used || u.Reserved != 0 {
			t.Errorf("%s after a failed call: %+v, want used %d reserved 0", c.unit, u, c.used)
		}
	}
}

func testSettleActual(t *testing.T, open func() Store) {
	l := New(Options{Store: open()})
	task := newTask("actual", lim(tS, tok, pDay, 1000), lim(uS, mo, pMonth, 1000))
	for _, c := range []struct{ est, act, wantTok, wantMoney int64 }{
		{50, 70, 70, 7}, // above the estimate
		{50, 20, 90, 9}, // below
	} {
		d := mustReserve(t, l, Call{Task: task, User: "u", Estimate: Usage{InputTokens: c.est, Money: c.est}})
		mustSettle(t, l, d.Hold, Outcome{Actual: Usage{InputTokens: c.act - 5, OutputTokens: 5, Money: c.act / 10}})
		if u := usageOf(t, l, task, "u", tS, tok, pDay); u.Used != c.wantTok || u.Reserved != 0 {
			t.Errorf("tokens %+v, want used %d", u, c.wantTok)
		}
		if u := usageOf(t, l, task, "u", uS, mo, pMonth); u.Used != c.wantMoney || u.Reserved != 0 {
			t.Errorf("money %+v, want used %d", u, c.wantMoney)
		}
	}
}

func testLeaseExpiry(t *testing.T, open func() Store) {
	clk := newClock(time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC))
	l := New(Options{Store: open(), Now: clk.Now})
	task := newTask("lease", lim(tS, tok, pDay, 100), lim(tS, req, pDay, 100))
	d1 := mustReserve(t, l, Call{Task: task, Estimate: Usage{InputTokens: 80}, Lease: time.Second})
	if d := mustReserve(t, l, Call{Task: task, Estimate: Usage{InputTokens: 30}}); d.Refusal == nil {
		t.Fatal("hold not counted")
	}
	clk.Add(2 * time.Second)
	d2 := mustReserve(t, l, Call{Task: task, Estimate: Usage{InputTokens: 30}})
	if d2.Hold == nil {
		t.Fatalf("expired hold not released: %+v", d2.Refusal)
	}
	// Settling the expired hold adds its usage without subtracting again.
	mustSettle(t, l, d1.Hold, Outcome{Actual: Usage{InputTokens: 10}})
	u := usageOf(t, l, task, "", tS, tok, pDay)
	if u.Used != 10 || u.Reserved != 30 {
		t.Errorf("after settling the expired hold: %+v, want used 10 reserved 30", u)
	}
	r := usageOf(t, l, task, "", tS, req, pDay)
	if r.Used != 1 || r.Reserved != 1 {
		t.Errorf("requests %+v, want used 1 reserved 1", r)
	}
	// Usage also releases expired holds.
	clk.Add(DefaultLease + time.Second)
	if u := usageOf(t, l, task, "", tS, tok, pDay); u.Reserved != 0 {
		t.Errorf("Usage did not release the expired hold: %+v", u)
	}
}

func testNothingReserved(t *testing.T, open func() Store) {
	l := New(Options{Store: open()})
	var ls []config.Limit
	for _, s := range config.ScopeNames {
		for _, u := range config.UnitNames {
			for _, p := range config.PeriodNames {
				ls = append(ls, lim(s, u, p, 1_000_000))
			}
		}
	}
	task := newTask("clean", ls...)
	for i := 0; i < 5; i++ {
		d := mustReserve(t, l, Call{Task: task, User: "u", Estimate: Usage{InputTokens: 100, OutputTokens: 50, Money: 33}})
		mustSettle(t, l, d.Hold, Outcome{Actual: Usage{InputTokens: 90, OutputTokens: int64(i), Money: 31}, Failed: i == 2})
	}
	us, err := l.Usage(bg, task, "u")
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 24 {
		t.Fatalf("%d windows, want 24", len(us))
	}
	for _, u := range us {
		if u.Reserved != 0 {
			t.Errorf("%s %s %s still reserved: %+v", u.Scope, u.Unit, u.Period, u)
		}
		want := map[string]int64{req: 5, tok: 90*5 + 0 + 1 + 2 + 3 + 4, mo: 31 * 5}[u.Unit]
		if u.Used != want {
			t.Errorf("%s %s %s used %d, want %d", u.Scope, u.Unit, u.Period, u.Used, want)
		}
	}
}

func testBlocks(t *testing.T, open func() Store) {
	clk := newClock(time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC))
	l := New(Options{Store: open(), Now: clk.Now})
	a := newTask("blk.a")
	a.BlockGroup = "warehouse"
	b := newTask("blk.b")
	exp := clk.Now().Add(time.Minute)
	if err := l.PutBlock(bg, Block{User: "mallory", Group: "warehouse", Reason: "abuse", Expires: &exp}); err != nil {
		t.Fatal(err)
	}
	d := mustReserve(t, l, Call{Task: a, User: "mallory"})
	if d.Blocked == nil || d.Blocked.Reason != "abuse" || d.Hold != nil {
		t.Fatalf("block in the task's group not enforced: %+v", d)
	}
	if d := mustReserve(t, l, Call{Task: b, User: "mallory"}); d.Blocked != nil {
		t.Fatal("block leaked into another group")
	}
	if d := mustReserve(t, l, Call{Task: a, User: "alice"}); d.Blocked != nil {
		t.Fatal("block applied to another user")
	}
	if err := l.PutBlock(bg, Block{User: "eve", Group: "*", Reason: "everywhere"}); err != nil {
		t.Fatal(err)
	}
	for _, task := range []string{"blk.a", "blk.b"} {
		tk := map[string]*Call{"blk.a": {Task: a}, "blk.b": {Task: b}}[task]
		tk.User = "eve"
		if d := mustReserve(t, l, *tk); d.Blocked == nil || d.Blocked.Group != "*" {
			t.Fatalf("* block not enforced in %s", task)
		}
	}
	bs, err := l.Blocks(bg)
	if err != nil || len(bs) != 2 || bs[0].Group != "*" || bs[1].User != "mallory" || bs[1].Expires == nil {
		t.Fatalf("Blocks = %+v, %v", bs, err)
	}
	clk.Add(2 * time.Minute)
	if d := mustReserve(t, l, Call{Task: a, User: "mallory"}); d.Blocked != nil {
		t.Fatal("expired block still enforced")
	}
	if bs, _ := l.Blocks(bg); len(bs) != 1 {
		t.Fatalf("expired block listed: %+v", bs)
	}
	ok, err := l.DeleteBlock(bg, "eve", "*")
	if err != nil || !ok {
		t.Fatalf("DeleteBlock = %v, %v", ok, err)
	}
	if ok, _ := l.DeleteBlock(bg, "eve", "*"); ok {
		t.Fatal("second DeleteBlock found a block")
	}
	if d := mustReserve(t, l, Call{Task: b, User: "eve"}); d.Blocked != nil {
		t.Fatal("deleted block still enforced")
	}
	if err := l.PutBlock(bg, Block{User: "x"}); err == nil {
		t.Fatal("block without a group accepted")
	}
}

func testSlidingHour(t *testing.T, open func() Store) {
	t0 := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	l := New(Options{Store: open()})
	task := newTask("cph")
	task.MaxCallsPerHour = 3
	for _, c := range []struct {
		at   time.Duration
		user string
		want int64
	}{
		{0, "u", 1}, {10 * time.Minute, "u", 2}, {59 * time.Minute, "u", 3},
		{59 * time.Minute, "v", 1},
		{60 * time.Minute, "u", 3}, // the call at t0 has left the window
		{70*time.Minute + 1, "u", 3},
		{3 * time.Hour, "u", 1},
		{3 * time.Hour, "", 0},
	} {
		d := mustReserve(t, l, Call{Task: task, User: c.user, Now: t0.Add(c.at)})
		if d.CallsLastHour != c.want {
			t.Errorf("at %v user %q: %d calls, want %d", c.at, c.user, d.CallsLastHour, c.want)
		}
	}
}

func testTrios(t *testing.T, open func() Store) {
	now := time.Date(2026, 7, 1, 9, 0, 30, 0, time.UTC)
	l := New(Options{Store: open(), Now: func() time.Time { return now }})
	task := newTask("trio", lim(tS, req, pHour, 3), lim(tS, req, pDay, 10), lim(uS, req, pMin, 3),
		lim(tS, tok, pDay, 1000), lim(uS, tok, pHour, 500))
	d := mustReserve(t, l, Call{Task: task, User: "u", Estimate: Usage{InputTokens: 100}})
	// requests: task hour 2 left, user minute 2 left: a tie, the task window wins.
	if d.Requests == nil || *d.Requests != (Trio{Limit: 3, Remaining: 2, Reset: 59*time.Minute + 30*time.Second}) {
		t.Errorf("requests trio %+v", d.Requests)
	}
	if d.Tokens == nil || *d.Tokens != (Trio{Limit: 500, Remaining: 400, Reset: 59*time.Minute + 30*time.Second}) {
		t.Errorf("tokens trio %+v", d.Tokens)
	}
	wantR := []Ratio{{req, pHour, 1.0 / 3}, {req, pDay, 0.1}, {tok, pDay, 0.1}}
	if fmt.Sprint(d.TaskRatios) != fmt.Sprint(wantR) {
		t.Errorf("ratios %v, want %v", d.TaskRatios, wantR)
	}
	mustReserve(t, l, Call{Task: task, User: "v"})
	mustReserve(t, l, Call{Task: task, User: "w"})
	r := mustReserve(t, l, Call{Task: task, User: "u"})
	if r.Refusal == nil || r.Refusal.Window.Period != pHour {
		t.Fatalf("fourth call: %+v", r.Refusal)
	}
	// Counted without the refused call.
	if r.Requests == nil || r.Requests.Remaining != 0 || r.Requests.Limit != 3 {
		t.Errorf("requests trio on refusal %+v", r.Requests)
	}
	if r.Tokens == nil || r.Tokens.Remaining != 400 {
		t.Errorf("tokens trio on refusal %+v", r.Tokens)
	}
	if r.Hold != nil {
		t.Error("refusal carries a hold")
	}
	if d := mustReserve(t, l, Call{Task: newTask("trio.none")}); d.Requests != nil || d.Tokens != nil || d.Hold == nil {
		t.Errorf("task without limits: %+v", d)
	}
}

func testThresholdsOnce(t *testing.T, open func() Store) {
	l1 := New(Options{Store: open()})
	l2 := New(Options{Store: open()})
	task := newTask("th", lim(tS, tok, pDay, 100), lim(uS, tok, pDay, 1000))
	task.Thresholds = []float64{0.5, 1.0}
	d := mustReserve(t, l1, Call{Task: task, User: "u", Estimate: Usage{InputTokens: 40}})
	if r := mustSettle(t, l1, d.Hold, Outcome{Actual: Usage{InputTokens: 40}}); len(r.Crossings) != 0 {
		t.Fatalf("crossing below 0.5: %+v", r.Crossings)
	}
	d = mustReserve(t, l2, Call{Task: task, User: "u", Estimate: Usage{InputTokens: 20}})
	r := mustSettle(t, l2, d.Hold, Outcome{Actual: Usage{InputTokens: 20}})
	if len(r.Crossings) != 1 || r.Crossings[0].Threshold != 0.5 || r.Crossings[0].Used != 60 ||
		r.Crossings[0].Scope != tS || r.Crossings[0].User != "" || r.Crossings[0].Limit != 100 {
		t.Fatalf("crossings %+v, want 0.5 of the task window at 60", r.Crossings)
	}
	// 40 more tokens in 10s, settled concurrently on two replicas: 1.0 is
	// crossed, and told, exactly once.
	var holds []*Hold
	for i := 0; i < 4; i++ {
		d := mustReserve(t, []*Limiter{l1, l2}[i%2], Call{Task: task, User: "u", Estimate: Usage{InputTokens: 10}})
		holds = append(holds, d.Hold)
	}
	var wg sync.WaitGroup
	var n atomic.Int64
	for i, h := range holds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := []*Limiter{l1, l2}[i%2].Settle(bg, h, Outcome{Actual: Usage{InputTokens: 10}})
			if err != nil {
				t.Error(err)
			}
			for _, c := range r.Crossings {
				if c.Threshold == 1.0 && c.Scope == tS {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n.Load() != 1 {
		t.Fatalf("1.0 crossed %d times, want 1", n.Load())
	}
	// One settlement can cross several thresholds at once.
	jump := newTask("th.jump", lim(tS, tok, pDay, 100))
	jump.Thresholds = []float64{0.5, 0.8, 1.0}
	d = mustReserve(t, l1, Call{Task: jump, Estimate: Usage{InputTokens: 10}})
	r = mustSettle(t, l1, d.Hold, Outcome{Actual: Usage{InputTokens: 85}})
	if len(r.Crossings) != 2 || r.Crossings[0].Threshold != 0.5 || r.Crossings[1].Threshold != 0.8 || r.Crossings[1].Used != 85 {
		t.Fatalf("jump to 85: crossings %+v, want 0.5 and 0.8", r.Crossings)
	}
	// Past the limit (actual above the estimate) nothing is crossed again.
	d = mustReserve(t, l1, Call{Task: task, User: "u"})
	if d.Refusal == nil {
		if r := mustSettle(t, l1, d.Hold, Outcome{Actual: Usage{InputTokens: 50}}); len(r.Crossings) != 0 {
			t.Fatalf("crossed again: %+v", r.Crossings)
		}
	}
}

func testAutoBlock(t *testing.T, open func() Store) {
	l := New(Options{Store: open()})
	task := newTask("flag")
	task.AutoBlockThreshold = 2
	task.BlockGroup = "grp"
	for i := int64(1); i <= 2; i++ {
		d := mustReserve(t, l, Call{Task: task, User: "u", RequestID: fmt.Sprint("r", i)})
		r := mustSettle(t, l, d.Hold, Outcome{Flagged: true, Events: []Event{{Kind: "flag", User: "u"}}})
		if r.FlagsToday != i {
			t.Fatalf("flag %d: FlagsToday %d", i, r.FlagsToday)
		}
		if (r.AutoBlocked != nil) != (i == 2) {
			t.Fatalf("flag %d: AutoBlocked %+v", i, r.AutoBlocked)
		}
		if i == 2 && (r.AutoBlocked.Group != "grp" || r.AutoBlocked.User != "u" || r.AutoBlocked.Reason == "") {
			t.Fatalf("auto-block %+v", r.AutoBlocked)
		}
	}
	if d := mustReserve(t, l, Call{Task: task, User: "u"}); d.Blocked == nil {
		t.Fatal("auto-blocked user not blocked")
	}
	evs, err := l.Events(bg, EventFilter{Tasks: []string{task.Key}})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || evs[0].Kind != "block" || evs[1].Kind != "flag" || evs[1].RequestID != "r2" || evs[2].RequestID != "r1" || evs[1].Task != task.Key {
		t.Fatalf("events %+v", evs)
	}
}

// testSettleEvents: a settlement's events reach their logs, an Encoded one
// byte for byte, the others encoded, and an event of another task the
// other task's log.
func testSettleEvents(t *testing.T, open func() Store) {
	st := open()
	l := New(Options{Store: st})
	task := newTask("settle.ev", lim(tS, req, pDay, 10))
	at := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	call := []byte(`{"time":"2026-07-01T09:00:01Z","kind":"call","request_id":"r1","task":"settle.ev","user":"u","source":"s","detail":{"key":"k"}}`)
	d := mustReserve(t, l, Call{Task: task, User: "u", RequestID: "r1"})
	mustSettle(t, l, d.Hold, Outcome{Events: []Event{
		{Time: at, Kind: "anomaly", User: "u", Detail: map[string]any{"source": "x"}},
		{Kind: "call", User: "u", Encoded: call},
		{Time: at, Kind: "anomaly", User: "u", Detail: map[string]any{"n": 2}},
		{Time: at, Kind: "flag", Task: "settle.other", User: "u"},
	}})
	calls, err := st.events(bg, task.Key, logCalls)
	if err != nil || len(calls) != 1 || !bytes.Equal(calls[0], call) {
		t.Fatalf("call log %q, %v; want the encoded event", calls, err)
	}
	signals, err := l.Events(bg, EventFilter{Tasks: []string{task.Key}, Kind: "anomaly"})
	if err != nil || len(signals) != 2 || signals[0].RequestID != "r1" || signals[0].Task != task.Key {
		t.Fatalf("anomalies %+v, %v", signals, err)
	}
	details := fmt.Sprint(signals[0].Detail, signals[1].Detail)
	if !strings.Contains(details, "source:x") || !strings.Contains(details, "n:2") {
		t.Errorf("anomalies' details %s", details)
	}
	other, err := l.Events(bg, EventFilter{Tasks: []string{"settle.other"}})
	if err != nil || len(other) != 1 || other[0].Kind != "flag" || other[0].RequestID != "r1" {
		t.Errorf("other task's events %+v, %v", other, err)
	}
}

func testEvents(t *testing.T, open func() Store) {
	l := New(Options{Store: open()})
	t0 := time.Date(2026, 7, 1, 9, 0, 0, 0, time.UTC)
	var evs []Event
	for i := 0; i < eventCap+5; i++ {
		kind := "call"
		if i%10 == 0 {
			kind = "anomaly"
		}
		evs = append(evs, Event{Time: t0.Add(time.Duration(i) * time.Second), Kind: kind, Task: "ev.a", Detail: map[string]any{"i": i}})
	}
	if err := l.AddEvents(bg, evs...); err != nil {
		t.Fatal(err)
	}
	if err := l.AddEvents(bg, Event{Time: t0.Add(500*time.Second + time.Millisecond), Kind: "flag", Task: "ev.b"},
		Event{Time: t0.Add(2 * time.Hour), Kind: "block", User: "x"}); err != nil {
		t.Fatal(err)
	}
	got, err := l.Events(bg, EventFilter{Tasks: []string{"ev.a"}})
	if err != nil {
		t.Fatal(err)
	}
	// Calls and other kinds have logs of their own, each under the cap.
	if len(got) != eventCap+5 || got[0].Detail["i"] != float64(eventCap+4) || got[len(got)-1].Detail["i"] != float64(0) {
		t.Fatalf("%d events, first %v last %v", len(got), got[0].Detail, got[len(got)-1].Detail)
	}
	for _, c := range []struct {
		f     EventFilter
		n     int
		first string
	}{
		{EventFilter{Tasks: []string{"ev.a", "ev.b"}, Since: t0.Add(1000 * time.Second)}, 5, "call"},
		{EventFilter{Tasks: []string{"ev.a", "ev.b"}, Kind: "anomaly", Since: t0.Add(900 * time.Second)}, 11, "anomaly"},
		{EventFilter{Tasks: []string{"ev.a", "ev.b"}, Since: t0.Add(500 * time.Second)}, 506, "call"},
		{EventFilter{Tasks: []string{"ev.b"}}, 1, "flag"},
		{EventFilter{Tasks: []string{"ev.a"}, Limit: 3}, 3, "call"},
		{EventFilter{}, 1, "block"},
	} {
		got, err := l.Events(bg, c.f)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != c.n || got[0].Kind != c.first {
			t.Errorf("%+v: %d events (first %+v), want %d starting with %s", c.f, len(got), got[0], c.n, c.first)
		}
		for i := 1; i < len(got); i++ {
			if got[i].Time.After(got[i-1].Time) {
				t.Fatalf("%+v: not newest first at %d", c.f, i)
			}
		}
	}

	// A flood of calls is capped to the newest and never pushes the rarer
	// signals out of their log.
	var flood []Event
	for i := 0; i < eventCap+50; i++ {
		flood = append(flood, Event{Time: t0.Add(time.Hour + time.Duration(i)*time.Millisecond), Kind: "call", Task: "ev.a", Detail: map[string]any{"f": i}})
	}
	if err := l.AddEvents(bg, flood...); err != nil {
		t.Fatal(err)
	}
	calls, err := l.Events(bg, EventFilter{Tasks: []string{"ev.a"}, Kind: "call"})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != eventCap || calls[0].Detail["f"] != float64(eventCap+49) {
		t.Errorf("call log after a flood: %d, first %v", len(calls), calls[0].Detail)
	}
	anomalies, err := l.Events(bg, EventFilter{Tasks: []string{"ev.a"}, Kind: "anomaly"})
	if err != nil {
		t.Fatal(err)
	}
	if len(anomalies) != 101 {
		t.Errorf("anomalies after a flood of calls: %d, want all 101", len(anomalies))
	}
}

func testExactRequests(t *testing.T, open func() Store) {
	const n, m = 10, 60
	ls := []*Limiter{New(Options{Store: open()}), New(Options{Store: open()})}
	task := newTask("exact", lim(tS, req, pDay, n), lim(uS, req, pDay, 1000))
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < m; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d, err := ls[i%2].Reserve(bg, Call{Task: task, User: fmt.Sprint("u", i%7)})
			if err != nil {
				t.Error(err)
				return
			}
			if d.Hold != nil {
				ok.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if ok.Load() != n {
		t.Fatalf("%d of %d calls allowed, want exactly %d", ok.Load(), m, n)
	}
}

func testMoneyNeverPassed(t *testing.T, open func() Store) {
	const limit, est, m = 1000, 30, 80
	ls := []*Limiter{New(Options{Store: open()}), New(Options{Store: open()})}
	task := newTask("money", lim(tS, mo, pDay, limit))
	var ok atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < m; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l := ls[i%2]
			d, err := l.Reserve(bg, Call{Task: task, Estimate: Usage{Money: est}})
			if err != nil {
				t.Error(err)
				return
			}
			if d.Hold == nil {
				return
			}
			ok.Add(1)
			if _, err := l.Settle(bg, d.Hold, Outcome{Actual: Usage{Money: est - int64(i%3)}}); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	u := usageOf(t, ls[0], task, "", tS, mo, pDay)
	if u.Used > limit || u.Reserved != 0 {
		t.Fatalf("money %+v passed the limit %d", u, limit)
	}
	if ok.Load() < limit/est {
		t.Fatalf("only %d calls allowed, want at least %d", ok.Load(), limit/est)
	}
}
