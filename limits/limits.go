package limits

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"taskgate/config"
	"taskgate/tasks"
)

// ErrStoreUnavailable is returned (wrapped) by Reserve when the store fails
// and the Limiter is fail_closed; the proxy answers 503 store_unavailable.
var ErrStoreUnavailable = errors.New("limits: store unavailable")

// ErrUserLimitsOff is returned by SetOverrides for user windows on a task
// with user_limits: false (409 user_limits_off).
var ErrUserLimitsOff = errors.New("limits: user limits are off for this task")

// ErrSettled is returned by Settle for a hold that was already settled.
var ErrSettled = errors.New("limits: hold already settled")

// DefaultLease is how long a hold lives when Call.Lease is 0.
const DefaultLease = 5 * time.Minute

// Usage is what a call uses: tokens, and money in micro-dollars.
type Usage struct {
	InputTokens, OutputTokens int64
	Money                     int64 // micro-dollars
}

// Tokens is input plus output tokens.
func (u Usage) Tokens() int64 { return u.InputTokens + u.OutputTokens }

// Call is one call to check and reserve.
type Call struct {
	// RequestID may view memory of the caller's that lives as long as the
	// call (the proxy's does): what the Limiter keeps past the call, a
	// lease's hold, gets a copy.
	RequestID string
	Task      *tasks.Task
	User      string        // "": no user — only task windows count
	Estimate  Usage         // reserved now; requests always 1
	Lease     time.Duration // how long the hold lives if never settled (0: DefaultLease)
	Now       time.Time     // zero: the Limiter's clock
	// HoldSpace, if not nil, is a zero Hold that the call's hold is made
	// in, saving an allocation; it must not be used for another call.
	HoldSpace *Hold
}

// Window names one counting window and when it ends (the next calendar
// boundary in the Limiter's location).
type Window struct {
	Scope, Unit, Period string
	End                 time.Time
}

// Refusal says which limit a call would pass.
type Refusal struct {
	Window Window
	Limit  int64
	Used   int64  // settled + reserved before this call
	Source string // "config" or "override"
}

// Block bars a user from a block group, or from everything with Group "*".
type Block struct {
	User    string     `json:"user"`
	Group   string     `json:"group"` // a block group, or "*" for everywhere
	Reason  string     `json:"reason"`
	Expires *time.Time `json:"expires"` // nil: never
	Created time.Time  `json:"created"`
}

// Trio is OpenAI's x-ratelimit-{limit,remaining,reset}-X for one window.
type Trio struct {
	Limit, Remaining int64
	Reset            time.Duration
}

// Ratio is a task window's (used+reserved)/limit, for the usage gauge.
type Ratio struct {
	Unit, Period string
	Ratio        float64
}

// Decision is the answer to Reserve.
type Decision struct {
	// Blocked is set when the user is blocked in the task's block group or
	// in "*": nothing was counted.
	Blocked *Block
	// Refusal is set when a limit would be passed: nothing was counted.
	Refusal *Refusal
	// Requests is the requests window with the least remaining after this
	// reservation (ties: task before user, shorter period first); on a
	// refusal, counted without the refused call; nil when none applies.
	Requests *Trio
	// Tokens is likewise for tokens.
	Tokens *Trio
	// TaskRatios are the task-scope windows after this call.
	TaskRatios []Ratio
	// CallsLastHour is, when Task.MaxCallsPerHour > 0 and there is a user,
	// the user's calls to this task in the last sixty minutes (sliding),
	// including this one.
	CallsLastHour int64
	// Hold is non-nil when the call may go ahead; pass it to Settle once.
	Hold *Hold
}

// Event is one line of a task's event log.
type Event struct {
	Time      time.Time      `json:"time"`
	Kind      string         `json:"kind"` // anomaly | flag | block | threshold | call
	Task      string         `json:"task"`
	User      string         `json:"user"`
	Source    string         `json:"source"`
	RequestID string         `json:"request_id"`
	Detail    map[string]any `json:"detail"`
	// Encoded, when not nil, is the whole event already encoded as a JSON
	// object, stored as it is (Detail is then not used); the fields above
	// must agree with it, for they decide where it is stored. Settle keeps
	// it, not a copy, until the settlement is written: it must not change.
	Encoded []byte `json:"-"`
}

// Outcome is how a call ended, for Settle.
type Outcome struct {
	Actual  Usage   // tokens and money actually used
	Failed  bool    // the upstream call failed: pass the usage it still caused (usually none)
	Flagged bool    // the model flagged the call off-purpose
	Events  []Event // appended to the event log in the same round trip
}

