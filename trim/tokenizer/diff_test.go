package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

type corpusFile struct {
	name, text string
}

// loadCorpus reads testdata/corpus: prose, code, multilingual text, edge
// cases, invalid UTF-8 and long generated runs (testdata/gencorpus).
func loadCorpus(t testing.TB) []corpusFile {
	t.Helper()
	paths, err := filepath.Glob("testdata/corpus/*")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	var out []corpusFile
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, corpusFile{filepath.Base(p), string(b)})
	}
	if len(out) < 15 {
		t.Fatalf("corpus: only %d files", len(out))
	}
	return out
}

// checkSame fails t unless ours encodes text exactly as tiktoken-go does.
func checkSame(t testing.TB, ours Encoding, ref *tiktokenEncoding, label, text string) {
	t.Helper()
	want := ref.Encode(text, nil)
	got := ours.Encode(text, nil)
	if !slices.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		lo := max(i-3, 0)
		t.Fatalf("%s %s (%d bytes): tokens differ at %d of %d/%d:\n got %v = %q\nwant %v = %q",
			ours.Name(), label, len(text), i, len(got), len(want),
			got[lo:min(i+4, len(got))], ref.tk.Decode(got[lo:min(i+4, len(got))]),
			want[lo:min(i+4, len(want))], ref.tk.Decode(want[lo:min(i+4, len(want))]))
	}
	if n := ours.Count(text); n != len(want) {
		t.Fatalf("%s %s: Count = %d, want %d", ours.Name(), label, n, len(want))
	}
}

var update = flag.Bool("update", false, "rewrite testdata/golden.tsv from tiktoken-go")

// liveWhole reports whether whole corpus files are compared with a live
// tiktoken-go: not under -short; testdata/golden.tsv covers them there.
func liveWhole() bool { return !testing.Short() }

// TestMatchesTiktoken compares the corpus with a live tiktoken-go: every file
// whole (see liveWhole; else its first KiB) and in random windows cut at
// arbitrary bytes, so also at broken UTF-8 sequences.
func TestMatchesTiktoken(t *testing.T) {
	files := loadCorpus(t)
	for _, name := range []string{O200kBase, CL100kBase} {
		t.Run(name, func(t *testing.T) {
			ours, err := Get(name)
			if err != nil {
				t.Fatal(err)
			}
			ref := oracle(t, name)
			rng := rand.New(rand.NewPCG(7, 11))
			for _, f := range files {
				text := f.text
				windows := 8
				if !liveWhole() {
					text = text[:min(len(text), 1<<10)]
					windows = 4
				}
				checkSame(t, ours, ref, f.name, text)
				for k := 0; k < windows; k++ {
					a := rng.IntN(len(f.text))
					b := min(len(f.text), a+1+rng.IntN(400))
					checkSame(t, ours, ref, fmt.Sprintf("%s[%d:%d]", f.name, a, b), f.text[a:b])
				}
			}
		})
	}
}

// idsDigest is a short fingerprint of a token sequence.
func idsDigest(ids []int) string {
	h := sha256.New()
	for _, id := range ids {
		fmt.Fprintf(h, "%d,", id)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// TestCorpusGolden compares every whole corpus file with the count and
// digest of tiktoken-go's tokens recorded in testdata/golden.tsv (rewrite
// with -update). On a mismatch it asks the live oracle where they differ.
func TestCorpusGolden(t *testing.T) {
	files := loadCorpus(t)
	golden := map[string]string{}
	if b, err := os.ReadFile("testdata/golden.tsv"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, "\t"); ok && !strings.HasPrefix(line, "#") {
				golden[k] = v
			}
		}
	} else if !*update {
		t.Fatal(err)
	}
	var out strings.Builder
	out.WriteString("# encoding/file\tcount digest of tiktoken-go v0.1.8 EncodeOrdinary ids (go test -run TestCorpusGolden -update)\n")
	for _, name := range []string{O200kBase, CL100kBase} {
		ours, err := Get(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			key := name + "/" + f.name
			if *update {
				ids := oracle(t, name).Encode(f.text, nil)
				fmt.Fprintf(&out, "%s\t%d %s\n", key, len(ids), idsDigest(ids))
				continue
			}
			ids := ours.Encode(f.text, nil)
			got := fmt.Sprintf("%d %s", len(ids), idsDigest(ids))
			want, ok := golden[key]
			if !ok {
				t.Errorf("%s: not in testdata/golden.tsv; run with -update", key)
				continue
			}
			if got != want {
				t.Errorf("%s: got %s, golden %s", key, got, want)
				checkSame(t, ours, oracle(t, name), f.name, f.text) // where they differ
				t.Errorf("%s: the live oracle agrees with us: golden.tsv is stale, run -update", key)
			}
			if n := ours.Count(f.text); n != len(ids) {
				t.Errorf("%s: Count = %d, len(Encode) = %d", key, n, len(ids))
			}
		}
	}
	if *update {
		if err := os.WriteFile("testdata/golden.tsv", []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMatchesTiktokenShort covers short strings built from every class the
// split patterns distinguish: all pairs and all triples (a sample of the
// triples under -short or -race).
func TestMatchesTiktokenShort(t *testing.T) {
	alphabet := []string{
		"a", "Z", "é", "ǅ", "ʰ", "中", "\u0301", "\u0903", "7", "١", "Ⅻ",
		" ", "  ", "\t", "\n", "\r", "\r\n", "\u3000", "\u00a0",
		"'", "s", "L", "!", "/", ".", "😀", "\xff", "'re", "'ll", "'S",
	}
	for _, name := range []string{O200kBase, CL100kBase} {
		t.Run(name, func(t *testing.T) {
			ours, err := Get(name)
			if err != nil {
				t.Fatal(err)
			}
			ref := oracle(t, name)
			rng := rand.New(rand.NewPCG(3, 5))
			for _, a := range alphabet {
				for _, b := range alphabet {
					checkSame(t, ours, ref, "pair", a+b)
					for _, c := range alphabet {
						if !liveWhole() && rng.IntN(8) != 0 {
							continue // a sample of the triples
						}
						checkSame(t, ours, ref, "triple", a+b+c)
					}
				}
			}
		})
	}
}

// TestLongPieces compares pieces long enough for the heap merge with a live
// tiktoken-go (whose own merge is quadratic in them).
func TestLongPieces(t *testing.T) {
	const n = 3000
	tests := []string{
		strings.Repeat("a", n),
		strings.Repeat("ab", n/2),
		strings.Repeat("Aa", n/4) + strings.Repeat("中", n/4),
		strings.Repeat("!", n),
		strings.Repeat(" ", n) + "x",
		strings.Repeat("9", n),
		strings.Repeat("\r\n", n/2),
	}
	for _, name := range []string{O200kBase, CL100kBase} {
		ours, err := Get(name)
		if err != nil {
			t.Fatal(err)
		}
		ref := oracle(t, name)
		for _, text := range tests {
			checkSame(t, ours, ref, fmt.Sprintf("%q…", text[:8]), text)
		}
	}
}
