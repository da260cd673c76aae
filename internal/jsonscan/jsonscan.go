// Package jsonscan finds values in raw JSON without decoding or unescaping
// them: one pass, no allocation. It assumes valid JSON (the caller checked
// it, or accepts a miss on malformed input); on malformed input it stops
// (returns -1 or false) and never panics or loops.
package jsonscan

import (
	"math/bits"
	"strings"

	"github.com/tidwall/gjson"

	"taskgate/internal/swar"
)

// SkipSpace returns the index of the first non-space byte at or after i.
func SkipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t') {
		i++
	}
	return i
}

// SkipString returns the index after the string starting at s[i] == '"',
// or -1. It looks at eight bytes at a time for a quote or a backslash.
func SkipString(s string, i int) int {
	i++
	for i < len(s) {
		if i+8 <= len(s) {
			x := swar.Load(s[i : i+8])
			f := swar.Eq(x, '"') | swar.Eq(x, '\\')
			if f == 0 {
				i += 8
				continue
			}
			i += swar.First(f)
		}
		switch s[i] {
		case '"':
			return i + 1
		case '\\':
			i += 2
		default:
			i++
		}
	}
	return -1
}

// SkipValue returns the index after the value starting at s[i] (no leading
// space), or -1.
func SkipValue(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return SkipString(s, i)
	case '{', '[':
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i = SkipString(s, i)
				if i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	default: // number, true, false, null
		j := i
		for j < len(s) && s[j] != ',' && s[j] != '}' && s[j] != ']' && s[j] != ' ' && s[j] != '\n' && s[j] != '\r' && s[j] != '\t' {
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}

// EachField calls fn with each key (raw, with quotes) and raw value of the
// object obj; fn returns false to stop. It reports false when obj is not a
// well-formed object.
func EachField(obj string, fn func(key, val string) bool) bool {
	return EachFieldAt(obj, func(key, val string, _ int) bool { return fn(key, val) })
}

// EachFieldAt is EachField that also gives each value's offset in obj.
func EachFieldAt(obj string, fn func(key, val string, at int) bool) bool {
	i := SkipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	end, stopped := members(obj, SkipSpace(obj, i+1), fn)
	return stopped || end >= 0
}

// members reads an object's members from obj[i] (its first key, or its
// closing brace) to its closing brace, calling fn (if any) with each;
// fn returns false to stop. It returns the index after the brace, or -1
// when the members are not well formed; stopped when fn stopped.
func members(obj string, i int, fn func(key, val string, at int) bool) (end int, stopped bool) {
	if i < len(obj) && obj[i] == '}' {
		return i + 1, false
	}
	for i < len(obj) {
		if obj[i] != '"' {
			return -1, false
		}
		ke := SkipString(obj, i)
		if ke < 0 {
			return -1, false
		}
		key := obj[i:ke]
		i = SkipSpace(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return -1, false
		}
		i = SkipSpace(obj, i+1)
		ve := SkipValue(obj, i)
		if ve < 0 {
			return -1, false
		}
		if fn != nil && !fn(key, obj[i:ve], i) {
			return -1, true
		}
		i = SkipSpace(obj, ve)
		if i < len(obj) && obj[i] == ',' {
			i = SkipSpace(obj, i+1)
			continue
		}
		if i < len(obj) && obj[i] == '}' {
			return i + 1, false
		}
		return -1, false
	}
	return -1, false
}

// EachElem calls fn with each raw element of the array arr; fn returns false
// to stop. It reports false when arr is not a well-formed array.
func EachElem(arr string, fn func(val string) bool) bool {
	i := SkipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return false
	}
	i = SkipSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return true
	}
	for i < len(arr) {
		ve := SkipValue(arr, i)
		if ve < 0 {
			return false
		}
		if !fn(arr[i:ve]) {
			return true
		}
		i = SkipSpace(arr, ve)
		if i < len(arr) && arr[i] == ',' {
			i = SkipSpace(arr, i+1)
			continue
		}
		return i < len(arr) && arr[i] == ']'
	}
	return false
}

// KeyIs reports whether a raw key names want (unescaping only when needed).
func KeyIs(raw, want string) bool {
	if len(raw) == len(want)+2 && raw[1:len(raw)-1] == want {
		return true
	}
	return strings.IndexByte(raw, '\\') >= 0 && gjson.Parse(raw).Str == want
}

// Str returns a raw JSON string's text, unescaping only when needed.
func Str(raw string) string {
	if len(raw) < 2 {
		return ""
	}
	if strings.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1]
	}
	return gjson.Parse(raw).Str
}

