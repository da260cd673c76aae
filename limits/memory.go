package limits

import (
	"bytes"
	"context"
	"sync"
)

// memoryStore keeps everything in process memory, under one mutex: the
// in-process store of a single replica, and the local store that serves
// calls while a Redis store is unreachable under fail_open. Window counters
// are keyed by the parts of the Redis store's keys (no string is built a
// call), other keys are the Redis store's without a prefix, and expiry
// follows the clock the Limiter passes in, so both stores behave alike.
type memoryStore struct {
	mu       sync.Mutex
	counters map[memKey]*memCounter      // window → counts
	holds    map[holdKey][]memPart       // hold → what it reserved
	leases   map[string]map[string]int64 // task → hold id → lease end
	nextReap map[string]int64            // task → no lease ends before this
	ovs      map[string]map[int]int64
	ovVer    map[string]int64 // task → changes to its overrides
	blocksM  map[string]storedBlock
	eventsM  map[string][][]byte // task + "\x00" + log → events, oldest first
	flags    map[string]*memCounter
	cph      map[string][]int64 // base+user → call times (unix ms)
	claims   map[claimKey]int64 // threshold claim → expiry
	ops      int
}

type memCounter struct {
	u, r int64
	exp  int64 // unix ms; the counter is gone from then on
}

// memKey names a window's counter: the parts of its Redis key (user is ""
// for a task window).
type memKey struct {
	task, user, stamp string
	idx               int
}

// windowMemKey is the counter key of window idx of (task, user).
func windowMemKey(task, user string, idx int, stamp string) memKey {
	if !winIsUser(idx) {
		user = ""
	}
	return memKey{task: task, user: user, stamp: stamp, idx: idx}
}

// holdKey names a hold.
type holdKey struct{ task, id string }

// claimKey names a threshold claimed in a window.
type claimKey struct {
	win       memKey
	threshold float64
}

type memPart struct {
	key    memKey
	amount int64
}

// NewMemoryStore returns an in-process Store: counts live and die with the
// process and are not shared with other replicas.
func NewMemoryStore() Store { return newMemoryStore() }

func newMemoryStore() *memoryStore {
	return &memoryStore{
		counters: map[memKey]*memCounter{},
		holds:    map[holdKey][]memPart{},
		leases:   map[string]map[string]int64{},
		nextReap: map[string]int64{},
		ovs:      map[string]map[int]int64{},
		ovVer:    map[string]int64{},
		blocksM:  map[string]storedBlock{},
		eventsM:  map[string][][]byte{},
		flags:    map[string]*memCounter{},
		cph:      map[string][]int64{},
		claims:   map[claimKey]int64{},
	}
}

var _ Store = (*memoryStore)(nil)

func memBase(task string) string { return "{" + task + "}:" }

// Ping always succeeds.
func (s *memoryStore) Ping(context.Context) error { return nil }

// Close does nothing.
func (s *memoryStore) Close() error { return nil }

// counter returns the live counter at key, or nil.
func (s *memoryStore) counter(key memKey, now int64) *memCounter {
	c := s.counters[key]
	if c != nil && c.exp <= now {
		delete(s.counters, key)
		return nil
	}
	return c
}

// sweep drops expired entries now and then, so that memory stays bounded.
func (s *memoryStore) sweep(now int64) {
	s.ops++
	if s.ops%4096 != 0 {
		return
	}
	for k, c := range s.counters {
		if c.exp <= now {
			delete(s.counters, k)
		}
	}
	for k, c := range s.flags {
		if c.exp <= now {
			delete(s.flags, k)
		}
	}
	for k, exp := range s.claims {
		if exp <= now {
			delete(s.claims, k)
		}
	}
	for k, ts := range s.cph {
		if len(ts) == 0 || ts[len(ts)-1] <= now-3600000 {
			delete(s.cph, k)
		}
	}
}

// release takes a hold's amounts off its windows' reserved counts, where
// the windows still exist, and forgets the hold (s.mu held). The caller
// removes its lease entry.
func (s *memoryStore) release(task, id string, now int64) {
	hk := holdKey{task, id}
	for _, p := range s.holds[hk] {
		if c := s.counter(p.key, now); c != nil {
			c.r -= p.amount
		}
	}
	delete(s.holds, hk)
}

// reap releases the task's holds whose lease ended; it scans the holds only
// once the earliest lease end seen has passed.
func (s *memoryStore) reap(task string, now int64) {
	if next, ok := s.nextReap[task]; !ok || now < next {
		return
	}
	next := int64(1<<63 - 1)
	for id, until := range s.leases[task] {
		if until > now {
			next = min(next, until)
			continue
		}
		s.release(task, id, now)
		delete(s.leases[task], id)
	}
	if len(s.leases[task]) == 0 {
		delete(s.nextReap, task)
		return
	}
	s.nextReap[task] = next
}