// Crossing is a threshold crossed by a settlement, claimed once across
// every replica.
type Crossing struct {
	Task, Scope, User, Unit, Period string
	Threshold                       float64
	Used, Limit                     int64
	WindowEnd                       time.Time
}

// SettleResult is the answer to Settle.
type SettleResult struct {
	Crossings   []Crossing // thresholds this settlement crossed
	FlagsToday  int64      // the user's flags today in this task, when Outcome.Flagged
	AutoBlocked *Block     // set when this flag reached Task.AutoBlockThreshold
}

// Hold is a reservation made by Reserve. Pass it to Settle exactly once.
type Hold struct {
	task      *tasks.Task
	user      string
	requestID string
	id        string
	tokens    int64
	money     int64
	estimate  Usage
	wins      []holdWin
	local     bool
	lease     *lease // the lease that served the call, if one did
	settled   atomic.Bool

	// Storage for the decision that made the hold, so that a call served
	// from a lease (its hold keeps no windows) allocates once: its Requests
	// and Tokens and its TaskRatios.
	trios  [2]Trio
	ratios [6]Ratio
}

type holdWin struct {
	idx      int
	limit    int64
	stamp    string
	end      time.Time
	override bool
}

// RequestID is the request id of the call the hold belongs to.
func (h *Hold) RequestID() string { return h.requestID }

// Estimate is the call's estimate, as reserved.
func (h *Hold) Estimate() Usage { return h.estimate }

// Leased reports whether the call was served from a lease: its Settle then
// makes no store round trip unless the outcome is flagged or carries
// events of another task, so a caller may settle it inline.
func (h *Hold) Leased() bool { return h.lease != nil }

// Options configures a Limiter; the zero value is an in-process,
// fail_closed Limiter in UTC.
type Options struct {
	Store    Store            // NewMemoryStore() or a *RedisStore (nil: a new memory store)
	Location *time.Location   // where a day and a month begin (nil: UTC)
	OnError  string           // config.FailClosed (default) or config.FailOpen
	Now      func() time.Time // nil: time.Now
	// NoLeases makes every call reserve and settle on its own (two store
	// round trips, each a script), never from a lease (see lease.go).
	// Leases serve busy callers with either store: across the network they
	// save the calls' round trips, in process the store's lock and maps.
	NoLeases bool
}

// Limiter checks, reserves and settles calls against their task's and
// user's windows. It is safe for concurrent use.
type Limiter struct {
	store    Store
	loc      *time.Location
	failOpen bool
	clock    func() time.Time
	id       string
	seq      atomic.Uint64
	windows  windowCache

	local      *memoryStore // fail_open: serves while the store is down
	degraded   atomic.Bool
	localHolds atomic.Int64
	mu         sync.Mutex
	pending    map[string]*pendingTask
	loopOn     bool
	closed     bool
	stop       chan struct{}
	stopOnce   sync.Once
	wg         sync.WaitGroup

	leasing    bool     // calls of busy scopes may be served from leases
	limitArgs  sync.Map // limitsKey → []limitArg
	limitArgsN atomic.Int64
	scopeMu    sync.RWMutex
	scopes     map[scopeKey]*leaseScope
	sweepOnce  sync.Once
	settleHook atomic.Pointer[SettleHook]
	bgMu       sync.Mutex
	bg         map[*lease]chan struct{} // leases being settled in the background; closed when done
	grantWaits atomic.Int64             // leased-path calls that waited for a lease's grant
}

// New returns a Limiter.
func New(opts Options) *Limiter {
	l := &Limiter{
		store:    opts.Store,
		loc:      opts.Location,
		failOpen: opts.OnError == config.FailOpen,
		clock:    opts.Now,
		local:    newMemoryStore(),
		pending:  map[string]*pendingTask{},
		stop:     make(chan struct{}),
	}
	if l.store == nil {
		l.store = NewMemoryStore()
	}
	if l.loc == nil {
		l.loc = time.UTC
	}
	if l.clock == nil {
		l.clock = time.Now
	}
	l.scopes = map[scopeKey]*leaseScope{}
	l.bg = map[*lease]chan struct{}{}
	l.leasing = !opts.NoLeases
	var b [6]byte
	_, _ = rand.Read(b[:])
	l.id = hex.EncodeToString(b[:])
	return l
}

func (l *Limiter) now() time.Time { return l.clock() }

// Store is the Limiter's store.
func (l *Limiter) Store() Store { return l.store }

// Location is where the Limiter's days and months begin.
func (l *Limiter) Location() *time.Location { return l.loc }

