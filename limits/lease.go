package limits

import (
	"context"
	"strings"
	"sync"
	"time"

	"taskgate/tasks"
)

// Leases. A replica that serves a steady stream of calls for one
// (task, user) reserves a share of the headroom of
// every window that applies in one reserve script (a lease: an ordinary hold
// of n requests and n times the call's tokens and money) and admits the
// calls that fit in it locally. A call served from a lease still checks
// the user's blocks and the task's overrides version (checkOp), so a block
// or an override made on any replica applies to the very next call, as
// without leases: from the replica's mirror of the blocks hash, which every
// change reaches before it returns (mirror.go), or, while the mirror is not
// ready, with a plain read of that hash (one round trip, no script). The calls'
// actual usage and events are settled together when the lease ends, in one
// settle script. Leases are granted only far from every limit (a lease takes
// at most 1/leaseShare of any window's headroom), so no limit is ever passed
// and one replica's unused leases can hold back another's calls only in a
// burst that spends 30/32 of a window's headroom within one lease's life.
//
// With Redis, the next lease of a steady caller is granted ahead, in the
// background, once the current one is in the last quarter of its life or
// its calls (grantAhead), so that none of its calls waits for a grant's
// round trip; for that moment the scope holds two leases. With Redis a
// lease saves its calls' round trips; with the in-process store, which has
// none, it spares each call the store's lock and maps.
const (
	leaseLife  = 250 * time.Millisecond // how long a lease admits calls
	leaseMin   = 4                      // fewest calls worth a lease
	leaseMax   = 512                    // most calls in one lease
	leaseShare = 32                     // a lease takes at most 1/leaseShare of a window's headroom
	leaseBatch = 1024                   // events a lease keeps before it ends early
	hotCalls   = 8                      // calls in hotSpan (and the span before) that make a scope busy
	hotSpan    = 100 * time.Millisecond
	scopeIdle  = 30 * time.Second      // a scope with no call for this long is forgotten
	sweepEvery = 50 * time.Millisecond // how often ended leases are looked for
)

// unlimited is the headroom of a unit no window limits.
const unlimited = int64(1) << 62

// scopeKey names the calls one lease may serve.
type scopeKey struct{ task, user string }

// leaseScope is what a Limiter knows of one (task, user): how busy it is,
// the headroom last seen, and its current lease. Guarded by mu.
type leaseScope struct {
	mu         sync.Mutex
	spanStart  time.Time
	spanCalls  int // calls in the span that began at spanStart
	prevCalls  int // calls in the span before it
	olderCalls int // calls in the span before that
	lastCall   time.Time
	room       [3]int64      // headroom per unit after the last reply (unlimited: no window)
	roomKnown  bool          // room was seen
	granting   chan struct{} // closed when the call granting a lease is done; nil: none is
	cur        *lease        // the lease admitting calls, or nil
	next       *lease        // granted ahead: admits calls once cur ends; or nil
	ended      []*lease      // leases that stopped admitting, still with calls in flight
	check      checkOp       // the scope's check, its fields built once (now set per call)
}

// lease is a hold of many calls' worth, admitting calls until it ends.
type lease struct {
	sc      *leaseScope
	hold    *Hold  // the store's hold of the lease's amounts
	version int64  // the task's overrides version when granted
	minute  string // the minute window it was granted in: it admits no call of another
	until   time.Time
	base    []winState // the windows before the lease was taken
	// amounts reserved, and used: estimates of calls in flight plus actual
	// usage of calls settled.
	reqs, tokens, money             int64
	usedReqs, usedTokens, usedMoney int64
	inflight                        int
	ended, done                     bool
	events, calls                   [][]byte
}

// sizedFor reports whether op's estimate is within the lease's share a
// call (what it reserved divided by its calls).
func (ls *lease) sizedFor(op *reserveOp) bool {
	return op.tokens*ls.reqs <= ls.tokens && op.money*ls.reqs <= ls.money
}

