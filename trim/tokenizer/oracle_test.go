package tokenizer

import (
	"sync"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// tiktokenEncoding is an Encoding backed by tiktoken-go: the oracle the
// package is tested against.
type tiktokenEncoding struct {
	name string
	tk   *tiktoken.Tiktoken
}

func (e *tiktokenEncoding) Name() string { return e.name }

func (e *tiktokenEncoding) Count(text string) int { return len(e.tk.EncodeOrdinary(text)) }

func (e *tiktokenEncoding) Encode(text string, dst []int) []int {
	return append(dst, e.tk.EncodeOrdinary(text)...)
}

var (
	oracleMu sync.Mutex
	oracles  = map[string]*tiktokenEncoding{}
)

// oracle returns tiktoken-go's encoding of the name, with the offline rank
// files, loaded once per test binary. Under the race detector it skips the
// test: tiktoken-go then takes several seconds to load and is ten times
// slower, and what these tests check does not involve goroutines;
// testdata/golden.tsv and reference.tsv, which hold tiktoken-go's results,
// still cover the corpus there.
func oracle(t testing.TB, name string) *tiktokenEncoding {
	t.Helper()
	if raceEnabled {
		t.Skip("tiktoken-go oracle skipped under -race (see golden.tsv)")
	}
	oracleMu.Lock()
	defer oracleMu.Unlock()
	if e, ok := oracles[name]; ok {
		return e
	}
	tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader())
	tk, err := tiktoken.GetEncoding(name)
	if err != nil {
		t.Fatalf("tiktoken-go %s: %v", name, err)
	}
	e := &tiktokenEncoding{name: name, tk: tk}
	oracles[name] = e
	return e
}
