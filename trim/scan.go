package trim

import (
	"strings"

	"github.com/tidwall/gjson"
)

// A minimal scanner over raw JSON that finds values without decoding or
// unescaping them: one pass, no allocation. It assumes the input is valid
// JSON (the caller checked it); on malformed input it stops (returns -1)
// and never panics or loops.

// skipSpace returns the index of the first non-space byte at or after i.
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at s[i] == '"'.
func skipString(s string, i int) int {
	i++
	for {
		j := strings.IndexByte(s[i:], '"')
		if j < 0 {
			return -1
		}
		i += j
		// Escaped when preceded by an odd run of backslashes.
		k := i - 1
		for k >= 0 && s[k] == '\\' {
			k--
		}
		i++
		if (i-2-k)%2 == 0 {
			return i
		}
	}
}

// skipValue returns the index after the value starting at s[i] (no leading
// space), or -1.
func skipValue(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i = skipString(s, i)
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

// eachField calls fn with each key (raw, with quotes) and raw value of the
// object obj; fn returns false to stop. It reports false when obj is not a
// well-formed object.
func eachField(obj string, fn func(key, val string) bool) bool {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return true
	}
	for i < len(obj) {
		if obj[i] != '"' {
			return false
		}
		ke := skipString(obj, i)
		if ke < 0 {
			return false
		}
		key := obj[i:ke]
		i = skipSpace(obj, ke)
		if i >= len(obj) || obj[i] != ':' {
			return false
		}
		i = skipSpace(obj, i+1)
		ve := skipValue(obj, i)
		if ve < 0 {
			return false
		}
		if !fn(key, obj[i:ve]) {
			return true
		}
		i = skipSpace(obj, ve)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
			continue
		}
		return i < len(obj) && obj[i] == '}'
	}
	return false
}

// eachElem calls fn with each raw element of the array arr; fn returns false
// to stop. It reports false when arr is not a well-formed array.
func eachElem(arr string, fn func(val string) bool) bool {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return false
	}
	i = skipSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return true
	}
	for i < len(arr) {
		ve := skipValue(arr, i)
		if ve < 0 {
			return false
		}
		if !fn(arr[i:ve]) {
			return true
		}
		i = skipSpace(arr, ve)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
			continue
		}
		return i < len(arr) && arr[i] == ']'
	}
	return false
}

// keyIs reports whether a raw key names want (unescaping only when needed).
func keyIs(raw, want string) bool {
	if len(raw) == len(want)+2 && raw[1:len(raw)-1] == want {
		return true
	}
	return strings.IndexByte(raw, '\\') >= 0 && gjson.Parse(raw).Str == want
}

// strValue returns a raw JSON string's text, unescaping only when needed.
func strValue(raw string) string {
	if len(raw) < 2 {
		return ""
	}
	if strings.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1]
	}
	return gjson.Parse(raw).Str
}

// kind is the JSON type of a raw value by its first byte.
func kind(raw string) byte {
	if raw == "" {
		return 0
	}
	switch c := raw[0]; c {
	case '"', '{', '[', 'n', 't', 'f':
		return c
	}
	return '0'
}

// rawKey returns the canonical key of a raw key: its text when it has no
// escapes, else its unescaped text.
func rawKey(raw string) string { return strValue(raw) }
