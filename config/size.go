package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var sizeUnits = map[string]int64{
	"":    1,
	"B":   1,
	"KB":  1000,
	"MB":  1000 * 1000,
	"GB":  1000 * 1000 * 1000,
	"TB":  1000 * 1000 * 1000 * 1000,
	"KiB": 1 << 10,
	"MiB": 1 << 20,
	"GiB": 1 << 30,
	"TiB": 1 << 40,
}

// ParseSize parses a byte size: a whole number, optionally followed (with or
// without a space) by one of B, KB, MB, GB, TB (powers of 1000) or KiB, MiB,
// GiB, TiB (powers of 1024): "32MiB", "512KiB", "10MB", "1024".
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	mult, ok := sizeUnits[unit]
	if num == "" || !ok {
		return 0, fmt.Errorf(`%q is not a size like "32MiB", "512KiB", "10MB" or "1024" (bytes)`, s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(n * mult), nil
}

// String renders the size in the largest binary unit that divides it
// exactly ("32MiB", "1500B" → "1500").
func (s Size) String() string {
	for _, u := range []string{"TiB", "GiB", "MiB", "KiB"} {
		if m := sizeUnits[u]; s != 0 && int64(s)%m == 0 {
			return strconv.FormatInt(int64(s)/m, 10) + u
		}
	}
	return strconv.FormatInt(int64(s), 10)
}