// fits reports whether a call of op's estimate fits in what is left.
func (ls *lease) fits(op *reserveOp) bool {
	return ls.usedReqs+1 <= ls.reqs && ls.usedTokens+op.tokens <= ls.tokens && ls.usedMoney+op.money <= ls.money
}

// scope returns the scope of (task, user), made on first use.
func (l *Limiter) scope(task, user string) *leaseScope {
	k := scopeKey{task, user}
	l.scopeMu.RLock()
	sc := l.scopes[k]
	l.scopeMu.RUnlock()
	if sc != nil {
		return sc
	}
	l.scopeMu.Lock()
	defer l.scopeMu.Unlock()
	if sc = l.scopes[k]; sc == nil {
		sc = &leaseScope{}
		l.scopes[k] = sc
	}
	return sc
}

// leasable reports whether the call of op may be served from a lease.
func (l *Limiter) leasable(op *reserveOp) bool {
	return l.leasing && !op.cph && !l.degraded.Load()
}

// endLocked stops ls admitting calls (sc.mu held). It reports whether ls
// has no call in flight, so that the caller must settle it (outside the
// lock).
func (sc *leaseScope) endLocked(ls *lease) bool {
	if ls.ended {
		return false
	}
	ls.ended = true
	if sc.cur == ls {
		sc.cur = nil
	}
	if ls.inflight > 0 {
		sc.ended = append(sc.ended, ls)
		return false
	}
	ls.done = true
	return true
}

// checkOp returns the check of a call of the scope (fields built once per
// scope and block group).
func (sc *leaseScope) checkOp(op *reserveOp) checkOp {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.check.fields == nil || sc.check.group != op.group {
		sc.check = checkOp{task: op.task, user: op.user, group: op.group}
		sc.check.fields = sc.check.checkFields()
	}
	c := sc.check
	c.now = op.now
	return c
}

// noteCall counts a call of the scope and reports whether the scope is
// hot: hotCalls calls in about the last two spans. The span before the
// previous one counts for the part of it still that close, so that a
// steady caller does not look idle each time a span begins (with only the
// previous span and the new one's first calls counted, a scope of 60 calls
// a second fell below 8 at the start of every span and reserved on its own).
func (sc *leaseScope) noteCall(now time.Time) bool {
	d := now.Sub(sc.spanStart)
	if d >= hotSpan {
		switch {
		case d < 2*hotSpan:
			sc.olderCalls, sc.prevCalls = sc.prevCalls, sc.spanCalls
		case d < 3*hotSpan:
			sc.olderCalls, sc.prevCalls = sc.spanCalls, 0
		default:
			sc.olderCalls, sc.prevCalls = 0, 0
		}
		sc.spanStart, sc.spanCalls, d = now, 0, 0
	}
	sc.spanCalls++
	sc.lastCall = now
	older := sc.olderCalls * int(hotSpan-d) / int(hotSpan)
	return sc.spanCalls+sc.prevCalls+older >= hotCalls
}

// noteRoom remembers the headroom a reserve reply shows after op (sc.mu held).
func (sc *leaseScope) noteRoom(op *reserveOp, rep *reserveReply, counted bool) {
	sc.room = [3]int64{unlimited, unlimited, unlimited}
	for _, w := range rep.windows {
		u := winUnit(w.idx)
		r := w.limit - w.used - w.reserved
		if counted {
			r -= op.amount(u)
		}
		sc.room[u] = min(sc.room[u], r)
	}
	sc.roomKnown = true
}

// leaseSize is how many calls like op the next lease should hold: about
// twice what the scope's recent rate brings in a lease's life, within
// 1/leaseShare of the headroom seen; 0 when that is too few to be worth a
// lease.
func (sc *leaseScope) leaseSize(op *reserveOp) int64 {
	if !sc.roomKnown {
		return 0
	}
	perSpan := int64(max(sc.prevCalls, sc.spanCalls))
	n := min(perSpan*2*int64(leaseLife/hotSpan), leaseMax, sc.room[unitRequests]/leaseShare)
	if op.tokens > 0 {
		n = min(n, sc.room[unitTokens]/leaseShare/op.tokens)
	}
	if op.money > 0 {
		n = min(n, sc.room[unitMoney]/leaseShare/op.money)
	}
	if n < leaseMin {
		return 0
	}
	return n
}