// configLimits returns the config limits of t that apply to a call with
// or without a user, worked out once per task (the same slice each call:
// callers only read it).
func (l *Limiter) configLimits(t *tasks.Task, user string) []limitArg {
	k := limitsKey{t, user != ""}
	if v, ok := l.limitArgs.Load(k); ok {
		return v.([]limitArg)
	}
	out := configLimits(t, user)
	if l.limitArgsN.Add(1) > maxLimitArgs {
		// Tasks of many reloads: start again rather than keep them all.
		l.limitArgs.Clear()
		l.limitArgsN.Store(1)
	}
	l.limitArgs.Store(k, out)
	return out
}

// limitsKey names the config limits of a task for calls with or without a user.
type limitsKey struct {
	t    *tasks.Task
	user bool
}

// maxLimitArgs bounds the tasks whose config limits are kept.
const maxLimitArgs = 4096

// configLimits lists a task's config limits as store arguments; user
// windows only when there is a user.
func configLimits(t *tasks.Task, user string) []limitArg {
	out := make([]limitArg, 0, len(t.Limits))
	for _, lim := range t.Limits {
		idx, ok := winIndex(lim.Scope, lim.Unit, lim.Period)
		if !ok || (winIsUser(idx) && (user == "" || !t.UserLimits)) {
			continue
		}
		out = append(out, limitArg{idx: idx, value: lim.Value})
	}
	return out
}

// Reserve checks c against every window that applies and, only if all fit,
// reserves its estimate in all of them: one atomic store round trip.
func (l *Limiter) Reserve(ctx context.Context, c Call) (Decision, error) {
	if c.Task == nil {
		return Decision{}, errors.New("reserve: call has no task")
	}
	now := c.Now
	if now.IsZero() {
		now = l.now()
	}
	lease := c.Lease
	if lease <= 0 {
		lease = DefaultLease
	}
	pw := l.windows.get(now, l.loc)
	op := reserveOp{
		task:       c.Task.Key,
		user:       c.User,
		userLimits: c.Task.UserLimits,
		group:      c.Task.BlockGroup,
		now:        now.UnixMilli(),
		leaseUntil: now.Add(lease).UnixMilli(),
		requests:   1,
		tokens:     max(c.Estimate.Tokens(), 0),
		money:      max(c.Estimate.Money, 0),
		cph:        c.Task.MaxCallsPerHour > 0 && c.User != "",
		// limits: set where the op goes to the store (a call admitted by a
		// lease needs none)
	}
	if op.group == "" {
		op.group = c.Task.Key
	}
	for i := range pw {
		op.stamps[i] = pw[i].stamp
	}
	leasable := l.leasable(&op)
	if leasable {
		d, handled, err := l.reserveLeased(ctx, &c, now, pw, &op)
		if handled {
			return d, nil
		}
		if err != nil {
			// fail_open: degraded now, so the local store serves it below.
			if derr := l.storeFailed(ctx, c.Task.Key, err); derr != nil {
				return Decision{}, derr
			}
		}
	}
	return l.reserveOwn(ctx, &c, now, pw, op, leasable)
}

// reserveOwn reserves a call on its own, not from a lease. It takes op by
// value: the store keeps a pointer to it, which moves it to the heap, and
// this way only these calls pay for that, not those served from a lease.
func (l *Limiter) reserveOwn(ctx context.Context, c *Call, now time.Time, pw *[nPeriods]periodWin, op reserveOp, leasable bool) (Decision, error) {
	var (
		rep   reserveReply
		err   error
		local bool
	)
	op.limits = l.configLimits(c.Task, c.User)
	// A call reserved on its own has a hold of its own (one served from a
	// lease shares the lease's).
	op.holdID = l.holdID("")
	op.setTTLs(now, pw)
	if l.degraded.Load() {
		rep, local, err = l.reserveLocal(ctx, &op)
	} else if rep, err = l.store.reserve(ctx, &op); err != nil {
		if derr := l.storeFailed(ctx, c.Task.Key, err); derr != nil {
			return Decision{}, derr
		}
		rep, local, err = l.reserveLocal(ctx, &op)
	}
	if err != nil {
		return Decision{}, fmt.Errorf("reserve %s: %w", c.Task.Key, err)
	}
	if l.leasing && !local && rep.status == statusRefused && heldByLeases(&op, &rep) {
		rep = l.waitForLeases(ctx, &op, rep)
	}
	if leasable && !local && rep.status != statusBlocked {
		sc := l.scope(op.task, op.user)
		sc.mu.Lock()
		sc.noteRoom(&op, &rep, rep.status == statusOK)
		sc.mu.Unlock()
	}
	return l.decide(c, now, pw, &op, &rep, nil, local), nil
}

// storeFailed handles a store error of Reserve: the error to return, or
// nil when the call is to be served locally (fail_open; degraded mode
// begins).
func (l *Limiter) storeFailed(ctx context.Context, task string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("reserve %s: %w", task, err)
	}
	if !l.failOpen {
		return fmt.Errorf("reserve %s: %w: %w", task, ErrStoreUnavailable, err)
	}
	l.enterDegraded()
	return nil
}

