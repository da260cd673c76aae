package tokenizer

import (
	"slices"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// The split patterns of tiktoken-go v0.1.8 (encoding.go), which split.go
// implements by hand.
const (
	patCL100k = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patO200k  = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// regexpPieces splits valid UTF-8 text with regexp2, as tiktoken-go does.
func regexpPieces(t *testing.T, re *regexp2.Regexp, text string) []string {
	t.Helper()
	runes := []rune(text)
	var out []string
	m, err := re.FindStringMatch(text)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		out = append(out, string(runes[m.Index:m.Index+m.Length]))
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ourPieces(c *classTable, o200k bool, text string) []string {
	var out []string
	for i := 0; i < len(text); {
		var j int
		if o200k {
			j = c.splitO200k(text, i)
		} else {
			j = c.splitCL100k(text, i)
		}
		if j <= i || j > len(text) {
			return append(out, "<bad end>")
		}
		out = append(out, text[i:j])
		i = j
	}
	return out
}

// TestSplitMatchesRegexp2 compares the hand-written pre-tokenizers with
// regexp2 running tiktoken's patterns, piece by piece.
func TestSplitMatchesRegexp2(t *testing.T) {
	texts := []string{
		"", "hello world", "I'm HERE, you'RE 'll 'LL'd", "  \n \t\r\n  x", " !!!\n\n/x",
		"ǅungla ʰa Aé\u0301 中文abc ABCdef ABC's abc'S", "123456 ١٢٣٤ ⅫⅫⅫⅫ",
		"'ſ 'K x'ſ", "a\u00a0b\u3000c\u2028d", "\u0301\u0301a \u0301A !\u0301",
	}
	for _, f := range loadCorpus(t) {
		text := f.text
		if testing.Short() || raceEnabled {
			text = text[:min(len(text), 1<<10)]
		}
		if utf8.ValidString(text) {
			texts = append(texts, text)
		}
	}
	c := loadClasses()
	for _, tc := range []struct {
		o200k bool
		pat   string
	}{{false, patCL100k}, {true, patO200k}} {
		re := regexp2.MustCompile(tc.pat, regexp2.None)
		for _, text := range texts {
			want := regexpPieces(t, re, text)
			got := ourPieces(c, tc.o200k, text)
			if !slices.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Errorf("o200k=%v: piece %d differs in %.40q…: got %q, want %q", tc.o200k, i, text,
					got[i:min(i+3, len(got))], want[i:min(i+3, len(want))])
			}
		}
	}
}

// TestClasses checks the class table against Go's unicode tables, which
// regexp2 uses for \p{…}, and unicode.IsSpace, which it uses for \s.
func TestClasses(t *testing.T) {
	c := loadClasses()
	is := func(r rune, ts ...*unicode.RangeTable) bool { return unicode.IsOneOf(ts, r) }
	step := rune(1)
	if testing.Short() || raceEnabled {
		step = 7
	}
	for r := rune(0); r <= unicode.MaxRune; r += step {
		var want uint8
		if unicode.IsLetter(r) {
			want |= cL
		}
		if unicode.IsNumber(r) {
			want |= cN
		}
		if unicode.IsSpace(r) {
			want |= cS
		}
		if is(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
			want |= cU
		}
		if is(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
			want |= cW
		}
		if r == '\r' || r == '\n' {
			want |= cNL
		}
		if got := c.of(r); got != want {
			t.Fatalf("class of %U = %06b, want %06b", r, got, want)
		}
		if r < utf8.RuneSelf && byteClass[r] != want {
			t.Fatalf("byteClass[%#x] = %06b, want %06b", r, byteClass[r], want)
		}
	}
	for b := utf8.RuneSelf; b < 256; b++ {
		if byteClass[b] != cMulti {
			t.Fatalf("byteClass[%#x] = %b, want cMulti", b, byteClass[b])
		}
	}
}

func TestContraction(t *testing.T) {
	tests := []struct {
		s    string
		want int
	}{
		{"'s", 2}, {"'S", 2}, {"'t", 2}, {"'re", 3}, {"'RE", 3}, {"'rE", 3}, {"'ve", 3},
		{"'m", 2}, {"'ll", 3}, {"'Ll", 3}, {"'d", 2}, {"'D", 2},
		{"'", 0}, {"'x", 0}, {"'r", 0}, {"'rx", 0}, {"'l", 0}, {"'lx", 0}, {"'v", 0},
		{"'ſ", 0}, {"'K", 0}, {"'ÿ", 0},
	}
	for _, tt := range tests {
		if got := contraction(tt.s, 0); got != tt.want {
			t.Errorf("contraction(%q) = %d, want %d", tt.s, got, tt.want)
		}
	}
}

func TestSanitize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"abc", "abc"},
		{"a\xffb", "a\uFFFDb"},
		{"\xe2\x82", "\uFFFD\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\uFFFD", "\uFFFD"},
	}
	for _, tt := range tests {
		if got := sanitize(tt.in); got != tt.want {
			t.Errorf("sanitize(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got, want := sanitize(tt.in), string([]rune(tt.in)); got != want {
			t.Errorf("sanitize(%q) = %q, []rune conversion gives %q", tt.in, got, want)
		}
	}
}
