package limits

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"time"

	"taskgate/internal/jsonstr"
)

// appendEvent appends ev as encoding/json would marshal it, byte for byte,
// without reflection: the Detail values of the kinds events carry (strings,
// booleans, integers, floats, string lists, nil) are written directly and
// any other value is marshalled by encoding/json. Errors are encoding/json's
// (a NaN, a time outside years 0–9999, a value it cannot encode).
func appendEvent(dst []byte, ev *Event) ([]byte, error) {
	if ev.Encoded != nil {
		return append(dst, ev.Encoded...), nil
	}
	if !jsonSafeTime(ev.Time) {
		return appendMarshal(dst, *ev) // encoding/json's error
	}
	dst = append(dst, `{"time":"`...)
	dst = jsonstr.AppendTime(dst, ev.Time)
	dst = append(dst, `","kind":`...)
	dst = jsonstr.AppendHTML(dst, ev.Kind)
	dst = append(dst, `,"task":`...)
	dst = jsonstr.AppendHTML(dst, ev.Task)
	dst = append(dst, `,"user":`...)
	dst = jsonstr.AppendHTML(dst, ev.User)
	dst = append(dst, `,"source":`...)
	dst = jsonstr.AppendHTML(dst, ev.Source)
	dst = append(dst, `,"request_id":`...)
	dst = jsonstr.AppendHTML(dst, ev.RequestID)
	dst = append(dst, `,"detail":`...)
	dst, err := appendDetail(dst, ev.Detail)
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// jsonSafeTime reports whether t.AppendFormat(RFC3339Nano) is what
// time.Time.MarshalJSON writes (it refuses years outside 0–9999 and
// offsets of a day or more).
func jsonSafeTime(t time.Time) bool {
	if y := t.Year(); y < 0 || y > 9999 {
		return false
	}
	_, off := t.Zone()
	return off > -24*3600 && off < 24*3600
}

// appendDetail appends a map with its keys sorted, as encoding/json does.
func appendDetail(dst []byte, m map[string]any) ([]byte, error) {
	if m == nil {
		return append(dst, "null"...), nil
	}
	var arr [24]string
	keys := arr[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonstr.AppendHTML(dst, k)
		dst = append(dst, ':')
		var err error
		if dst, err = appendJSONValue(dst, m[k]); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// appendJSONValue appends v; kinds it does not know go to encoding/json.
func appendJSONValue(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return jsonstr.AppendHTML(dst, x), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case int32:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case uint64:
		return strconv.AppendUint(dst, x, 10), nil
	case float64:
		if !math.IsInf(x, 0) && !math.IsNaN(x) {
			return jsonstr.AppendFloat(dst, x), nil
		}
	case []string:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		for i, s := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonstr.AppendHTML(dst, s)
		}
		return append(dst, ']'), nil
	}
	return appendMarshal(dst, v)
}

// appendMarshal appends what encoding/json makes of v.
func appendMarshal(dst []byte, v any) ([]byte, error) {
	js, err := json.Marshal(v)
	return append(dst, js...), err
}
