// Command gencorpus writes the long, generated inputs of the differential
// test corpus (testdata/corpus/long_*.txt), deterministically. Run from the
// package folder: go run ./testdata/gencorpus
package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(alphabet []rune, n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	rangeRunes := func(lo, hi rune) []rune {
		var rs []rune
		for r := lo; r <= hi; r++ {
			rs = append(rs, r)
		}
		return rs
	}
	b64 := []rune("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
	files := map[string]string{
		"long_letters.txt": strings.Repeat("a", 12000) + "\n" +
			pick([]rune("aAbBeEtTsSlLmMdD'"), 4000) + "\n" +
			strings.Repeat("HTTPServerErrorHandler", 200),
		"long_base64.txt": pick(b64, 16000) + "==",
		"long_digits.txt": pick([]rune("0123456789"), 12000) + " " + strings.Repeat("0123456789", 300),
		"long_cjk.txt":    pick(rangeRunes(0x4E00, 0x9FFF), 2500) + pick(rangeRunes(0x3041, 0x3096), 1500),
		"long_ws.txt": pick([]rune(" \t\n\r\u3000\u00a0"), 3000) + "word" +
			strings.Repeat(" ", 3000) + "x" + strings.Repeat("\n", 1000) + strings.Repeat("\r\n", 1000) + "end",
		"long_punct.txt": pick([]rune("!@#$%^&*()-=+[]{};:,.<>/?\\|`~\"'"), 4000) + "\n" +
			strings.Repeat("/", 2000) + strings.Repeat("/\n", 1000),
		"long_hex.txt":   pick([]rune("0123456789abcdef"), 16000),
		"long_emoji.txt": pick(append(rangeRunes(0x1F600, 0x1F64F), 0x200D, 0x1F3FD, 0xFE0F), 2000),
		"long_marks.txt": pick(rangeRunes(0x0300, 0x036F), 6000) + pick(rangeRunes(0x0900, 0x097F), 6000),
		"long_mixed.txt": pick([]rune("aZ9 _'sSlLéÉ中ǅʰ\u0301١\t\n\r!/😀\u3000."), 16000),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join("testdata", "corpus", name), []byte(text), 0o644); err != nil {
			panic(err)
		}
	}
}