// reserveLeased serves c from its scope's lease, or grants one, when the
// scope is busy enough. handled is false when c should be reserved on its
// own (the caller then does); err is a store error, for the caller's
// fail_open/fail_closed handling. Calls that find another call granting
// their scope's lease wait for it rather than reserve on their own.
func (l *Limiter) reserveLeased(ctx context.Context, c *Call, now time.Time, pw *[nPeriods]periodWin, op *reserveOp) (Decision, bool, error) {
	sc := l.scope(op.task, op.user)
	sc.mu.Lock()
	hot := sc.noteCall(now)
	sc.mu.Unlock()
	var chk checkReply // read once a call (a value: a pointer to it would move it to the heap)
	checked := false
	for try := 0; try < 3; try++ {
		sc.mu.Lock()
		ls := sc.cur
		var stale, stale2 *lease
		if ls != nil && (!now.Before(ls.until) || ls.minute != op.stamps[0] || ls.hold.task != c.Task) {
			if sc.endLocked(ls) {
				stale = ls
			}
			ls = nil
		}
		if ls == nil && sc.next != nil {
			// The lease granted ahead takes over, or, stale, ends.
			nx := sc.next
			sc.next = nil
			if now.Before(nx.until) && nx.minute == op.stamps[0] && nx.hold.task == c.Task {
				sc.cur, ls = nx, nx
			} else if sc.endLocked(nx) {
				stale2 = nx
			}
		}
		var wait chan struct{}
		grant := false
		if ls == nil {
			switch {
			case sc.granting != nil:
				wait = sc.granting
			case hot && sc.leaseSize(op) > 0:
				grant = true
				sc.granting = make(chan struct{})
			}
		}
		sc.mu.Unlock()
		for _, e := range [2]*lease{stale, stale2} {
			if e != nil {
				l.finalizeLater(e)
			}
		}
		if wait != nil || grant {
			l.grantWaits.Add(1)
		}
		if wait != nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return Decision{}, false, nil
			}
		}
		if ls == nil && !grant {
			return Decision{}, false, nil
		}
		if !checked {
			rep, err := l.store.check(ctx, sc.checkOp(op))
			if err != nil || rep.block != nil {
				if grant {
					sc.grantDone()
				}
				if err != nil {
					return Decision{}, false, err
				}
				return l.decide(c, now, pw, op, &reserveReply{status: statusBlocked, block: rep.block}, nil, false), true, nil
			}
			chk, checked = rep, true
		}
		if grant {
			d, handled, err := l.grant(ctx, c, now, pw, op, sc, chk.version)
			sc.grantDone()
			return d, handled, err
		}
		sc.mu.Lock()
		if !ls.ended && ls.version == chk.version && ls.fits(op) {
			d := l.admit(c, now, pw, op, ls)
			ahead := hot && !l.InProcess() && sc.granting == nil && sc.next == nil && ls.endsSoon(now) && sc.leaseSize(op) > 0
			if ahead {
				sc.granting = make(chan struct{})
			}
			curUntil := ls.until
			sc.mu.Unlock()
			if ahead {
				l.grantAhead(c, now, curUntil, pw, op, sc, chk.version)
			}
			return d, true, nil
		}
		if !ls.ended && ls.version == chk.version && !ls.sizedFor(op) {
			// A call larger than the lease's share a call: on its own, and
			// the lease goes on serving the calls it was sized for.
			sc.mu.Unlock()
			return Decision{}, false, nil
		}
		// Used up, or granted under overrides that have changed: this lease
		// is over; the next try grants another (reading the overrides anew).
		if sc.endLocked(ls) {
			stale = ls
		}
		sc.mu.Unlock()
		if stale != nil {
			l.finalizeLater(stale)
		}
	}
	return Decision{}, false, nil
}

// grantDone marks the scope's grant finished and wakes the calls waiting
// for it.
func (sc *leaseScope) grantDone() {
	sc.mu.Lock()
	close(sc.granting)
	sc.granting = nil
	sc.mu.Unlock()
}

