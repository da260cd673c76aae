package tokenizer

import (
	"fmt"
	"sync"
)

// Encoding counts and encodes text with one BPE encoding, as ordinary text
// (special tokens such as "<|endoftext|>" are NOT recognized; they are encoded as plain text).
type Encoding interface {
	// Name is the encoding's name, as given to Get.
	Name() string
	// Count returns the number of tokens of text: len(Encode(text, nil)).
	Count(text string) int
	// Encode appends the token ids of text to dst and returns the result.
	Encode(text string, dst []int) []int // appends token ids to dst
}

// Names of the supported encodings.
const (
	O200kBase  = "o200k_base"
	CL100kBase = "cl100k_base"
)

// lazy is an encoding loaded on first use.
type lazy struct {
	once sync.Once
	enc  Encoding
	err  error
}

// encodings holds every supported encoding; the map is never written.
var encodings = map[string]*lazy{
	O200kBase:  {},
	CL100kBase: {},
}

// Get returns the named encoding ("o200k_base" or "cl100k_base"), loaded lazily
// once on first use and safe for concurrent use. Unknown name: error.
func Get(name string) (Encoding, error) {
	l, ok := encodings[name]
	if !ok {
		return nil, fmt.Errorf("tokenizer: unknown encoding %q (want o200k_base or cl100k_base)", name)
	}
	l.once.Do(func() {
		l.enc, l.err = load(name)
		if l.err != nil {
			l.err = fmt.Errorf("tokenizer: load %s: %w", name, l.err)
		}
	})
	return l.enc, l.err
}

// Preload starts loading the named encodings in the background (never blocks).
// Unknown names are ignored; Get reports them.
func Preload(names ...string) {
	for _, name := range names {
		if _, ok := encodings[name]; ok {
			go Get(name) //nolint:errcheck // Get caches the error for later callers.
		}
	}
}

// load builds the named encoding from tiktoken-go-loader's embedded rank file.
func load(name string) (Encoding, error) {
	v, err := loadVocab(name)
	if err != nil {
		return nil, err
	}
	return &bpe{name: name, o200k: name == O200kBase, v: v, c: loadClasses()}, nil
}
