package limits

import (
	"testing"
	"time"
)

func TestCurrentWindows(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	kol := mustLoad(t, "Asia/Kolkata")
	// 2026-11-01 01:30 happens twice in New York: EDT (-4) then EST (-5).
	firstHalf := time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)
	secondHalf := time.Date(2026, 11, 1, 6, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		now   time.Time
		loc   *time.Location
		stamp [nPeriods]string
		ends  [nPeriods]time.Time
	}{
		{"utc", time.Date(2026, 11, 30, 23, 59, 59, 999e6, time.UTC), time.UTC,
			[nPeriods]string{"2026-11-30T23:59Z", "2026-11-30T23:00Z", "2026-11-30", "2026-11"},
			[nPeriods]time.Time{time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
				time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}},
		{"kolkata half-hour offset", time.Date(2026, 5, 4, 4, 45, 10, 0, time.UTC), kol,
			[nPeriods]string{"2026-05-04T10:15+0530", "2026-05-04T10:00+0530", "2026-05-04", "2026-05"},
			[nPeriods]time.Time{time.Date(2026, 5, 4, 10, 16, 0, 0, kol), time.Date(2026, 5, 4, 11, 0, 0, 0, kol),
				time.Date(2026, 5, 5, 0, 0, 0, 0, kol), time.Date(2026, 6, 1, 0, 0, 0, 0, kol)}},
		{"new york repeated hour, first", firstHalf, ny,
			[nPeriods]string{"2026-11-01T01:30-0400", "2026-11-01T01:00-0400", "2026-11-01", "2026-11"},
			[nPeriods]time.Time{firstHalf.Add(time.Minute), firstHalf.Add(30 * time.Minute),
				time.Date(2026, 11, 2, 0, 0, 0, 0, ny), time.Date(2026, 12, 1, 0, 0, 0, 0, ny)}},
		{"new york repeated hour, second", secondHalf, ny,
			[nPeriods]string{"2026-11-01T01:30-0500", "2026-11-01T01:00-0500", "2026-11-01", "2026-11"},
			[nPeriods]time.Time{secondHalf.Add(time.Minute), secondHalf.Add(30 * time.Minute),
				time.Date(2026, 11, 2, 0, 0, 0, 0, ny), time.Date(2026, 12, 1, 0, 0, 0, 0, ny)}},
		{"leap february", time.Date(2028, 2, 29, 12, 0, 0, 0, ny), ny,
			[nPeriods]string{"2028-02-29T12:00-0500", "2028-02-29T12:00-0500", "2028-02-29", "2028-02"},
			[nPeriods]time.Time{time.Date(2028, 2, 29, 12, 1, 0, 0, ny), time.Date(2028, 2, 29, 13, 0, 0, 0, ny),
				time.Date(2028, 3, 1, 0, 0, 0, 0, ny), time.Date(2028, 3, 1, 0, 0, 0, 0, ny)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := currentWindows(c.now, c.loc)
			for p := range w {
				if w[p].stamp != c.stamp[p] || !w[p].end.Equal(c.ends[p]) {
					t.Errorf("period %d: stamp %q end %v, want %q %v", p, w[p].stamp, w[p].end, c.stamp[p], c.ends[p])
				}
				if w[p].start.After(c.now) || !w[p].end.After(c.now) {
					t.Errorf("period %d: [%v, %v) does not hold %v", p, w[p].start, w[p].end, c.now)
				}
			}
		})
	}
}

func TestWindowKey(t *testing.T) {
	for _, c := range []struct {
		scope, unit, period, user, want string
	}{
		{tS, tok, pDay, "", "P{t}:t:tokens:day:S"},
		{uS, tok, pDay, "alice", "P{t}:u:alice:tokens:day:S"},
		{uS, mo, pMonth, "a:b", "P{t}:u:a:b:money:month:S"},
		{tS, req, pMin, "", "P{t}:t:requests:minute:S"},
	} {
		idx, ok := winIndex(c.scope, c.unit, c.period)
		if !ok {
			t.Fatalf("no index for %v", c)
		}
		if got := windowKey("P{t}:", c.user, idx, "S"); got != c.want {
			t.Errorf("%s %s %s: %q, want %q", c.scope, c.unit, c.period, got, c.want)
		}
		if winScope(idx) != c.scope || winUnitName(idx) != c.unit || winPeriodName(idx) != c.period {
			t.Errorf("index %d does not map back to %v", idx, c)
		}
	}
	if _, ok := winIndex("task", "bananas", "day"); ok {
		t.Error("unknown unit has an index")
	}
}

// TestWindowCache checks that cached windows are those currentWindows
// computes, across minute, hour and zone changes and a clock going back.
func TestWindowCache(t *testing.T) {
	kol := mustLoad(t, "Asia/Kolkata")
	base := time.Date(2026, 11, 30, 23, 58, 59, 0, time.UTC)
	var c windowCache
	for _, step := range []struct {
		d   time.Duration
		loc *time.Location
	}{
		{0, time.UTC}, {500 * time.Millisecond, time.UTC}, {time.Second, time.UTC}, {61 * time.Second, time.UTC},
		{90 * time.Second, kol}, {90 * time.Second, time.UTC}, {-time.Hour, time.UTC}, {-time.Hour + time.Second, time.UTC},
		{-time.Nanosecond, time.UTC}, {0, time.UTC},
	} {
		now := base.Add(step.d)
		if got, want := *c.get(now, step.loc), currentWindows(now, step.loc); got != want {
			t.Errorf("%v in %v: cached %+v, want %+v", now, step.loc, got, want)
		}
	}
}
