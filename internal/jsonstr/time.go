package jsonstr

import (
	"sync/atomic"
	"time"
)

// secondText is one second of one location formatted as RFC 3339: the
// date and time up to the seconds, and the zone ("Z" or "+01:00").
type secondText struct {
	unix       int64
	loc        *time.Location
	date, zone string
}

// lastSecond is the second AppendTime formatted last: journal lines and
// events come many to a second.
var lastSecond atomic.Pointer[secondText]

// AppendTime appends t.Format(time.RFC3339Nano), the form of the journal's
// and the events' times, formatting the date and zone once a second.
func AppendTime(dst []byte, t time.Time) []byte {
	sec := t.Unix()
	st := lastSecond.Load()
	if st == nil || st.unix != sec || st.loc != t.Location() {
		whole := t.Truncate(time.Second).Format(time.RFC3339)
		if len(whole) < 20 || whole[19] != 'Z' && whole[19] != '+' && whole[19] != '-' {
			return t.AppendFormat(dst, time.RFC3339Nano) // a year outside 0000-9999
		}
		st = &secondText{unix: sec, loc: t.Location(), date: whole[:19], zone: whole[19:]}
		lastSecond.Store(st)
	}
	dst = append(dst, st.date...)
	if ns := t.Nanosecond(); ns != 0 {
		var frac [10]byte
		frac[0] = '.'
		for i := 9; i >= 1; i-- {
			frac[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 10
		for frac[n-1] == '0' {
			n--
		}
		dst = append(dst, frac[:n]...)
	}
	return append(dst, st.zone...)
}
