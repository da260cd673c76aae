package proxy

import (
	"testing"
	"time"
)

// TestBreaker drives a breaker (trip 3, cooldown 1s) through steps on a
// fake clock and checks each step's answer, state and metric value.
func TestBreaker(t *testing.T) {
	type step struct {
		name    string
		advance time.Duration
		allow   bool // a try is asked for; its outcome is outcome (when it goes)
		outcome bool
		wantOK  bool
		state   breakerState
		metric  float64
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"successes keep it closed and reset the failures", []step{
			{name: "fail", allow: true, wantOK: true, state: breakerClosed},
			{name: "fail", allow: true, wantOK: true, state: breakerClosed},
			{name: "ok", allow: true, outcome: true, wantOK: true, state: breakerClosed},
			{name: "fail", allow: true, wantOK: true, state: breakerClosed},
			{name: "fail", allow: true, wantOK: true, state: breakerClosed},
		}},
		{"trip failures in a row open it; a failed probe opens it again; a good one closes it", []step{
			{name: "fail 1", allow: true, wantOK: true, state: breakerClosed},
			{name: "fail 2", allow: true, wantOK: true, state: breakerClosed},
			{name: "fail 3", allow: true, wantOK: true, state: breakerOpen, metric: 1},
			{name: "refused while cooling down", advance: 999 * time.Millisecond, allow: true, wantOK: false, state: breakerOpen, metric: 1},
			{name: "failed probe", advance: time.Millisecond, allow: true, wantOK: true, state: breakerOpen, metric: 1},
			{name: "cooldown from the new opening", advance: 500 * time.Millisecond, allow: true, wantOK: false, state: breakerOpen, metric: 1},
			{name: "good probe", advance: 500 * time.Millisecond, allow: true, outcome: true, wantOK: true, state: breakerClosed, metric: 0},
			{name: "closed again", allow: true, outcome: true, wantOK: true, state: breakerClosed},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			metric := 0.0
			b := newBreaker(3, time.Second, func(v float64) { metric = v })
			b.now = func() time.Time { return now }
			for i, s := range tt.steps {
				now = now.Add(s.advance)
				try, ok := b.allow()
				if ok != s.wantOK {
					t.Fatalf("step %d (%s): allow = %v, want %v", i, s.name, ok, s.wantOK)
				}
				if ok {
					b.done(try, s.outcome)
				}
				if b.state != s.state || metric != s.metric {
					t.Fatalf("step %d (%s): state %d metric %v, want %d and %v", i, s.name, b.state, metric, s.state, s.metric)
				}
			}
		})
	}
}

// TestBreakerHalfOpenLetsOneProbe checks that a half-open breaker lets one
// try through at a time, and that tries begun before a state change do
// not count after it.
func TestBreakerHalfOpenLetsOneProbe(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBreaker(2, time.Second, nil)
	b.now = func() time.Time { return now }
	slow, _ := b.allow() // a try of the closed breaker, still out when it opens
	for range 2 {
		try, _ := b.allow()
		b.done(try, false)
	}
	if b.state != breakerOpen {
		t.Fatalf("state %d after 2 failures, want open", b.state)
	}
	now = now.Add(time.Second)
	probe, ok := b.allow()
	if !ok {
		t.Fatal("no probe after the cooldown")
	}
	if _, ok := b.allow(); ok {
		t.Fatal("a second try went while the probe was out")
	}
	b.done(slow, true) // began closed: does not close the half-open breaker
	if b.state != breakerHalfOpen {
		t.Fatalf("state %d after a try begun closed ended well, want half-open", b.state)
	}
	b.done(probe, true)
	if b.state != breakerClosed {
		t.Fatalf("state %d after a good probe, want closed", b.state)
	}
}
