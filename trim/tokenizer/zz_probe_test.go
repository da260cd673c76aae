package tokenizer

import "testing"

func TestZZProbe(t *testing.T) {
	for _, name := range []string{O200kBase, CL100kBase} {
		v, _ := loadVocab(name)
		total, maxp := 0, 0
		hist := map[int]int{}
		for r := 0; r+1 < len(v.offs); r++ {
			s := v.token(uint32(r))
			i0, _, k := v.probe(s)
			h := hashString(s, k)
			_ = i0
			p := 0
			for i := uint32(h) & v.mask; ; i = (i + 1) & v.mask {
				p++
				if uint32(v.slots[i].meta)-1 == uint32(r) {
					break
				}
			}
			total += p
			hist[min(p, 20)]++
			maxp = max(maxp, p)
		}
		t.Logf("%s: avg probe %.2f max %d hist %v slots %d", name, float64(total)/float64(len(v.offs)-1), maxp, hist, len(v.slots))
	}
}