// holdID is a new hold id, unique across replicas: "<replica>:<kind><n>"
// (kind "L" for a lease, "" for a call).
func (l *Limiter) holdID(kind string) string {
	return l.id + ":" + kind + strconv.FormatUint(l.seq.Add(1), 36)
}

func (l *Limiter) reserveLocal(ctx context.Context, op *reserveOp) (reserveReply, bool, error) {
	rep, err := l.local.reserve(ctx, op)
	return rep, true, err
}

// decide turns a store's reply into a Decision (and a Hold); ls is the
// lease that admitted the call (a reply made by admit), or nil. (Not a
// field of the reply: the hold keeps it, and escape analysis would then
// move the reply's windows to the heap too.)
func (l *Limiter) decide(c *Call, now time.Time, pw *[nPeriods]periodWin, op *reserveOp, rep *reserveReply, ls *lease, local bool) Decision {
	var d Decision
	if rep.status == statusBlocked {
		var b Block
		// A copy: rep.block given to Unmarshal would move every reply to
		// the heap, and admit's windows with it.
		if err := json.Unmarshal(bytes.Clone(rep.block), &b); err != nil {
			b = Block{User: c.User, Group: op.group, Reason: "blocked"}
		}
		d.Blocked = &b
		return d
	}
	allowed := rep.status == statusOK
	var refused *winState
	var trios [2]Trio // requests, tokens: the window with the least remaining
	var hasTrio [2]bool
	nTask := 0
	for _, w := range rep.windows {
		if !winIsUser(w.idx) {
			nTask++
		}
	}
	var h *Hold // made now, for the storage the decision uses
	if allowed {
		if h = c.HoldSpace; h == nil {
			h = new(Hold)
		}
	}
	if nTask > 0 {
		if h != nil && nTask <= len(h.ratios) {
			d.TaskRatios = h.ratios[:0:nTask]
		} else {
			d.TaskRatios = make([]Ratio, 0, nTask)
		}
	}
	for i := range rep.windows {
		w := &rep.windows[i]
		amt := op.amount(winUnit(w.idx))
		if !allowed && (w.limit <= 0 || w.used+w.reserved+amt > w.limit) {
			if refused == nil || pw[winPeriod(w.idx)].end.After(pw[winPeriod(refused.idx)].end) {
				refused = w
			}
		}
		after := w.used + w.reserved
		if allowed {
			after += amt
		}
		rem := max(w.limit-after, 0)
		if u := winUnit(w.idx); u == unitRequests || u == unitTokens {
			if !hasTrio[u] || rem < trios[u].Remaining {
				trios[u] = Trio{Limit: w.limit, Remaining: rem, Reset: pw[winPeriod(w.idx)].end.Sub(now)}
				hasTrio[u] = true
			}
		}
		if !winIsUser(w.idx) {
			r := 1.0
			if w.limit > 0 {
				r = float64(after) / float64(w.limit)
			}
			d.TaskRatios = append(d.TaskRatios, Ratio{Unit: winUnitName(w.idx), Period: winPeriodName(w.idx), Ratio: r})
		}
	}
	if hasTrio[unitRequests] || hasTrio[unitTokens] {
		var t *[2]Trio
		if h != nil {
			t = &h.trios
		} else {
			t = new([2]Trio) // one allocation for both
		}
		*t = trios
		if hasTrio[unitRequests] {
			d.Requests = &t[unitRequests]
		}
		if hasTrio[unitTokens] {
			d.Tokens = &t[unitTokens]
		}
	}
	if !allowed {
		if refused == nil && len(rep.windows) > 0 {
			refused = &rep.windows[0]
		}
		if refused != nil {
			d.Refusal = &Refusal{
				Window: Window{Scope: winScope(refused.idx), Unit: winUnitName(refused.idx),
					Period: winPeriodName(refused.idx), End: pw[winPeriod(refused.idx)].end},
				Limit:  refused.limit,
				Used:   refused.used + refused.reserved,
				Source: source(refused.override),
			}
		} else {
			d.Refusal = &Refusal{Source: "config"}
		}
		return d
	}
	h.task, h.user, h.requestID, h.id = c.Task, c.User, c.RequestID, op.holdID
	h.tokens, h.money, h.estimate, h.local = op.tokens, op.money, c.Estimate, local
	// A call served from a lease is settled into the lease, never window
	// by window: its hold keeps no windows.
	if h.lease = ls; h.lease == nil {
		h.wins = make([]holdWin, len(rep.windows))
		for i, w := range rep.windows {
			p := winPeriod(w.idx)
			h.wins[i] = holdWin{idx: w.idx, limit: w.limit, stamp: pw[p].stamp, end: pw[p].end, override: w.override}
		}
	}
	if local {
		l.localHolds.Add(1)
	}
	d.Hold = h
	if op.cph {
		d.CallsLastHour = rep.calls
	}
	return d
}

