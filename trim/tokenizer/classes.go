package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// Character classes used by the split patterns, as regexp2 (tiktoken-go's
// regex engine) defines them: categories from Go's unicode tables, \s as
// unicode.IsSpace.
const (
	cL     uint8 = 1 << iota // \p{L}
	cN                       // \p{N}
	cS                       // \s
	cU                       // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	cW                       // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	cNL                      // [\r\n]
	cMulti                   // in byteClass: the byte starts or continues a multi-byte rune
)

// classTable is a two-level table of the class bits of every code point:
// blocks of 256 code points, identical blocks shared.
type classTable struct {
	index  [(unicode.MaxRune + 1) >> 8]uint16
	blocks []uint8
}

var (
	byteClass   [256]uint8 // class bits of ASCII bytes; cMulti for the others
	classes     *classTable
	classesOnce sync.Once
)

// loadClasses builds the class table once and returns it.
func loadClasses() *classTable {
	classesOnce.Do(buildClasses)
	return classes
}

func buildClasses() {
	flat := make([]uint8, unicode.MaxRune+1)
	set := func(t *unicode.RangeTable, bit uint8) {
		for _, r := range t.R16 {
			for c := uint32(r.Lo); c <= uint32(r.Hi); c += uint32(r.Stride) {
				flat[c] |= bit
			}
		}
		for _, r := range t.R32 {
			for c := r.Lo; c <= r.Hi; c += r.Stride {
				flat[c] |= bit
			}
		}
	}
	set(unicode.L, cL)
	set(unicode.N, cN)
	for _, t := range []*unicode.RangeTable{unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M} {
		set(t, cU)
	}
	for _, t := range []*unicode.RangeTable{unicode.Ll, unicode.Lm, unicode.Lo, unicode.M} {
		set(t, cW)
	}
	// unicode.IsSpace: '\t', '\n', '\v', '\f', '\r', ' ', U+0085, U+00A0 in
	// Latin-1, the White_Space property beyond; both are White_Space.
	set(unicode.White_Space, cS)
	flat['\r'] |= cNL
	flat['\n'] |= cNL

	t := &classTable{}
	seen := map[string]uint16{}
	for b := range t.index {
		blk := flat[b<<8 : (b+1)<<8]
		i, ok := seen[string(blk)]
		if !ok {
			i = uint16(len(t.blocks) >> 8)
			seen[string(blk)] = i
			t.blocks = append(t.blocks, blk...)
		}
		t.index[b] = i
	}
	copy(byteClass[:], flat[:utf8.RuneSelf])
	for b := utf8.RuneSelf; b < 256; b++ {
		byteClass[b] = cMulti
	}
	classes = t
}

// of returns the class bits of r (a valid rune).
func (t *classTable) of(r rune) uint8 {
	return t.blocks[int(t.index[r>>8])<<8|int(r&0xff)]
}

// at returns the class bits and width of the rune at s[i] (s valid UTF-8,
// i < len(s)).
func (t *classTable) at(s string, i int) (uint8, int) {
	if c := byteClass[s[i]]; c != cMulti {
		return c, 1
	}
	return t.atRune(s, i)
}

// atRune is at for a multi-byte rune.
func (t *classTable) atRune(s string, i int) (uint8, int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	return t.of(r), n
}

// sanitize returns s with each byte of an invalid UTF-8 sequence replaced by
// U+FFFD, as converting s to []rune does (which tiktoken-go's regex engine
// does before splitting).
func sanitize(s string) string {
	out := make([]byte, 0, len(s)+16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, s[i:i+n]...)
		}
		i += n
	}
	return string(out)
}
