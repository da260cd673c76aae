package limits

import (
	"context"
	"strconv"
	"sync"
	"time"

	"taskgate/config"
)

// Store keeps the counts, holds, overrides, blocks and events that every
// replica shares. NewMemoryStore and NewRedisStore make the two
// implementations; both pass the same conformance suite. The interface is
// sealed (its operations are unexported) so that the Limiter alone decides
// what is counted.
type Store interface {
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
	// Close releases the store's connections.
	Close() error

	reserve(ctx context.Context, op *reserveOp) (reserveReply, error)
	check(ctx context.Context, op checkOp) (checkReply, error)
	settle(ctx context.Context, op *settleOp) (settleReply, error)
	overrides(ctx context.Context, task string) (map[int]int64, error)
	setOverrides(ctx context.Context, task string, vals map[int]int64) error
	clearOverrides(ctx context.Context, task string) error
	putBlock(ctx context.Context, b Block, evTask string, ev []byte) error
	deleteBlock(ctx context.Context, user, group string) (bool, error)
	blocks(ctx context.Context) ([]storedBlock, error)
	addEvents(ctx context.Context, task, log string, evs [][]byte) error
	events(ctx context.Context, task, log string) ([][]byte, error)
	apply(ctx context.Context, task string, now int64, ds []delta, evs [][]byte, holds []string) error
}

// A task has two capped logs: logSignals for anomalies, flags, blocks and
// threshold crossings, and logCalls for the call journal, so that a busy
// task's calls never push its rarer signals out.
const (
	logSignals = "events"
	logCalls   = "calls"
)

// logOf names the log an event of the given kind goes to.
func logOf(kind string) string {
	if kind == "call" {
		return logCalls
	}
	return logSignals
}

// eventCap is how many events each of a task's logs keeps (the newest).
const eventCap = 1000

// Window indexes: scope*12 + unit*4 + period, in the canonical order of
// config.ScopeNames, config.UnitNames and config.PeriodNames.
const (
	nWindows = 24
	nPeriods = 4

	unitRequests = 0
	unitTokens   = 1
	unitMoney    = 2
)

// winIDs are the window ids used as override fields and inside keys.
var winIDs = func() [nWindows]string {
	var ids [nWindows]string
	for s, sn := range []string{"t", "u"} {
		for u, un := range config.UnitNames {
			for p, pn := range config.PeriodNames {
				ids[s*12+u*4+p] = sn + ":" + un + ":" + pn
			}
		}
	}
	return ids
}()

func winScope(i int) string      { return config.ScopeNames[i/12] }
func winUnit(i int) int          { return (i / 4) % 3 }
func winPeriod(i int) int        { return i % 4 }
func winIsUser(i int) bool       { return i >= 12 }
func winUnitName(i int) string   { return config.UnitNames[winUnit(i)] }
func winPeriodName(i int) string { return config.PeriodNames[winPeriod(i)] }

