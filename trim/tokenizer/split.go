package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The split functions below are hand-written equivalents of the two
// encodings' pre-tokenizer patterns, with the ordered-alternation and
// backtracking semantics of regexp2 (the engine tiktoken-go uses):
//
// cl100k_base:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// o200k_base:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//	\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Every position starts a non-empty match, so matches tile the text: each
// function takes valid UTF-8 s and a start i < len(s) and returns the end of
// the piece that starts at i.

// splitCL100k returns the end of the cl100k_base piece starting at s[i].
func (t *classTable) splitCL100k(s string, i int) int {
	c0, n0 := t.at(s, i)
	if s[i] == '\'' {
		if n := contraction(s, i); n > 0 {
			return i + n
		}
	}
	if c0&cL != 0 {
		return t.run(s, i+n0, cL)
	}
	j := i + n0
	if c0&(cN|cNL) == 0 && j < len(s) {
		if c1, n1 := t.at(s, j); c1&cL != 0 {
			return t.run(s, j+n1, cL)
		}
	}
	if c0&cN != 0 {
		return t.digits(s, j)
	}
	if c0&cS == 0 { // [^\s\p{L}\p{N}]
		return runNL(s, t.runPunct(s, j), false)
	}
	if s[i] == ' ' && j < len(s) {
		if c1, n1 := t.at(s, j); c1&(cL|cN|cS) == 0 {
			return runNL(s, t.runPunct(s, j+n1), false)
		}
	}
	return t.splitSpace(s, i)
}

// splitO200k returns the end of the o200k_base piece starting at s[i].
func (t *classTable) splitO200k(s string, i int) int {
	c0, n0 := t.at(s, i)
	prefix := c0&(cL|cN|cNL) == 0 // s[i] matches [^\r\n\p{L}\p{N}]
	if prefix || c0&(cU|cW) != 0 {
		e := -1
		if prefix {
			e = t.upperLower(s, i+n0)
		}
		if e < 0 {
			e = t.upperLower(s, i)
		}
		if e < 0 && prefix {
			e = t.upperPlusLower(s, i+n0)
		}
		if e < 0 {
			e = t.upperPlusLower(s, i)
		}
		if e >= 0 {
			if e < len(s) && s[e] == '\'' {
				e += contraction(s, e)
			}
			return e
		}
	}
	j := i + n0
	if c0&cN != 0 {
		return t.digits(s, j)
	}
	if c0&cS == 0 { // [^\s\p{L}\p{N}]
		return runNL(s, t.runPunct(s, j), true)
	}
	if s[i] == ' ' && j < len(s) {
		if c1, n1 := t.at(s, j); c1&(cL|cN|cS) == 0 {
			return runNL(s, t.runPunct(s, j+n1), true)
		}
	}
	return t.splitSpace(s, i)
}

// upperLower matches [U]*[W]+ at p (U, W as in cU, cW) with backtracking:
// it returns the end of the match, or -1.
func (t *classTable) upperLower(s string, p int) int {
	q, lastW := p, -1
	for q < len(s) {
		c, n := byteClass[s[q]], 1
		if c == cMulti {
			c, n = t.atRune(s, q)
		}
		if c&cU == 0 {
			if c&cW != 0 {
				return t.run(s, q+n, cW)
			}
			break
		}
		q += n
		if c&cW != 0 {
			lastW = q
		}
	}
	// [U]* gives back characters until [W]+ can match one: the last
	// character of the run that is also in W ends the match.
	return lastW
}

// upperPlusLower matches [U]+[W]* at p, returning its end or -1.
func (t *classTable) upperPlusLower(s string, p int) int {
	q := t.run(s, p, cU)
	if q == p {
		return -1
	}
	return t.run(s, q, cW)
}

// run returns the end of the run of characters with any of the bits in
// class, starting at i.
func (t *classTable) run(s string, i int, class uint8) int {
	for i < len(s) {
		if c := byteClass[s[i]]; c != cMulti {
			if c&class == 0 {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if t.of(r)&class == 0 {
			return i
		}
		i += n
	}
	return i
}

// runPunct returns the end of the run of [^\s\p{L}\p{N}] starting at i.
func (t *classTable) runPunct(s string, i int) int {
	for i < len(s) {
		c, n := byteClass[s[i]], 1
		if c == cMulti {
			c, n = t.atRune(s, i)
		}
		if c&(cL|cN|cS) != 0 {
			return i
		}
		i += n
	}
	return i
}

// digits returns the end of \p{N}{1,3} whose first character ends at j.
func (t *classTable) digits(s string, j int) int {
	for k := 0; k < 2 && j < len(s); k++ {
		c, n := t.at(s, j)
		if c&cN == 0 {
			break
		}
		j += n
	}
	return j
}

// runNL returns the end of [\r\n]* (or [\r\n/]* with slash) starting at i.
func runNL(s string, i int, slash bool) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n' || slash && s[i] == '/') {
		i++
	}
	return i
}

// splitSpace matches \s*[\r\n]+|\s+(?!\S)|\s+ at i, where s[i] is \s.
func (t *classTable) splitSpace(s string, i int) int {
	j, last, afterNL := i, i, -1
	for j < len(s) {
		c, n := byteClass[s[j]], 1
		if c == cMulti {
			c, n = t.atRune(s, j)
		}
		if c&cS == 0 {
			break
		}
		last = j
		j += n
		if c&cNL != 0 {
			afterNL = j
		}
	}
	switch {
	case afterNL >= 0: // \s*[\r\n]+ ends after the run's last newline
		return afterNL
	case j == len(s) || last == i: // \s+(?!\S) at the end; or a single \s
		return j
	default: // \s+(?!\S) leaves the run's last character to the next piece
		return last
	}
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at s[i] == '\” and
// returns its length in bytes, or 0. Case folds as regexp2 does, with
// unicode.ToLower on the input.
func contraction(s string, i int) int {
	r1, n1 := lowerAt(s, i+1)
	switch r1 {
	case 's', 't', 'm', 'd':
		return 1 + n1
	case 'r', 'v':
		if r2, n2 := lowerAt(s, i+1+n1); r2 == 'e' {
			return 1 + n1 + n2
		}
	case 'l':
		if r2, n2 := lowerAt(s, i+1+n1); r2 == 'l' {
			return 1 + n1 + n2
		}
	}
	return 0
}

// lowerAt returns unicode.ToLower of the rune at s[i] and its width; -1 at the end.
func lowerAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if b := s[i]; b < utf8.RuneSelf {
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		return rune(b), 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return unicode.ToLower(r), n
}
