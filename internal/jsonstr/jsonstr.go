// Package jsonstr appends Go strings as JSON string literals, and floats as
// JSON numbers, without reflection, for the hand-written JSON on taskgate's
// hot paths (error bodies, events, the call journal, rewritten message
// parts, the fake upstream's answers).
package jsonstr

import (
	"math"
	"strconv"
	"unicode/utf8"

	"taskgate/internal/swar"
)

const hexDigits = "0123456789abcdef"

// Append appends s as a quoted JSON string: quotes, backslashes and control
// bytes escaped, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped; <, >
// and & are kept as they are (as OpenAI sends them).
func Append(dst []byte, s string) []byte { return appendString(dst, s, false, false) }

// AppendHTML is Append with <, > and & escaped as \u003c, \u003e and
// \u0026: byte for byte what encoding/json.Marshal writes.
func AppendHTML(dst []byte, s string) []byte { return appendString(dst, s, true, false) }

// AppendLog is Append as log/slog's JSON handler writes a string: \b and \f
// as \u0008 and \u000c, the rest the same.
func AppendLog(dst []byte, s string) []byte { return appendString(dst, s, false, true) }

// AppendFloat appends f as encoding/json.Marshal writes a float64 (the ES6
// number format). f must not be NaN or infinite (encoding/json refuses them).
func AppendFloat(dst []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// AppendMilli appends n/1000 as AppendFloat writes float64(n)/1000 (a
// latency in ms from its µs, say), with integer arithmetic only: the
// quotient, then the remainder's digits without trailing zeros. Below
// 2^43 in magnitude the exact decimal, at most three places, is the
// shortest one that reads back as that float64; beyond, AppendFloat.
func AppendMilli(dst []byte, n int64) []byte {
	const exact = 1 << 43
	if n <= -exact || n >= exact {
		return AppendFloat(dst, float64(n)/1000)
	}
	if n < 0 {
		dst = append(dst, '-')
		n = -n
	}
	dst = strconv.AppendInt(dst, n/1000, 10)
	r := n % 1000
	if r == 0 {
		return dst
	}
	digits := [3]byte{byte('0' + r/100), byte('0' + r/10%10), byte('0' + r%10)}
	end := 3
	for digits[end-1] == '0' {
		end--
	}
	return append(append(dst, '.'), digits[:end]...)
}

// plainSafe and htmlSafe mark the bytes written as they are: printable
// ASCII but for the quote and backslash (and, for HTML, <, > and &).
var plainSafe, htmlSafe = safeBytes(false), safeBytes(true)

func safeBytes(html bool) (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && (!html || (b != '<' && b != '>' && b != '&'))
	}
	return t
}

func appendString(dst []byte, s string, html, slog bool) []byte {
	safe := &plainSafe
	if html {
		safe = &htmlSafe
	}
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			// Eight bytes at a time while none needs a look of its own.
			x := swar.Load(s[i : i+8])
			f := swar.Less(x, 0x20) | swar.High(x) | swar.Eq(x, '"') | swar.Eq(x, '\\')
			if html {
				f |= swar.Eq(x, '<') | swar.Eq(x, '>') | swar.Eq(x, '&')
			}
			if f == 0 {
				i += 8
				continue
			}
			i += swar.First(f)
		}
		if b := s[i]; b < utf8.RuneSelf {
			if safe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b', '\f':
				if slog {
					dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
				} else if b == '\b' {
					dst = append(dst, '\\', 'b')
				} else {
					dst = append(dst, '\\', 'f')
				}
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
