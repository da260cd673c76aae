package limits

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// keyGrace is how long a window's key outlives the window (plus jitter up to
// keyJitter), so that a call settled just after the end still finds it.
const (
	keyGrace  = time.Minute
	keyJitter = 30 * time.Second
)

// periodWin is the current window of one period.
type periodWin struct {
	start, end time.Time
	stamp      string
}

// currentWindows returns the minute, hour, day and month windows holding
// now, aligned to the calendar in loc. Minute and hour windows are found by
// subtracting the local clock's minutes and seconds, so a repeated hour at a
// daylight-saving change is a window of its own; their stamps carry the UTC
// offset for the same reason.
func currentWindows(now time.Time, loc *time.Location) [nPeriods]periodWin {
	lt := now.In(loc)
	var w [nPeriods]periodWin
	sub := time.Duration(lt.Second())*time.Second + time.Duration(lt.Nanosecond())
	ms := lt.Add(-sub)
	w[0] = periodWin{start: ms, end: ms.Add(time.Minute), stamp: ms.Format("2006-01-02T15:04Z0700")}
	hs := ms.Add(-time.Duration(lt.Minute()) * time.Minute)
	w[1] = periodWin{start: hs, end: hs.Add(time.Hour), stamp: hs.Format("2006-01-02T15:04Z0700")}
	y, m, d := lt.Date()
	ds := time.Date(y, m, d, 0, 0, 0, 0, loc)
	w[2] = periodWin{start: ds, end: time.Date(y, m, d+1, 0, 0, 0, 0, loc), stamp: ds.Format("2006-01-02")}
	mo := time.Date(y, m, 1, 0, 0, 0, 0, loc)
	w[3] = periodWin{start: mo, end: time.Date(y, m+1, 1, 0, 0, 0, 0, loc), stamp: mo.Format("2006-01")}
	return w
}

// keyTTL is how long, from now, a key of a window ending at end should live;
// jittered so that keys of one window do not all expire in the same second.
func keyTTL(now, end time.Time) int64 {
	d := end.Sub(now) + keyGrace + rand.N(keyJitter)
	return d.Milliseconds()
}

// settleTTL is the TTL to give a window's key at settlement: 0 when the key
// is already past its window and grace (the window is then left alone).
func settleTTL(now, end time.Time) int64 {
	d := end.Add(keyGrace).Sub(now).Milliseconds()
	if d <= 0 {
		return 0
	}
	return d
}

// windowCache remembers the windows of the last minute asked for, so that
// the calls of one minute share their stamps instead of formatting them
// again.
type windowCache struct {
	last atomic.Pointer[cachedWindows]
}

type cachedWindows struct {
	loc *time.Location
	w   [nPeriods]periodWin
}

// get is currentWindows(now, loc), from the cache when now falls in the
// cached minute. The windows are shared: never modify them.
func (c *windowCache) get(now time.Time, loc *time.Location) *[nPeriods]periodWin {
	if cw := c.last.Load(); cw != nil && cw.loc == loc && !now.Before(cw.w[0].start) && now.Before(cw.w[0].end) {
		return &cw.w
	}
	cw := &cachedWindows{loc: loc, w: currentWindows(now, loc)}
	c.last.Store(cw)
	return &cw.w
}
