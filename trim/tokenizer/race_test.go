//go:build race

package tokenizer

// raceEnabled is true under the race detector, which makes tiktoken-go (the
// test oracle) about ten times slower.
const raceEnabled = true
