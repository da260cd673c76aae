package proxy

import (
	"unicode/utf8"
	"unsafe"

	"taskgate/internal/swar"
)

// validObject reports, in one pass, whether b is what checkBody accepts: a
// JSON object (RFC 8259, surrounding whitespace allowed), valid UTF-8,
// nesting objects and arrays at most maxDepth deep. checkBody's separate
// checks then only run to name what is wrong with a body it refuses.
func validObject(b []byte, maxDepth int) bool { return validObjectInto(b, maxDepth, nil, nil) }

// validObjectInto is validObject that also gives top, if not nil, each
// member of the outermost object as the pass reads it (topFields.member,
// with fieldNeeds). When it reports false, what top was given is to be
// ignored. (A typed receiver, not a callback: the validator's recursion
// would move a callback's closure to the heap on every call.)
func validObjectInto(b []byte, maxDepth int, top *topFields, fieldNeeds fieldNeedsFunc) bool {
	v := jsonValidator{b: b, maxDepth: maxDepth, top: top, fieldNeeds: fieldNeeds}
	i := v.space(0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = v.value(i, 0)
	if i < 0 {
		return false
	}
	return v.space(i) == len(b)
}

// jsonValidator walks one JSON text; each method takes the index to read
// from and returns the index after what it read, or -1 if it is invalid.
type jsonValidator struct {
	b          []byte
	maxDepth   int
	top        *topFields // given the outermost object's members, or nil
	fieldNeeds fieldNeedsFunc
	listing    bool // reading the value of the first top-level "messages": top gets its elements
}

// space skips JSON whitespace.
func (v *jsonValidator) space(i int) int {
	for i < len(v.b) {
		switch v.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value reads one value at b[i] (no leading whitespace), depth being the
// nesting of its container.
func (v *jsonValidator) value(i, depth int) int {
	if i >= len(v.b) {
		return -1
	}
	switch c := v.b[i]; {
	case c == '"':
		return v.str(i)
	case c == '{':
		return v.container(i, depth+1, '}', true)
	case c == '[':
		return v.container(i, depth+1, ']', false)
	case c == '-' || c >= '0' && c <= '9':
		return v.number(i)
	case c == 't':
		return v.literal(i, "true")
	case c == 'f':
		return v.literal(i, "false")
	case c == 'n':
		return v.literal(i, "null")
	}
	return -1
}

// container reads an object (keyed: members) or an array (elements) from
// its opening byte at b[i] up to close.
func (v *jsonValidator) container(i, depth int, close byte, keyed bool) int {
	if depth > v.maxDepth {
		return -1
	}
	i = v.space(i + 1)
	if i < len(v.b) && v.b[i] == close {
		return i + 1
	}
	report := keyed && depth == 1 && v.top != nil
	list := !keyed && depth == 2 && v.listing
	for {
		ks, ke := i, i
		if keyed {
			if i >= len(v.b) || v.b[i] != '"' {
				return -1
			}
			if i = v.str(i); i < 0 {
				return -1
			}
			ke = i
			i = v.space(i)
			if i >= len(v.b) || v.b[i] != ':' {
				return -1
			}
			i = v.space(i + 1)
		}
		vs := i
		// The chat messages' elements are taken on the way (routeChecks
		// and trim go through them): from the first "messages" member as
		// written plainly; another spelling leaves them to routeChecks.
		listing := report && !v.top.listed && !v.top.messages.Exists() && i < len(v.b) && v.b[i] == '[' && string(v.b[ks:ke]) == `"messages"`
		v.listing = listing
		if i = v.value(i, depth); i < 0 {
			return -1
		}
		js := unsafe.String(unsafe.SliceData(v.b), len(v.b))
		if listing {
			v.listing, v.top.listed = false, true
		}
		if list {
			v.top.addMessage(js[vs:i])
		}
		if report {
			v.top.member(js[ks:ke], js[vs:i], vs, v.fieldNeeds)
		}
		i = v.space(i)
		if i >= len(v.b) {
			return -1
		}
		switch v.b[i] {
		case ',':
			i = v.space(i + 1)
		case close:
			return i + 1
		default:
			return -1
		}
	}
}

// str reads a string at b[i] == '"': no control bytes, only JSON's escapes,
// valid UTF-8.
func (v *jsonValidator) str(i int) int {
	b := v.b
	for i++; i < len(b); {
		for i+8 <= len(b) {
			// Eight bytes at a time while none needs a look of its own.
			x := swar.Load(b[i : i+8])
			f := swar.Less(x, 0x20) | swar.High(x) | swar.Eq(x, '"') | swar.Eq(x, '\\')
			if f != 0 {
				i += swar.First(f)
				break
			}
			i += 8
		}
		for i < len(b) && plainStringByte[b[i]] {
			i++
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return -1
					}
				}
				i += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return -1
			}
			i += size
		}
	}
	return -1
}

// plainStringByte marks the bytes a string holds as they are: printable
// ASCII but for the quote and the backslash.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number reads -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? at b[i].
func (v *jsonValidator) number(i int) int {
	b := v.b
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

// digits skips ASCII digits from b[i].
func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func (v *jsonValidator) literal(i int, lit string) int {
	if len(v.b)-i < len(lit) || string(v.b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}