func source(override bool) string {
	if override {
		return "override"
	}
	return "config"
}

// Settle replaces a hold's estimate by the call's actual usage in every
// window, claims the threshold crossings this causes, counts a flag and
// appends the outcome's events: one store round trip (one more when the
// flag auto-blocks the user, or for events of another task).
func (l *Limiter) Settle(ctx context.Context, h *Hold, o Outcome) (SettleResult, error) {
	if h == nil {
		return SettleResult{}, errors.New("settle: no hold")
	}
	if !h.settled.CompareAndSwap(false, true) {
		return SettleResult{}, fmt.Errorf("settle %s: %w", h.task.Key, ErrSettled)
	}
	if h.local {
		defer l.localHolds.Add(-1)
	}
	now := l.now()
	t := h.task
	act := Usage{InputTokens: max(o.Actual.Tokens(), 0), Money: max(o.Actual.Money, 0)}
	var callBuf [1][]byte // a call's one journal entry, on the stack when served from a lease
	events, calls, other, err := l.encodeEvents(h, o.Events, now, callBuf[:0])
	if err != nil {
		return SettleResult{}, fmt.Errorf("settle %s: %w", t.Key, err)
	}
	flag := o.Flagged && h.user != ""
	var res SettleResult
	if h.lease != nil && !flag {
		l.settleLeased(h, act, events, calls)
	} else {
		op := settleOp{
			task:        t.Key,
			user:        h.user,
			holdID:      h.id,
			now:         now.UnixMilli(),
			resRequests: 1,
			actRequests: 1,
			resTokens:   h.tokens,
			resMoney:    h.money,
			actTokens:   act.Tokens(),
			actMoney:    act.Money,
			thresholds:  t.Thresholds,
			events:      events,
			calls:       slices.Clone(calls), // not callBuf, which the store would move to the heap
		}
		var winOf []int
		if h.lease == nil {
			winOf = holdWins(h, now, &op)
		} else {
			// A flagged call served from a lease: its usage goes to the
			// lease; its flag (which may block the user) and its events
			// are counted now, by a settle of no hold and no window.
			l.settleLeased(h, act, nil, nil)
			op.holdID = ""
		}
		if flag {
			day := l.windows.get(now, l.loc)[2]
			op.flagKey = flagKey(h.user, day.stamp)
			op.flagTTL = settleTTL(now, day.end)
		}
		res, err = l.settleStore(ctx, h, &op, winOf)
	}
	if err != nil {
		return SettleResult{}, fmt.Errorf("settle %s: %w", t.Key, err)
	}
	if !o.Flagged {
		res.FlagsToday = 0
	}
	if o.Flagged && t.AutoBlockThreshold > 0 && res.FlagsToday == int64(t.AutoBlockThreshold) {
		group := t.BlockGroup
		if group == "" {
			group = t.Key
		}
		b := Block{
			User:    h.user,
			Group:   group,
			Reason:  fmt.Sprintf("auto-blocked: %d off-purpose requests today in task %s", res.FlagsToday, t.Key),
			Created: now.UTC(),
		}
		ev, _ := appendEvent(nil, &Event{
			Time: now.UTC(), Kind: "block", Task: t.Key, User: h.user, RequestID: h.requestID,
			Detail: map[string]any{"group": group, "reason": b.Reason, "auto": true, "flags": res.FlagsToday},
		})
		st := l.store
		if h.local || l.degraded.Load() {
			st = l.local
		}
		if err := st.putBlock(ctx, b, t.Key, ev); err != nil {
			return res, fmt.Errorf("settle %s: auto-block %s: %w", t.Key, h.user, err)
		}
		res.AutoBlocked = &b
	}
	if len(other) > 0 {
		if err := l.AddEvents(ctx, other...); err != nil {
			return res, fmt.Errorf("settle %s: %w", t.Key, err)
		}
	}
	return res, nil
}

