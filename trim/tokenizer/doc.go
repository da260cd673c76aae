// Package tokenizer counts and encodes prompt text with the BPE encodings the
// gateway's endpoints use (o200k_base, cl100k_base), offline and exactly as
// tiktoken-go's EncodeOrdinary does, for trimming chat histories and
// estimating costs (DESIGN.md §5, §6).
//
// Text is encoded as ordinary text: special tokens such as "<|endoftext|>"
// are not recognized and are encoded like any other text. Invalid UTF-8 is
// encoded as tiktoken-go encodes it: each byte of a broken sequence as
// U+FFFD. Get loads an encoding lazily, once; Preload starts that early, in
// the background. Encodings are safe for concurrent use.
//
// The implementation is pure Go and needs no network: a hand-written
// pre-tokenizer for each encoding's split pattern (split.go), the ranks of
// tiktoken-go-loader's embedded rank files in one byte arena with an
// open-addressing index (vocab.go), and a byte-pair merge that allocates
// nothing per piece and stays O(n log n) on long runs (bpe.go). It gives the
// same token ids as tiktoken-go, which the tests use as their oracle (and
// the only place tiktoken-go is imported); docs/PERFORMANCE.md has the
// figures.
//
// The package imports only the standard library and tiktoken-go-loader's
// assets; it must not import fiber, redis, prometheus or other taskgate
// packages.
package tokenizer