// endsSoon reports whether ls is in the last quarter of its life or of
// its calls, when the next lease is granted ahead (sc.mu held).
func (ls *lease) endsSoon(now time.Time) bool {
	return !now.Before(ls.until.Add(-leaseLife/4)) || 4*ls.usedReqs >= 3*ls.reqs
}

// grantAhead grants, in the background, the lease that takes over when the
// scope's current one ends (at curUntil, or sooner when its calls run out),
// so that no call of a steady caller waits for a grant's round trip. It is
// sized and checked as grant's lease is, from the call c that found the
// current lease ending (the caller set sc.granting: calls that find no
// lease meanwhile wait for this grant), and it admits calls for leaseLife
// from curUntil (at most a quarter life from now), not from now: counted
// from the grant, a steady caller's leases each lived up to a quarter
// less, one more grant and settlement every three leases. A refused grant
// leaves the next call to reserve as without it.
func (l *Limiter) grantAhead(c *Call, now, curUntil time.Time, pw *[nPeriods]periodWin, op *reserveOp, sc *leaseScope, version int64) {
	if !l.track() {
		sc.grantDone()
		return
	}
	cc, pwc, opc := *c, *pw, *op
	go func() {
		defer l.wg.Done()
		defer sc.grantDone()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// From curUntil, but never more than a quarter life ahead: a lease
		// whose calls ran out early is followed sooner, and no lease admits
		// calls longer than 1.25 leaseLife after its grant.
		start := curUntil
		if start.Before(now) {
			start = now
		} else if lim := now.Add(leaseLife / 4); start.After(lim) {
			start = lim
		}
		ls := l.grantLease(ctx, &cc, now, start, &pwc, &opc, sc, version)
		if ls == nil {
			return
		}
		sc.mu.Lock()
		if sc.next == nil {
			sc.next, ls = ls, nil
		} else {
			sc.endLocked(ls) // not wanted after all: it ends unused
		}
		sc.mu.Unlock()
		if ls != nil {
			l.finalizeLater(ls)
		}
	}()
}