// encodeEvents encodes the events of a settlement: those of the hold's
// task as JSON for its two logs (events and calls: each an Encoded event
// as it is, the others slices of one buffer; the calls log's appended to
// callsBuf), and those of other tasks left as they are.
func (l *Limiter) encodeEvents(h *Hold, evs []Event, now time.Time, callsBuf [][]byte) (events, calls [][]byte, other []Event, err error) {
	t, calls := h.task, callsBuf
	var buf []byte // made for the first event that is not Encoded
	for i := range evs {
		if e := &evs[i]; e.Encoded != nil && (e.Task == "" || e.Task == t.Key) {
			// Encoded already: what it holds is what goes (no copy of the Event).
			js := e.Encoded[:len(e.Encoded):len(e.Encoded)]
			if logOf(e.Kind) == logCalls {
				calls = append(calls, js)
			} else {
				events = append(events, js)
			}
			continue
		}
		ev := l.fillEvent(evs[i], now)
		if ev.Task == "" {
			ev.Task = t.Key
		}
		if ev.RequestID == "" {
			ev.RequestID = h.requestID
		}
		if ev.Task != t.Key {
			other = append(other, ev)
			continue
		}
		js := ev.Encoded[:len(ev.Encoded):len(ev.Encoded)]
		if ev.Encoded == nil {
			if buf == nil {
				buf = make([]byte, 0, 640*len(evs))
			}
			start := len(buf)
			if buf, err = appendEvent(buf, &ev); err != nil {
				return nil, nil, nil, fmt.Errorf("encode event: %w", err)
			}
			js = buf[start:len(buf):len(buf)] // earlier slices keep the bytes they hold if buf grows
		}
		if logOf(ev.Kind) == logCalls {
			calls = append(calls, js)
		} else {
			events = append(events, js)
		}
	}
	return events, calls, other, nil
}

// holdWins fills op.wins with the hold's windows whose keys still live and
// returns, for each, its position in h.wins.
func holdWins(h *Hold, now time.Time, op *settleOp) []int {
	op.wins = make([]settleWin, 0, len(h.wins))
	winOf := make([]int, 0, len(h.wins))
	for i, w := range h.wins {
		ttl := settleTTL(now, w.end)
		if ttl == 0 {
			continue
		}
		op.wins = append(op.wins, settleWin{idx: w.idx, stamp: w.stamp, ttl: ttl, limit: w.limit})
		winOf = append(winOf, i)
	}
	return winOf
}

// settleStore runs a settleOp for hold h: in the store, or locally while
// degraded (the usage then waits to be added into the store). winOf maps
// op.wins back to h.wins, for the crossings.
func (l *Limiter) settleStore(ctx context.Context, h *Hold, op *settleOp, winOf []int) (SettleResult, error) {
	var (
		rep settleReply
		err error
	)
	switch {
	case h.local:
		rep, err = l.local.settle(ctx, op)
		if err == nil {
			l.addPending(op.task, op.deltas(), op.pendingEvents(), "")
		}
	case l.degraded.Load():
		// The hold is in the store: released when the counts are added.
		l.addPending(op.task, op.deltas(), op.pendingEvents(), op.holdID)
	default:
		rep, err = l.store.settle(ctx, op)
		if err != nil && l.failOpen && ctx.Err() == nil {
			l.enterDegraded()
			l.addPending(op.task, op.deltas(), op.pendingEvents(), op.holdID)
			rep, err = settleReply{}, nil
		}
	}
	if err != nil {
		return SettleResult{}, err
	}
	res := SettleResult{FlagsToday: rep.flags}
	for _, c := range rep.crossings {
		w := h.wins[winOf[c.win]]
		cr := Crossing{
			Task: h.task.Key, Scope: winScope(w.idx), Unit: winUnitName(w.idx), Period: winPeriodName(w.idx),
			Threshold: op.thresholds[c.threshold], Used: c.used, Limit: w.limit, WindowEnd: w.end,
		}
		if winIsUser(w.idx) {
			cr.User = h.user
		}
		res.Crossings = append(res.Crossings, cr)
	}
	return res, nil
}

// deltas is the usage a settleOp adds, as deltas for reconciliation.
func (op *settleOp) deltas() []delta {
	ds := make([]delta, 0, len(op.wins))
	now := time.UnixMilli(op.now)
	for _, w := range op.wins {
		a := op.actual(winUnit(w.idx))
		if a == 0 {
			continue
		}
		ds = append(ds, delta{user: op.user, idx: w.idx, stamp: w.stamp, amount: a,
			expire: now.Add(time.Duration(w.ttl) * time.Millisecond)})
	}
	return ds
}

func (l *Limiter) fillEvent(ev Event, now time.Time) Event {
	if ev.Time.IsZero() {
		ev.Time = now.UTC()
	}
	return ev
}

// WindowUsage is one window's counts, for the admin API.
type WindowUsage struct {
	Scope, Unit, Period string
	Used, Reserved      int64
	Limit               int64
	Reset               time.Time // the window's end
}

