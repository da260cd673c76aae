package limits

import (
	"context"
	"time"
)

// pendingTask is what was counted locally for one task while the store was
// unreachable, waiting to be added into the store.
type pendingTask struct {
	ds    map[deltaKey]*delta
	evs   [][]byte // oldest first
	holds []string // store holds whose settlement did not reach the store: released with the counts
}

type deltaKey struct {
	user  string
	idx   int
	stamp string
}

const (
	recoverMin = 50 * time.Millisecond
	recoverMax = 5 * time.Second
)

// enterDegraded switches Reserve to the local store and starts the loop that
// waits for the store to answer again.
func (l *Limiter) enterDegraded() {
	l.degraded.Store(true)
	l.startLoop()
}

// addPending remembers usage and events to add into the store later, and
// the store's hold (if not "") that the settlement of that usage should
// have released.
func (l *Limiter) addPending(task string, ds []delta, evs [][]byte, hold string) {
	if len(ds) == 0 && len(evs) == 0 && hold == "" {
		return
	}
	l.mu.Lock()
	p := l.pending[task]
	if p == nil {
		p = &pendingTask{ds: map[deltaKey]*delta{}}
		l.pending[task] = p
	}
	for _, d := range ds {
		k := deltaKey{d.user, d.idx, d.stamp}
		if cur := p.ds[k]; cur != nil {
			cur.amount += d.amount
			if d.expire.After(cur.expire) {
				cur.expire = d.expire
			}
		} else {
			dd := d
			p.ds[k] = &dd
		}
	}
	p.evs = append(p.evs, evs...)
	if hold != "" {
		p.holds = append(p.holds, hold)
	}
	l.mu.Unlock()
	l.startLoop()
}

func (l *Limiter) startLoop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loopOn || l.closed {
		return
	}
	l.loopOn = true
	l.wg.Add(1)
	go l.recoverLoop()
}

// recoverLoop pings the store with backoff; once it answers, it adds the
// pending counts into it and leaves degraded mode. It keeps running while
// holds made locally are still open (their settlements add more).
func (l *Limiter) recoverLoop() {
	defer l.wg.Done()
	backoff := recoverMin
	timer := time.NewTimer(backoff)
	defer timer.Stop()
	for {
		select {
		case <-l.stop:
			l.mu.Lock()
			l.loopOn = false
			l.mu.Unlock()
			return
		case <-timer.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := l.store.Ping(ctx)
		if err == nil {
			err = l.flush(ctx)
		}
		cancel()
		if err != nil {
			backoff = min(backoff*2, recoverMax)
			timer.Reset(backoff)
			continue
		}
		backoff = recoverMin
		l.degraded.Store(false)
		l.mu.Lock()
		if len(l.pending) == 0 && l.localHolds.Load() == 0 {
			l.loopOn = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		timer.Reset(backoff)
	}
}

// flush adds every pending count into the store, one atomic script per
// task; what fails stays pending.
func (l *Limiter) flush(ctx context.Context) error {
	l.mu.Lock()
	work := l.pending
	l.pending = map[string]*pendingTask{}
	l.mu.Unlock()
	now := l.now().UnixMilli()
	var first error
	for task, p := range work {
		ds := make([]delta, 0, len(p.ds))
		for _, d := range p.ds {
			ds = append(ds, *d)
		}
		if err := l.store.apply(ctx, task, now, ds, p.evs, p.holds); err != nil {
			if first == nil {
				first = err
			}
			l.mu.Lock()
			if cur := l.pending[task]; cur != nil {
				for k, d := range cur.ds {
					if old := p.ds[k]; old != nil {
						old.amount += d.amount
					} else {
						p.ds[k] = d
					}
				}
				p.evs = append(p.evs, cur.evs...)
				p.holds = append(p.holds, cur.holds...)
			}
			l.pending[task] = p
			l.mu.Unlock()
		}
	}
	return first
}

// Flush adds counts made while the store was unreachable into the store
// now, instead of waiting for the background loop (for shutdown and tests).
func (l *Limiter) Flush(ctx context.Context) error { return l.flush(ctx) }