// grantLease reserves a lease sized for calls like op of scope sc that
// admits calls from start (now or later) for leaseLife, or returns nil (no
// room worth a lease, refused, or a store error).
func (l *Limiter) grantLease(ctx context.Context, c *Call, now, start time.Time, pw *[nPeriods]periodWin, op *reserveOp, sc *leaseScope, version int64) *lease {
	gop, rep, ok, err := l.reserveLease(ctx, c, now, start, pw, op, sc)
	if err != nil || !ok {
		return nil
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if rep.status != statusOK {
		if rep.status == statusRefused {
			sc.noteRoom(&gop, &rep, false)
		}
		return nil
	}
	return l.newLease(c, now, start, pw, op, &gop, &rep, sc, version)
}

// reserveLease reserves in the store a lease sized for calls like op of
// scope sc that admits calls from start for leaseLife (no lock held): the
// lease's reservation, held in the store until a call admitted at its end
// could have finished, and the store's reply; ok is false when the scope's
// room is not worth a lease. c gives the config limits the lease counts in.
func (l *Limiter) reserveLease(ctx context.Context, c *Call, now, start time.Time, pw *[nPeriods]periodWin, op *reserveOp, sc *leaseScope) (gop reserveOp, rep reserveReply, ok bool, err error) {
	sc.mu.Lock()
	n := sc.leaseSize(op)
	sc.mu.Unlock()
	if n == 0 {
		return gop, rep, false, nil
	}
	gop = *op
	gop.limits = l.configLimits(c.Task, c.User)
	gop.holdID = l.holdID("L")
	gop.requests, gop.tokens, gop.money, gop.lease = n, n*op.tokens, n*op.money, true
	gop.leaseUntil = op.leaseUntil + (start.Sub(now) + leaseLife).Milliseconds()
	gop.setTTLs(now, pw)
	rep, err = l.store.reserve(ctx, &gop)
	return gop, rep, err == nil, err
}

// newLease is the lease of a reservation the store granted (sc.mu held),
// admitting calls until start+leaseLife: the scope's room noted, its hold
// made for c's task and user.
func (l *Limiter) newLease(c *Call, now, start time.Time, pw *[nPeriods]periodWin, op, gop *reserveOp, rep *reserveReply, sc *leaseScope, version int64) *lease {
	sc.noteRoom(gop, rep, true)
	lc := *c
	lc.HoldSpace = nil // the lease's hold is its own, not the call's
	// Nor does it view the call's memory, which the lease outlives (the
	// proxy's request ids are views of the call, whose hold keeps the lease
	// that admitted it: kept, the view chained each lease to the one before).
	lc.RequestID = strings.Clone(lc.RequestID)
	gd := l.decide(&lc, now, pw, gop, rep, nil, false)
	l.startSweep()
	return &lease{
		sc: sc, hold: gd.Hold, version: version, minute: op.stamps[0], until: start.Add(leaseLife),
		base: rep.windows, reqs: gop.requests, tokens: gop.tokens, money: gop.money,
	}
}

// grant reserves a lease for op's scope and admits c from it. A refused
// grant leaves c to be reserved on its own.
func (l *Limiter) grant(ctx context.Context, c *Call, now time.Time, pw *[nPeriods]periodWin, op *reserveOp, sc *leaseScope, version int64) (Decision, bool, error) {
	gop, rep, ok, err := l.reserveLease(ctx, c, now, now, pw, op, sc)
	if err != nil || !ok {
		return Decision{}, false, err
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	switch rep.status {
	case statusBlocked:
		return l.decide(c, now, pw, op, &rep, nil, false), true, nil
	case statusRefused:
		sc.noteRoom(&gop, &rep, false)
		return Decision{}, false, nil
	}
	ls := l.newLease(c, now, now, pw, op, &gop, &rep, sc, version)
	if old := sc.cur; old != nil {
		// Another call's lease of the same scope: this one replaces it.
		if sc.endLocked(old) {
			l.finalizeLater(old)
		}
	}
	sc.cur = ls
	return l.admit(c, now, pw, op, ls), true, nil
}

// admit serves c from ls (sc.mu held): its estimate is taken from what is
// left, and its decision shows the windows as the lease found them plus
// what the lease's calls have used so far.
func (l *Limiter) admit(c *Call, now time.Time, pw *[nPeriods]periodWin, op *reserveOp, ls *lease) Decision {
	var wins [nWindows]winState // on the stack: decide keeps none of them
	rep := reserveReply{status: statusOK, windows: wins[:0]}
	if len(ls.base) > len(wins) {
		rep.windows = make([]winState, 0, len(ls.base)) // not reached: a window appears once
	}
	rep.windows = rep.windows[:len(ls.base)]
	used := [3]int64{ls.usedReqs, ls.usedTokens, ls.usedMoney}
	for i, w := range ls.base {
		w.used += w.reserved + used[winUnit(w.idx)]
		w.reserved = 0
		rep.windows[i] = w
	}
	ls.usedReqs++
	ls.usedTokens += op.tokens
	ls.usedMoney += op.money
	ls.inflight++
	return l.decide(c, now, pw, op, &rep, ls, false)
}

// settleLeased settles a call served from a lease: its actual usage
// replaces its estimate in the lease and its events wait for the lease's
// settlement, which starts (in the background) when the lease has ended
// and this was its last call in flight. It never waits for the store.
func (l *Limiter) settleLeased(h *Hold, act Usage, evs, calls [][]byte) {
	ls := h.lease
	sc := ls.sc
	sc.mu.Lock()
	if ls.done {
		// Settled already (the Limiter closed): nothing left to add to.
		sc.mu.Unlock()
		return
	}
	ls.usedTokens += act.Tokens() - h.tokens
	ls.usedMoney += act.Money - h.money
	ls.inflight--
	ls.events = append(ls.events, evs...)
	ls.calls = append(ls.calls, calls...)
	last := false
	if !ls.ended && len(ls.events)+len(ls.calls) >= leaseBatch {
		last = sc.endLocked(ls)
	} else if ls.ended && ls.inflight == 0 {
		ls.done = true
		last = true
		sc.dropEnded(ls)
	}
	sc.mu.Unlock()
	if last {
		// In the background, so that settling a leased call never waits
		// for the store; the hook gets the lease's crossings.
		l.finalizeLater(ls)
	}
}

// leaseWait bounds how long a call refused only for what leases hold waits
// for them to end: a lease's life, and the sweep that settles it, twice.
const leaseWait = 2 * (leaseLife + sweepEvery)

// heldByLeases reports whether a refused reservation would fit if every
// lease in the windows that refused it were given back unused.
func heldByLeases(op *reserveOp, rep *reserveReply) bool {
	held := false
	for _, w := range rep.windows {
		amt := op.amount(winUnit(w.idx))
		if w.limit <= 0 {
			return false
		}
		if w.used+w.reserved+amt > w.limit {
			if w.leased <= 0 || w.used+w.reserved-w.leased+amt > w.limit {
				return false
			}
			held = true
		}
	}
	return held
}

// waitForLeases retries a reservation refused only for what leases hold:
// this replica's leases of the task end at once, other replicas' within
// their life, so that with a limit of N and more than N calls at once,
// exactly N still go through. It returns the last reply.
func (l *Limiter) waitForLeases(ctx context.Context, op *reserveOp, rep reserveReply) reserveReply {
	l.endLeases(op.task, true)
	deadline := time.Now().Add(leaseWait)
	for first := true; ; first = false {
		if !first {
			if time.Now().After(deadline) {
				return rep
			}
			t := time.NewTimer(sweepEvery)
			select {
			case <-ctx.Done():
				t.Stop()
				return rep
			case <-t.C:
			}
		}
		next, err := l.store.reserve(ctx, op)
		if err != nil {
			return rep
		}
		rep = next
		if rep.status != statusRefused || !heldByLeases(op, &rep) {
			return rep
		}
	}
}

// dropEnded forgets an ended lease (sc.mu held).
func (sc *leaseScope) dropEnded(ls *lease) {
	for i, e := range sc.ended {
		if e == ls {
			sc.ended = append(sc.ended[:i], sc.ended[i+1:]...)
			return
		}
	}
}

// settleLease settles a whole lease: what its calls used replaces what it
// reserved, in one settle script that also appends its calls' events.
func (l *Limiter) settleLease(ctx context.Context, ls *lease) (SettleResult, error) {
	h := ls.hold
	now := l.now()
	op := settleOp{
		task: h.task.Key, user: h.user, holdID: h.id, now: now.UnixMilli(),
		resRequests: ls.reqs, resTokens: ls.tokens, resMoney: ls.money, lease: true,
		actRequests: ls.usedReqs, actTokens: max(ls.usedTokens, 0), actMoney: max(ls.usedMoney, 0),
		thresholds: h.task.Thresholds, events: ls.events, calls: ls.calls,
	}
	winOf := holdWins(h, now, &op)
	return l.settleStore(ctx, h, &op, winOf)
}

// track counts a background task in the Limiter's wait group (Close waits
// for it), unless the Limiter is closed: then it reports false and the
// caller does the work at once or not at all.
func (l *Limiter) track() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	return true
}

// finalizeLater settles an ended lease with no call in flight in the
// background, and hands the result to the settle hook.
func (l *Limiter) finalizeLater(ls *lease) {
	if !l.track() {
		l.finalize(ls)
		return
	}
	done := make(chan struct{})
	l.bgMu.Lock()
	l.bg[ls] = done
	l.bgMu.Unlock()
	go func() {
		defer l.wg.Done()
		l.finalize(ls)
		l.bgMu.Lock()
		delete(l.bg, ls)
		l.bgMu.Unlock()
		close(done)
	}()
}

// awaitSettling waits (at most 5 s) for the leases of task ("": of every
// task) being settled in the background when it is called, so that a read
// after it sees what they counted. Settlements begun later are not waited
// for, so a busy replica answers at once.
func (l *Limiter) awaitSettling(task string) {
	var wait []chan struct{}
	l.bgMu.Lock()
	for ls, done := range l.bg {
		if task == "" || ls.hold.task.Key == task {
			wait = append(wait, done)
		}
	}
	l.bgMu.Unlock()
	if len(wait) == 0 {
		return
	}
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	for _, done := range wait {
		select {
		case <-done:
		case <-t.C:
			return
		}
	}
}

// finalize settles an ended lease and hands the result to the settle hook.
func (l *Limiter) finalize(ls *lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := l.settleLease(ctx, ls)
	if hook := l.settleHook.Load(); hook != nil {
		(*hook)(ls.hold.task, ls.hold.user, res, err)
	}
}

// SettleHook receives the result of a settlement the Limiter ran on its
// own (a lease that ended with no call in flight): threshold crossings to
// signal, or the error.
type SettleHook func(t *tasks.Task, user string, res SettleResult, err error)

// SetSettleHook sets the hook for settlements the Limiter runs on its own.
func (l *Limiter) SetSettleHook(h SettleHook) { l.settleHook.Store(&h) }

// startSweep starts the loop that ends leases past their life, once.
func (l *Limiter) startSweep() {
	l.sweepOnce.Do(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.closed {
			return
		}
		l.wg.Add(1)
		go l.sweepLoop()
	})
}