// winIndex returns the index of a (scope, unit, period) window.
func winIndex(scope, unit, period string) (int, bool) {
	s, u, p := indexOf(config.ScopeNames, scope), indexOf(config.UnitNames, unit), indexOf(config.PeriodNames, period)
	if s < 0 || u < 0 || p < 0 {
		return 0, false
	}
	return s*12 + u*4 + p, true
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// idIndex maps a window id ("t:tokens:day") back to its index.
var idIndex = func() map[string]int {
	m := make(map[string]int, nWindows)
	for i, id := range winIDs {
		m[id] = i
	}
	return m
}()

// windowKey is a window's counter key below base ("<prefix>{<task>}:"):
// <base>t:tokens:day:2026-11-30 or <base>u:<user>:tokens:day:2026-11-30.
// The Lua scripts build the same keys (common.lua, wkey).
func windowKey(base, user string, idx int, stamp string) string {
	if !winIsUser(idx) {
		return base + winIDs[idx] + ":" + stamp
	}
	return base + "u:" + user + winIDs[idx][1:] + ":" + stamp
}

// blockField is a block's field in the blocks hash: group NUL user.
func blockField(group, user string) string { return group + "\x00" + user }

// versionField is the field of the blocks hash that counts the changes to
// a task's overrides (NUL first: no block's group is empty), so that one
// read of that hash tells a leased call both whether its user is blocked
// and whether the limits its lease was granted under still hold.
func versionField(task string) string { return "\x00ov:" + task }

// checkOp is the per-call check of a call served from a lease: the blocks
// of its user (when there is one) and its task's overrides version.
type checkOp struct {
	task, user, group string
	now               int64 // unix ms
	// fields, when set, are checkFields already built (a lease scope keeps
	// them, so that a call builds no string).
	fields []string
}

// checkFields are the fields of the blocks hash a check reads: the task's
// overrides version, then (with a user) the user's blocks in the task's
// group and in "*".
func (op *checkOp) checkFields() []string {
	if op.fields != nil {
		return op.fields
	}
	if op.user == "" {
		return []string{versionField(op.task)}
	}
	return []string{versionField(op.task), blockField(op.group, op.user), blockField("*", op.user)}
}

// checkReply is a store's answer to a checkOp.
type checkReply struct {
	block   []byte // the block's JSON when the user is blocked
	version int64  // changes to the task's overrides so far
}

// storedBlock is a block as kept: its expiry in unix ms (0: never) and JSON.
type storedBlock struct {
	exp  int64
	json []byte
}

// encodeBlockValue renders a block as the blocks hash keeps it:
// "<expiry unix ms, 0 for never>|<json>".
func encodeBlockValue(exp int64, js []byte) string {
	return strconv.FormatInt(exp, 10) + "|" + string(js)
}

// limitArg is one config limit passed into a reserve.
type limitArg struct {
	idx   int
	value int64
}

// reserveOp is one reservation (or, with peek, one read of a task's
// windows) as the Limiter hands it to a store.
type reserveOp struct {
	task, user string
	userLimits bool
	peek       bool
	group      string // block group of the task
	now        int64  // unix ms
	leaseUntil int64  // unix ms
	holdID     string
	requests   int64 // 1 for a call; a lease reserves more
	lease      bool  // the reservation is a lease (counted in each window's leased amount)
	tokens     int64
	money      int64
	cph        bool // keep the sliding-hour call count
	stamps     [nPeriods]string
	ttls       [nPeriods]int64 // ms; set by setTTLs before the op goes to a store
	limits     []limitArg      // config limits that apply (user ones only with a user)
}

// amount is what the op adds to a window of unit u.
func (op *reserveOp) amount(u int) int64 {
	switch u {
	case unitRequests:
		return op.requests
	case unitTokens:
		return op.tokens
	}
	return op.money
}

// winState is one window as a store found it, before this call.
type winState struct {
	idx                   int
	limit, used, reserved int64
	leased                int64 // reserved by leases; read only on a refusal
	override              bool
}

// reserveReply is a store's answer to a reserveOp.
type reserveReply struct {
	status  int    // statusOK, statusBlocked or statusRefused
	block   []byte // the block's JSON when blocked
	calls   int64  // sliding-hour calls including this one (when op.cph)
	windows []winState
}

const (
	statusOK      = 0
	statusBlocked = 1
	statusRefused = 2
)

// settleWin is one window of a hold being settled.
type settleWin struct {
	idx   int
	stamp string
	ttl   int64 // ms; > 0
	limit int64
}

// settleOp settles one hold.
type settleOp struct {
	task, user string
	holdID     string
	now        int64
	// resRequests and actRequests are the requests reserved and made: 1
	// and 1 for a call; a lease settles many calls at once.
	resRequests int64
	actRequests int64
	lease       bool // the hold is a lease
	resTokens   int64
	resMoney    int64
	actTokens   int64
	actMoney    int64
	wins        []settleWin
	thresholds  []float64
	flagKey     string // "" : no flag; else the key below base
	flagTTL     int64
	events      [][]byte // for logSignals
	calls       [][]byte // for logCalls
}

// pendingEvents is every event of the settlement, for counts kept while
// the store is unreachable (apply sends each to its log by kind).
func (op *settleOp) pendingEvents() [][]byte {
	if len(op.calls) == 0 {
		return op.events
	}
	return append(append(make([][]byte, 0, len(op.events)+len(op.calls)), op.events...), op.calls...)
}

func (op *settleOp) reserved(u int) int64 {
	switch u {
	case unitRequests:
		return op.resRequests
	case unitTokens:
		return op.resTokens
	}
	return op.resMoney
}

func (op *settleOp) actual(u int) int64 {
	switch u {
	case unitRequests:
		return op.actRequests
	case unitTokens:
		return op.actTokens
	}
	return op.actMoney
}

// crossingRaw is a threshold crossing claimed by a settle: the position of
// the window in settleOp.wins and of the threshold in settleOp.thresholds.
type crossingRaw struct {
	win, threshold int
	used           int64
}

// settleReply is a store's answer to a settleOp.
type settleReply struct {
	found     bool
	flags     int64
	crossings []crossingRaw
}

// delta is usage counted while the store was unreachable, to be added later.
type delta struct {
	user   string
	idx    int
	stamp  string
	amount int64
	expire time.Time // when the window's key may go
}

// flagKey is the key (below base) of a user's flag count for one day.
func flagKey(user, dayStamp string) string { return "flags:" + user + ":" + dayStamp }

// formatThreshold renders a threshold as it appears in claim keys. The
// few thresholds configs use are formatted once and remembered.
func formatThreshold(t float64) string {
	thresholdMu.RLock()
	s, ok := thresholdStr[t]
	thresholdMu.RUnlock()
	if ok {
		return s
	}
	s = strconv.FormatFloat(t, 'g', -1, 64)
	thresholdMu.Lock()
	if len(thresholdStr) < 1024 {
		thresholdStr[t] = s
	}
	thresholdMu.Unlock()
	return s
}

var (
	thresholdMu  sync.RWMutex
	thresholdStr = map[float64]string{}
)

// setTTLs sets the TTLs the op's window keys get (per period, with jitter).
func (op *reserveOp) setTTLs(now time.Time, pw *[nPeriods]periodWin) {
	for i := range pw {
		op.ttls[i] = keyTTL(now, pw[i].end)
	}
}
