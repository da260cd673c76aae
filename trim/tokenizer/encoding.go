package tokenizer

import (
	"slices"
	"unicode/utf8"
)

// bpe is the package's Encoding: a hand-written pre-tokenizer, a compact rank
// table and an allocation-free byte-pair merge, giving exactly tiktoken-go's
// ordinary encoding.
type bpe struct {
	name  string
	o200k bool // o200k_base split pattern, else cl100k_base
	v     *vocab
	c     *classTable
}

var _ Encoding = (*bpe)(nil)

// Name returns the encoding's name.
func (e *bpe) Name() string { return e.name }

// Count returns the number of tokens of text.
func (e *bpe) Count(text string) int {
	_, n := e.encode(text, nil, true)
	return n
}

// Encode appends the token ids of text to dst.
func (e *bpe) Encode(text string, dst []int) []int {
	dst, _ = e.encode(text, dst, false)
	return dst
}

// encode appends the tokens of text to dst (nothing with countOnly) and
// returns their number.
func (e *bpe) encode(text string, dst []int, countOnly bool) ([]int, int) {
	if !utf8.ValidString(text) {
		text = sanitize(text)
	}
	if !countOnly {
		dst = slices.Grow(dst, len(text)/4) // about 4 bytes a token in English
	}
	n := 0
	for i := 0; i < len(text); {
		j := e.split(text, i)
		piece := text[i:j]
		i = j
		r, ok := uint32(0), true
		if len(piece) == 1 {
			r = e.v.byteRank[piece[0]]
		} else {
			r, ok = e.v.lookup(piece)
		}
		if ok {
			if !countOnly {
				dst = append(dst, int(r))
			}
			n++
			continue
		}
		var m int
		dst, m = e.v.merge(piece, dst, countOnly)
		n += m
	}
	return dst, n
}

// split returns the end of the piece of s that starts at i.
func (e *bpe) split(s string, i int) int {
	if e.o200k {
		return e.c.splitO200k(s, i)
	}
	return e.c.splitCL100k(s, i)
}