func (s *memoryStore) reserve(_ context.Context, op *reserveOp) (reserveReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(op.now)
	s.reap(op.task, op.now)
	if !op.peek && op.user != "" {
		if b, ok := s.activeBlock(op.group, op.user, op.now); ok {
			return reserveReply{status: statusBlocked, block: b.json}, nil
		}
	}
	var lim [nWindows]int64
	var has, ov [nWindows]bool
	for _, l := range op.limits {
		lim[l.idx], has[l.idx] = l.value, true
	}
	for idx, v := range s.ovs[op.task] {
		if !winIsUser(idx) || op.userLimits {
			lim[idx], has[idx], ov[idx] = v, true, true
		}
	}
	n := 0
	for idx := range has {
		if has[idx] {
			n++
		}
	}
	rep := reserveReply{status: statusOK, windows: make([]winState, 0, n)}
	var keys [nWindows]memKey
	var ctrs [nWindows]*memCounter // found by the check, so as not to look them up again
	for idx := 0; idx < nWindows; idx++ {
		if !has[idx] || (winIsUser(idx) && op.user == "") {
			continue
		}
		k := windowMemKey(op.task, op.user, idx, op.stamps[winPeriod(idx)])
		keys[idx] = k
		w := winState{idx: idx, limit: lim[idx], override: ov[idx]}
		if c := s.counter(k, op.now); c != nil {
			w.used, w.reserved = c.u, c.r
			ctrs[idx] = c
		}
		if w.limit <= 0 || w.used+w.reserved+op.amount(winUnit(idx)) > w.limit {
			rep.status = statusRefused
		}
		rep.windows = append(rep.windows, w)
	}
	if op.peek {
		rep.status = statusOK
		return rep, nil
	}
	if rep.status == statusRefused {
		return rep, nil
	}
	parts := make([]memPart, 0, len(rep.windows))
	for _, w := range rep.windows {
		k := keys[w.idx]
		exp := op.now + op.ttls[winPeriod(w.idx)]
		c := ctrs[w.idx]
		a := op.amount(winUnit(w.idx))
		if c == nil {
			if a == 0 {
				continue
			}
			c = &memCounter{}
			s.counters[k] = c
		}
		c.exp = exp
		if a != 0 {
			c.r += a
			parts = append(parts, memPart{k, a})
		}
	}
	if len(parts) > 0 {
		s.holds[holdKey{op.task, op.holdID}] = parts
		if s.leases[op.task] == nil {
			s.leases[op.task] = map[string]int64{}
		}
		s.leases[op.task][op.holdID] = op.leaseUntil
		if next, ok := s.nextReap[op.task]; !ok || op.leaseUntil < next {
			s.nextReap[op.task] = op.leaseUntil
		}
	}
	if op.cph && op.user != "" {
		k := memBase(op.task) + "cph:" + op.user
		ts := s.cph[k]
		i := 0
		for i < len(ts) && ts[i] <= op.now-3600000 {
			i++
		}
		if i > 0 {
			ts = append(ts[:0], ts[i:]...)
		}
		ts = append(ts, op.now)
		for j := len(ts) - 1; j > 0 && ts[j] < ts[j-1]; j-- { // calls may arrive out of order
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
		s.cph[k] = ts
		rep.calls = int64(len(ts))
	}
	return rep, nil
}

func (s *memoryStore) settle(_ context.Context, op *settleOp) (settleReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(op.now)
	var rep settleReply
	if op.holdID != "" {
		hk := holdKey{op.task, op.holdID}
		if _, ok := s.holds[hk]; ok {
			rep.found = true
			delete(s.holds, hk)
			delete(s.leases[op.task], op.holdID)
		}
	}
	for i, w := range op.wins {
		u := winUnit(w.idx)
		k := windowMemKey(op.task, op.user, w.idx, w.stamp)
		c := s.counter(k, op.now)
		if rep.found && c != nil {
			c.r -= op.reserved(u)
		}
		var before int64
		if c != nil {
			before = c.u
		}
		after := before
		if a := op.actual(u); a != 0 {
			if c == nil {
				c = &memCounter{}
				s.counters[k] = c
			}
			c.u += a
			c.exp = op.now + w.ttl
			after = c.u
		}
		if w.limit <= 0 {
			continue
		}
		for j, th := range op.thresholds {
			t := th * float64(w.limit)
			if float64(before) < t && float64(after) >= t {
				ck := claimKey{k, th}
				if exp, ok := s.claims[ck]; ok && exp > op.now {
					continue
				}
				s.claims[ck] = op.now + w.ttl
				rep.crossings = append(rep.crossings, crossingRaw{win: i, threshold: j, used: after})
			}
		}
	}
	if op.flagKey != "" {
		k := memBase(op.task) + op.flagKey
		c := s.flags[k]
		if c == nil || c.exp <= op.now {
			c = &memCounter{}
			s.flags[k] = c
		}
		c.u++
		c.exp = op.now + op.flagTTL
		rep.flags = c.u
	}
	s.appendEvents(op.task, logSignals, op.events)
	s.appendEvents(op.task, logCalls, op.calls)
	return rep, nil
}

func (s *memoryStore) appendEvents(task, log string, evs [][]byte) {
	if len(evs) == 0 {
		return
	}
	key := task + "\x00" + log
	l := append(s.eventsM[key], evs...)
	if len(l) > eventCap {
		// Drop the oldest in place; the backing array is reused until
		// appends run off its end, so a full log costs O(1) an event.
		l = l[len(l)-eventCap:]
	}
	s.eventsM[key] = l
}

func (s *memoryStore) overrides(_ context.Context, task string) (map[int]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]int64, len(s.ovs[task]))
	for k, v := range s.ovs[task] {
		out[k] = v
	}
	return out, nil
}

