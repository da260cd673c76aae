package proxy

import (
	"sync"
	"time"
)

// breaker is an endpoint's circuit breaker. Closed, it lets every try
// through and opens after trip failures in a row; open, it refuses tries
// until cooldown has passed since it opened; then half-open, it lets one
// try (the probe) through, whose success closes it and whose failure opens
// it again. A try's outcome counts only in the state it began in. These
// are the semantics of sony/gobreaker's TwoStepCircuitBreaker with
// MaxRequests 1 and no Interval, without its allocation and two clock
// reads on every try.
type breaker struct {
	trip     int
	cooldown time.Duration
	onState  func(v float64) // the state as the metric gives it: 1 open, 0.5 half-open, 0 closed
	now      func() time.Time

	mu       sync.Mutex
	state    breakerState
	failures int       // in a row, while closed
	opened   time.Time // when it last opened
	probing  bool      // half-open: the probe is out
	gen      uint64    // counts state changes: a try of an earlier state does not count
}

type breakerState int

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

func newBreaker(trip int, cooldown time.Duration, onState func(float64)) *breaker {
	return &breaker{trip: max(trip, 1), cooldown: cooldown, onState: onState, now: time.Now}
}

// allow reports whether a try may go; try identifies it for done.
func (b *breaker) allow() (try uint64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerOpen:
		if b.now().Sub(b.opened) < b.cooldown {
			return 0, false
		}
		b.set(breakerHalfOpen)
		fallthrough
	case breakerHalfOpen:
		if b.probing {
			return 0, false
		}
		b.probing = true
	}
	return b.gen, true
}

// done records the outcome of a try allow let through.
func (b *breaker) done(try uint64, success bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if try != b.gen {
		return
	}
	switch b.state {
	case breakerClosed:
		if success {
			b.failures = 0
		} else if b.failures++; b.failures >= b.trip {
			b.set(breakerOpen)
		}
	case breakerHalfOpen:
		if success {
			b.set(breakerClosed)
		} else {
			b.set(breakerOpen)
		}
	}
}

// set changes the state (b.mu held).
func (b *breaker) set(s breakerState) {
	b.state, b.gen, b.failures, b.probing = s, b.gen+1, 0, false
	v := 0.0
	switch s {
	case breakerOpen:
		b.opened, v = b.now(), 1
	case breakerHalfOpen:
		v = 0.5
	}
	if b.onState != nil {
		b.onState(v)
	}
}