// Kind is the JSON type of a raw value by its first byte.
func Kind(raw string) byte {
	if raw == "" {
		return 0
	}
	switch c := raw[0]; c {
	case '"', '{', '[', 'n', 't', 'f':
		return c
	}
	return '0'
}

// Field returns the raw value of the first top-level field of obj named
// name, and its offset in obj; ok is false when obj is not an object or has
// no such field. It reads as gjson.Get(obj, name) does for a plain name,
// without gjson's work on the values it passes.
func Field(obj, name string) (raw string, at int, ok bool) {
	EachFieldAt(obj, func(key, val string, i int) bool {
		if KeyIs(key, name) {
			raw, at, ok = val, i, true
			return false
		}
		return true
	})
	return raw, at, ok
}

// FieldNearEnd is Field for a field that usually comes late in a large
// object (an answer's "usage"): it looks for quoted (the name with its
// quotes, plain ASCII) from the end and takes the last place where it is a
// key of the outermost object, which it tells by reading what follows the
// value to the object's end. Where no such place is found among the last
// few matches it falls back to Field. Of duplicate names it takes the last
// (Field, like gjson, the first).
func FieldNearEnd(obj, quoted string) (raw string, ok bool) {
	end := len(obj)
	for range 4 {
		p := lastIndexQuoted(obj[:end], quoted)
		if p < 0 {
			break
		}
		end = p
		if raw, ok := keyValueAt(obj, p, len(quoted)); ok {
			return raw, true
		}
	}
	raw, _, ok = Field(obj, quoted[1:len(quoted)-1])
	return raw, ok
}

// lastIndexQuoted is strings.LastIndex(s, q) for q of two bytes or more
// beginning with a quote: it goes back over eight bytes at a time to the
// bytes equal to q[1] (rarer in JSON than quotes, which begin every key and
// string) and compares q at each (LastIndex hashes every byte on the way).
func lastIndexQuoted(s, q string) int {
	c := q[1]
	i := len(s) - 1 // s[i+1:] holds no q[1] of a start of q
	for i >= 1 {
		if i >= 8 {
			f := swar.Eq(swar.Load(s[i-7:i+1]), c)
			if f == 0 {
				i -= 8
				continue
			}
			// The highest flag may be wrong (Eq is exact only for the
			// lowest): each is checked below.
			i -= bits.LeadingZeros64(f) >> 3
		}
		if s[i] == c && s[i-1] == '"' && i-1+len(q) <= len(s) && s[i-1:i-1+len(q)] == q {
			return i - 1
		}
		i--
	}
	return -1
}

// keyValueAt returns the value of the key of n bytes at obj[p] (a quote)
// when it is a key of the outermost object: its quote not escaped, after
// '{' or ',', and after its value only the object's other fields and its
// closing brace, at the end of obj.
func keyValueAt(obj string, p, n int) (string, bool) {
	k := p - 1
	for k >= 0 && obj[k] == '\\' {
		k--
	}
	if (p-1-k)%2 == 1 {
		return "", false // an escaped quote inside a string
	}
	for k >= 0 && (obj[k] == ' ' || obj[k] == '\n' || obj[k] == '\r' || obj[k] == '\t') {
		k--
	}
	if k < 0 || obj[k] != '{' && obj[k] != ',' {
		return "", false
	}
	i := SkipSpace(obj, p+n)
	if i >= len(obj) || obj[i] != ':' {
		return "", false
	}
	i = SkipSpace(obj, i+1)
	ve := SkipValue(obj, i)
	if ve < 0 {
		return "", false
	}
	// The rest: the object's other members, its closing brace, nothing after.
	j := SkipSpace(obj, ve)
	end := -1
	switch {
	case j < len(obj) && obj[j] == '}':
		end = j + 1
	case j < len(obj) && obj[j] == ',':
		if k := SkipSpace(obj, j+1); k < len(obj) && obj[k] == '"' {
			end, _ = members(obj, k, nil)
		}
	}
	if end < 0 || SkipSpace(obj, end) != len(obj) {
		return "", false
	}
	return obj[i:ve], true
}

// Int is a raw JSON number as gjson.Result.Int reads it (0 for what is not
// a number); plain digits are read without gjson.
func Int(raw string) int64 {
	if len(raw) == 0 || len(raw) > 18 {
		return gjson.Parse(raw).Int()
	}
	var n int64
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c < '0' || c > '9' {
			return gjson.Parse(raw).Int()
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