func (s *memoryStore) setOverrides(_ context.Context, task string, vals map[int]int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.ovs[task]
	if m == nil {
		m = map[int]int64{}
		s.ovs[task] = m
	}
	for k, v := range vals {
		m[k] = v
	}
	s.ovVer[task]++
	return nil
}

func (s *memoryStore) clearOverrides(_ context.Context, task string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ovs, task)
	s.ovVer[task]++
	return nil
}

func (s *memoryStore) check(_ context.Context, op checkOp) (checkReply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := checkReply{version: s.ovVer[op.task]}
	if op.user != "" {
		if b, ok := s.activeBlock(op.group, op.user, op.now); ok {
			rep.block = b.json
		}
	}
	return rep, nil
}

// activeBlock is the block in force at now of user in group or in "*"
// (s.mu held). The fields are built in a stack buffer, so a lookup
// allocates nothing.
func (s *memoryStore) activeBlock(group, user string, now int64) (storedBlock, bool) {
	var buf [128]byte
	for _, g := range [2]string{group, "*"} {
		f := append(append(append(buf[:0], g...), 0), user...)
		if b, ok := s.blocksM[string(f)]; ok && (b.exp == 0 || b.exp > now) {
			return b, true
		}
	}
	return storedBlock{}, false
}

func (s *memoryStore) putBlock(_ context.Context, b Block, evTask string, ev []byte) error {
	js, exp, err := marshalBlock(b)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blocksM[blockField(b.Group, b.User)] = storedBlock{exp: exp, json: js}
	if ev != nil {
		s.appendEvents(evTask, logSignals, [][]byte{ev})
	}
	return nil
}

func (s *memoryStore) deleteBlock(_ context.Context, user, group string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := blockField(group, user)
	_, ok := s.blocksM[f]
	delete(s.blocksM, f)
	return ok, nil
}

func (s *memoryStore) blocks(context.Context) ([]storedBlock, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]storedBlock, 0, len(s.blocksM))
	for _, b := range s.blocksM {
		out = append(out, b)
	}
	return out, nil
}

func (s *memoryStore) addEvents(_ context.Context, task, log string, evs [][]byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appendEvents(task, log, evs)
	return nil
}

func (s *memoryStore) events(_ context.Context, task, log string) ([][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.eventsM[task+"\x00"+log]
	out := make([][]byte, len(l))
	for i, e := range l {
		out[len(l)-1-i] = e
	}
	return out, nil
}

func (s *memoryStore) apply(_ context.Context, task string, now int64, ds []delta, evs [][]byte, holds []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range ds {
		exp := d.expire.UnixMilli()
		if exp <= now {
			continue
		}
		k := windowMemKey(task, d.user, d.idx, d.stamp)
		c := s.counter(k, now)
		if c == nil {
			c = &memCounter{}
			s.counters[k] = c
		}
		c.u += d.amount
		c.exp = exp
	}
	for _, ev := range evs {
		log := logSignals
		if bytes.Contains(ev, []byte(`"kind":"call"`)) {
			log = logCalls
		}
		s.appendEvents(task, log, [][]byte{ev})
	}
	for _, id := range holds {
		s.release(task, id, now)
		delete(s.leases[task], id)
	}
	return nil
}
