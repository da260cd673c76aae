package proxy

import (
	"testing"
	"time"
)

// TestAppendResetMatchesDurationString checks the x-ratelimit-reset-*
// rendering against time.Duration.String of the duration rounded up to the
// second (at least one second).
func TestAppendResetMatchesDurationString(t *testing.T) {
	ds := []time.Duration{-time.Second, 0, 1, time.Millisecond, 999 * time.Millisecond, time.Second,
		time.Second + 1, 59 * time.Second, time.Minute, time.Minute + time.Nanosecond, 6 * time.Minute,
		time.Hour - 1, time.Hour, 20*time.Hour + 4*time.Minute + 3*time.Second, 31 * 24 * time.Hour}
	for s := time.Duration(0); s < 3*time.Hour; s += 7*time.Second + 3*time.Millisecond {
		ds = append(ds, s)
	}
	for _, d := range ds {
		want := (max(d, time.Second) + time.Second - 1).Truncate(time.Second).String()
		if got := string(appendReset(nil, d)); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}