// Usage lists every window of t that has a limit (from config or an
// override) with its counts now; user windows only when user != "".
// Expired holds of the task are released first.
func (l *Limiter) Usage(ctx context.Context, t *tasks.Task, user string) ([]WindowUsage, error) {
	// Leases of this replica end first, so that what their calls used so
	// far shows as used (other replicas' leases show as reserved).
	l.endLeases(t.Key, true)
	now := l.now()
	pw := l.windows.get(now, l.loc)
	op := reserveOp{task: t.Key, user: user, userLimits: t.UserLimits, peek: true,
		now: now.UnixMilli(), limits: configLimits(t, user)}
	for i := range pw {
		op.stamps[i] = pw[i].stamp
	}
	rep, err := l.store.reserve(ctx, &op)
	if err != nil {
		return nil, fmt.Errorf("usage of %s: %w", t.Key, err)
	}
	out := make([]WindowUsage, 0, len(rep.windows))
	for _, w := range rep.windows {
		out = append(out, WindowUsage{
			Scope: winScope(w.idx), Unit: winUnitName(w.idx), Period: winPeriodName(w.idx),
			Used: w.used, Reserved: w.reserved, Limit: w.limit, Reset: pw[winPeriod(w.idx)].end,
		})
	}
	return out, nil
}

// EffectiveLimit is a limit in force and where it comes from.
type EffectiveLimit struct {
	config.Limit
	Source string // "config" or "override"
}

// EffectiveLimits lists t's limits in force, in canonical order: each
// override over the config's limit for that window.
func (l *Limiter) EffectiveLimits(ctx context.Context, t *tasks.Task) ([]EffectiveLimit, error) {
	ov, err := l.store.overrides(ctx, t.Key)
	if err != nil {
		return nil, fmt.Errorf("limits of %s: %w", t.Key, err)
	}
	var lim [nWindows]*EffectiveLimit
	for _, a := range configLimits(t, "-") {
		lim[a.idx] = &EffectiveLimit{Limit: limitOf(a.idx, a.value), Source: "config"}
	}
	for idx, v := range ov {
		if winIsUser(idx) && !t.UserLimits {
			continue
		}
		lim[idx] = &EffectiveLimit{Limit: limitOf(idx, v), Source: "override"}
	}
	var out []EffectiveLimit
	for _, e := range lim {
		if e != nil {
			out = append(out, *e)
		}
	}
	return out, nil
}

func limitOf(idx int, v int64) config.Limit {
	return config.Limit{Scope: winScope(idx), Unit: winUnitName(idx), Period: winPeriodName(idx), Value: v}
}

// SetOverrides gives each window named in lim that limit, over the config's
// and any earlier override; other windows keep theirs. User windows on a task
// with user_limits: false are refused with ErrUserLimitsOff (nothing is set).
func (l *Limiter) SetOverrides(ctx context.Context, t *tasks.Task, lim config.Limits) error {
	vals := map[int]int64{}
	for _, x := range lim.List() {
		idx, ok := winIndex(x.Scope, x.Unit, x.Period)
		if !ok {
			return fmt.Errorf("set limits of %s: unknown window %s %s %s", t.Key, x.Scope, x.Unit, x.Period)
		}
		if winIsUser(idx) && !t.UserLimits {
			return fmt.Errorf("set limits of %s: %w", t.Key, ErrUserLimitsOff)
		}
		if x.Value < 0 {
			return fmt.Errorf("set limits of %s: %s %s %s is negative", t.Key, x.Scope, x.Unit, x.Period)
		}
		vals[idx] = x.Value
	}
	if err := l.store.setOverrides(ctx, t.Key, vals); err != nil {
		return fmt.Errorf("set limits of %s: %w", t.Key, err)
	}
	return nil
}

// ClearOverrides drops every override of a task.
func (l *Limiter) ClearOverrides(ctx context.Context, task string) error {
	if err := l.store.clearOverrides(ctx, task); err != nil {
		return fmt.Errorf("clear limits of %s: %w", task, err)
	}
	return nil
}

func marshalBlock(b Block) ([]byte, int64, error) {
	js, err := json.Marshal(b)
	if err != nil {
		return nil, 0, fmt.Errorf("encode block: %w", err)
	}
	var exp int64
	if b.Expires != nil {
		exp = max(b.Expires.UnixMilli(), 1)
	}
	return js, exp, nil
}

// PutBlock blocks b.User in b.Group ("*": everywhere) until b.Expires
// (nil: until deleted). A zero Created is set to now. The caller records
// the block event (AddEvents) if it wants one.
func (l *Limiter) PutBlock(ctx context.Context, b Block) error {
	if b.User == "" || b.Group == "" {
		return errors.New("put block: user and group are required")
	}
	if b.Created.IsZero() {
		b.Created = l.now().UTC()
	}
	if err := l.store.putBlock(ctx, b, "", nil); err != nil {
		return fmt.Errorf("put block of %s in %s: %w", b.User, b.Group, err)
	}
	return nil
}

