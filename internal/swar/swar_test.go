package swar

import (
	"strings"
	"testing"
)

// TestFirstFlag compares each test's lowest flag with a byte loop, for
// every byte value at every place of a word of other bytes.
func TestFirstFlag(t *testing.T) {
	tests := []struct {
		name  string
		flags func(x uint64) uint64
		hit   func(b byte) bool
	}{
		{"Eq quote", func(x uint64) uint64 { return Eq(x, '"') }, func(b byte) bool { return b == '"' }},
		{"Eq backslash", func(x uint64) uint64 { return Eq(x, '\\') }, func(b byte) bool { return b == '\\' }},
		{"Less 0x20", func(x uint64) uint64 { return Less(x, 0x20) }, func(b byte) bool { return b < 0x20 }},
		{"High", High, func(b byte) bool { return b >= 0x80 }},
	}
	fills := []byte{'a', 0, 0x1f, 0x20, '"', '\\', 0x7f, 0x80, 0xff, 0x01}
	for _, tt := range tests {
		for _, fill := range fills {
			for v := 0; v < 256; v++ {
				for at := range 8 {
					w := []byte(strings.Repeat(string(fill), 8))
					w[at] = byte(v)
					want := 8
					for i, b := range w {
						if tt.hit(b) {
							want = i
							break
						}
					}
					if got := First(tt.flags(Load(string(w)))); got != want {
						t.Fatalf("%s: word %q: first flag at %d, want %d", tt.name, w, got, want)
					}
				}
			}
		}
	}
}
