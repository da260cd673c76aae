package tokenizer

import (
	"slices"
	"testing"
)

// FuzzEncodeMatchesTiktoken checks, for both encodings, that Encode gives
// exactly tiktoken-go's tokens and Count their number. Seeds: the reference
// strings, the start of every corpus file and testdata/fuzz.
//
//	go test -run '^$' -fuzz FuzzEncodeMatchesTiktoken -fuzztime 5m ./trim/tokenizer
func FuzzEncodeMatchesTiktoken(f *testing.F) {
	for _, c := range loadReference(f) {
		f.Add(c.text)
	}
	for _, c := range loadCorpus(f) {
		f.Add(c.text[:min(len(c.text), 512)])
	}
	encs := map[string]Encoding{}
	for _, name := range []string{O200kBase, CL100kBase} {
		e, err := Get(name)
		if err != nil {
			f.Fatal(err)
		}
		encs[name] = e
		oracle(f, name)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 16<<10 {
			t.Skip("long inputs make the oracle quadratic")
		}
		for name, ours := range encs {
			want := oracle(t, name).Encode(text, nil)
			got := ours.Encode(text, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("%s Encode(%q):\n got %v\nwant %v", name, text, got, want)
			}
			if n := ours.Count(text); n != len(want) {
				t.Fatalf("%s Count(%q) = %d, want %d", name, text, n, len(want))
			}
		}
	})
}
