// Package swar tests eight bytes at a time in a 64-bit word ("SIMD within a
// register"), for the byte scans of the hot path (JSON strings, journal
// text): a word with none of the bytes looked for is passed in a few
// instructions instead of eight rounds of a byte loop.
package swar

import "math/bits"

const (
	lsb = 0x0101010101010101 // the low bit of each byte
	msb = 0x8080808080808080 // the high bit of each byte
)

// Load reads the first eight bytes of w as a little-endian word (one load
// on the platforms that allow unaligned loads). w must hold eight bytes.
func Load[T string | []byte](w T) uint64 {
	_ = w[7]
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// Eq flags the bytes of x equal to b: the high bit of such a byte is set.
// A byte above a flagged one may be flagged wrongly, never one below, so
// the lowest flag (see First) is always right.
func Eq(x uint64, b byte) uint64 {
	y := x ^ (lsb * uint64(b))
	return (y - lsb) &^ y & msb
}

// Less flags the bytes of x below n (n <= 128), as Eq flags: the lowest
// flag is always right.
func Less(x uint64, n byte) uint64 {
	return (x - lsb*uint64(n)) &^ x & msb
}

// High flags the bytes of x at or above 0x80 (every flag right).
func High(x uint64) uint64 { return x & msb }

// First is the index (0-7) of the lowest flagged byte of flags, 8 if none.
func First(flags uint64) int { return bits.TrailingZeros64(flags) >> 3 }
