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
// files, loaded once per test binary.
func oracle(t testing.TB, name string) *tiktokenEncoding {
	t.Helper()
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