// DeleteBlock lifts the block of user in group; false when there was none.
func (l *Limiter) DeleteBlock(ctx context.Context, user, group string) (bool, error) {
	ok, err := l.store.deleteBlock(ctx, user, group)
	if err != nil {
		return false, fmt.Errorf("delete block of %s in %s: %w", user, group, err)
	}
	return ok, nil
}

// Blocks lists the blocks in force (expired ones left out), by group then user.
func (l *Limiter) Blocks(ctx context.Context) ([]Block, error) {
	sb, err := l.store.blocks(ctx)
	if err != nil {
		return nil, fmt.Errorf("list blocks: %w", err)
	}
	now := l.now().UnixMilli()
	out := make([]Block, 0, len(sb))
	for _, s := range sb {
		if s.exp != 0 && s.exp <= now {
			continue
		}
		var b Block
		if err := json.Unmarshal(s.json, &b); err != nil {
			continue
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].User < out[j].User
	})
	return out, nil
}

// AddEvents appends events to their tasks' logs (each capped at the newest
// 1000: one log for the call journal, one for every other kind). A zero Time
// is set to now; events without a task go to the logs of task "".
func (l *Limiter) AddEvents(ctx context.Context, evs ...Event) error {
	if len(evs) == 0 {
		return nil
	}
	now := l.now()
	type logKey struct{ task, log string }
	byLog := map[logKey][][]byte{}
	var order []logKey
	for _, ev := range evs {
		ev = l.fillEvent(ev, now)
		js, err := appendEvent(nil, &ev)
		if err != nil {
			return fmt.Errorf("add events: encode: %w", err)
		}
		k := logKey{ev.Task, logOf(ev.Kind)}
		if _, ok := byLog[k]; !ok {
			order = append(order, k)
		}
		byLog[k] = append(byLog[k], js)
	}
	for _, k := range order {
		// While degraded, events wait to be added with the counts (the
		// store routes them to their logs by kind).
		if l.degraded.Load() {
			l.addPending(k.task, nil, byLog[k], "")
			continue
		}
		if err := l.store.addEvents(ctx, k.task, k.log, byLog[k]); err != nil {
			if l.failOpen && ctx.Err() == nil {
				l.enterDegraded()
				l.addPending(k.task, nil, byLog[k], "")
				continue
			}
			return fmt.Errorf("add events of %s: %w", k.task, err)
		}
	}
	return nil
}

// EventFilter selects events.
type EventFilter struct {
	// Tasks are the tasks whose logs are read ("" reads the log of events
	// without a task); none reads only that one.
	Tasks []string
	Kind  string    // "": every kind
	Since time.Time // zero: from the start of the log
	Limit int       // 0: no limit beyond the logs' caps
}

// Events lists events newest first.
func (l *Limiter) Events(ctx context.Context, f EventFilter) ([]Event, error) {
	ts := f.Tasks
	if len(ts) == 0 {
		ts = []string{""}
	}
	logs := []string{logSignals, logCalls}
	switch {
	case f.Kind == "call":
		logs = logs[1:]
	case f.Kind != "":
		logs = logs[:1]
	}
	var out []Event
	for _, task := range ts {
		// Events of this replica's leases wait for the lease's end: end them.
		l.endLeases(task, true)
		var raw [][]byte
		for _, log := range logs {
			r, err := l.store.events(ctx, task, log)
			if err != nil {
				return nil, fmt.Errorf("read events: %w", err)
			}
			raw = append(raw, r...)
		}
		for _, js := range raw {
			var ev Event
			if err := json.Unmarshal(js, &ev); err != nil {
				continue
			}
			if f.Kind != "" && ev.Kind != f.Kind {
				continue
			}
			if !f.Since.IsZero() && ev.Time.Before(f.Since) {
				continue
			}
			out = append(out, ev)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// Ping reports whether the store answers.
func (l *Limiter) Ping(ctx context.Context) error { return l.store.Ping(ctx) }

// Degraded reports whether calls are being served from local counts
// because the store is unreachable (fail_open only).
func (l *Limiter) Degraded() bool { return l.degraded.Load() }

// InProcess reports whether the store is the in-process one: Settle then
// makes no round trip and returns within microseconds, so a caller may
// settle inline instead of handing the work to another goroutine.
func (l *Limiter) InProcess() bool {
	_, ok := l.store.(*memoryStore)
	return ok
}

// Close stops the background reconciliation and closes the store.
func (l *Limiter) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
	l.closeLeases()
	return l.store.Close()
}