// sweepLoop ends leases past their life and forgets idle scopes.
func (l *Limiter) sweepLoop() {
	defer l.wg.Done()
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.endLeases("", false)
	}
}

// endLeases ends the leases of task ("" : every task) that are past their
// life (all of them with force) and settles those with no call in flight:
// in the background, or before returning with force (which also waits for
// settlements already under way in the background). It forgets idle
// scopes.
func (l *Limiter) endLeases(task string, force bool) {
	now := l.now()
	minute := l.windows.get(now, l.loc)[0].stamp
	var idle []scopeKey
	var settle []*lease
	l.scopeMu.RLock()
	for k, sc := range l.scopes {
		if task != "" && k.task != task {
			continue
		}
		sc.mu.Lock()
		if ls := sc.cur; ls != nil && (force || !now.Before(ls.until) || ls.minute != minute) {
			if sc.endLocked(ls) {
				settle = append(settle, ls)
			}
		}
		if nx := sc.next; nx != nil && (force || !now.Before(nx.until) || nx.minute != minute) {
			sc.next = nil
			if sc.endLocked(nx) {
				settle = append(settle, nx)
			}
		}
		if sc.cur == nil && sc.next == nil && len(sc.ended) == 0 && sc.granting == nil && now.Sub(sc.lastCall) > scopeIdle {
			idle = append(idle, k)
		}
		sc.mu.Unlock()
	}
	l.scopeMu.RUnlock()
	if len(idle) > 0 {
		l.scopeMu.Lock()
		for _, k := range idle {
			sc := l.scopes[k]
			sc.mu.Lock()
			if sc.cur == nil && sc.next == nil && len(sc.ended) == 0 && sc.granting == nil && now.Sub(sc.lastCall) > scopeIdle {
				delete(l.scopes, k)
			}
			sc.mu.Unlock()
		}
		l.scopeMu.Unlock()
	}
	for _, ls := range settle {
		if force {
			l.finalize(ls)
		} else {
			l.finalizeLater(ls)
		}
	}
	if force {
		l.awaitSettling(task)
	}
}

// closeLeases settles every lease at Close, those with calls still in
// flight too (their estimates counted as used; their own settlements are
// then dropped).
func (l *Limiter) closeLeases() {
	l.endLeases("", true)
	var rest []*lease
	l.scopeMu.RLock()
	for _, sc := range l.scopes {
		sc.mu.Lock()
		for _, ls := range sc.ended {
			if !ls.done {
				ls.done = true
				rest = append(rest, ls)
			}
		}
		sc.ended = nil
		sc.mu.Unlock()
	}
	l.scopeMu.RUnlock()
	for _, ls := range rest {
		l.finalize(ls)
	}
}
