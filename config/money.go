package config

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/shopspring/decimal"
)

// MicrosPerDollar is the number of micro-dollars in a dollar.
const MicrosPerDollar = 1_000_000

// errMoney* are the reasons ParseDollars and price parsing fail.
var (
	errMoneyNegative = errors.New("must not be negative")
	errMoneyPlaces   = errors.New("has more than 6 decimal places; limits count whole micro-dollars")
	errMoneyRange    = errors.New("is too large")
)

// checkDecimal checks that s is a plain non-negative decimal number:
// digits, optionally a point and more digits ("20", "20.00", "0.15").
func checkDecimal(s string) error {
	if strings.HasPrefix(s, "-") && len(s) > 1 {
		if checkDecimal(s[1:]) == nil {
			return fmt.Errorf("%q %w", s, errMoneyNegative)
		}
	}
	intPart, frac, hasPoint := strings.Cut(s, ".")
	if intPart == "" || !allDigits(intPart) || (hasPoint && (frac == "" || !allDigits(frac))) {
		return fmt.Errorf(`%q is not a dollar amount like "20.00"`, s)
	}
	return nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ParseDollars parses a dollar string ("20.00", "0.15", "3") into
// micro-dollars. It refuses negative amounts, signs, exponents, more than
// six decimal places and amounts that overflow int64 micro-dollars.
func ParseDollars(s string) (int64, error) {
	if err := checkDecimal(s); err != nil {
		return 0, fmt.Errorf("parse dollars: %w", err)
	}
	intPart, frac, _ := strings.Cut(s, ".")
	if len(frac) > 6 {
		return 0, fmt.Errorf("parse dollars: %q %w", s, errMoneyPlaces)
	}
	intPart = strings.TrimLeft(intPart, "0")
	if intPart == "" {
		intPart = "0"
	}
	whole, err := strconv.ParseInt(intPart, 10, 64)
	if err != nil || whole > math.MaxInt64/MicrosPerDollar {
		return 0, fmt.Errorf("parse dollars: %q %w", s, errMoneyRange)
	}
	frac += strings.Repeat("0", 6-len(frac))
	f, _ := strconv.ParseInt(frac, 10, 64) // six digits: cannot fail
	m := whole * MicrosPerDollar
	if m > math.MaxInt64-f {
		return 0, fmt.Errorf("parse dollars: %q %w", s, errMoneyRange)
	}
	return m + f, nil
}

// ParsePrice parses a price in dollars ("0.15", "0"): an exact decimal of
// any precision, not negative.
func ParsePrice(s string) (decimal.Decimal, error) {
	d, err := parseDecimal(s)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("parse price: %w", err)
	}
	return d, nil
}

func parseDecimal(s string) (decimal.Decimal, error) {
	if len(s) > 64 {
		return decimal.Decimal{}, fmt.Errorf("%q is too long for a price", s)
	}
	if err := checkDecimal(s); err != nil {
		return decimal.Decimal{}, err
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%q is not a decimal number: %w", s, err)
	}
	return d, nil
}

// FormatMicros renders micro-dollars as dollars with six decimals:
// 4 → "0.000004", 20000000 → "20.000000", -5 → "-0.000005".
func FormatMicros(m int64) string {
	var buf [32]byte
	return string(AppendMicros(buf[:0], m))
}

// AppendMicros appends FormatMicros(m) to dst.
func AppendMicros(dst []byte, m int64) []byte {
	u := uint64(m)
	if m < 0 {
		dst = append(dst, '-')
		u = uint64(-(m + 1)) + 1 // safe for MinInt64
	}
	dst = strconv.AppendUint(dst, u/MicrosPerDollar, 10)
	frac := u % MicrosPerDollar
	return append(dst, '.', '0'+byte(frac/100000), '0'+byte(frac/10000%10), '0'+byte(frac/1000%10),
		'0'+byte(frac/100%10), '0'+byte(frac/10%10), '0'+byte(frac%10))
}

var maxInt64Dec = decimal.NewFromInt(math.MaxInt64)

// ceilMicros rounds a micro-dollar decimal up to a whole micro-dollar,
// saturating at MaxInt64.
func ceilMicros(d decimal.Decimal) int64 {
	c := d.Ceil()
	if c.GreaterThanOrEqual(maxInt64Dec) {
		return math.MaxInt64
	}
	if c.Sign() <= 0 {
		return 0
	}
	return c.IntPart()
}

// fastPrice is a price in nano-dollars per million tokens.
type fastPrice struct {
	ok       bool
	in, out  uint64
	forInput decimal.Decimal // the Input it was made from
	forOut   decimal.Decimal // the Output it was made from
}

const nanoShift = 9

// toNano converts d to an integer count of 1e-9 units, if exact and in range.
func toNano(d decimal.Decimal) (uint64, bool) {
	if d.Sign() < 0 || d.Exponent() < -nanoShift {
		return 0, false
	}
	n := d.Shift(nanoShift)
	if !n.IsInteger() || n.GreaterThan(maxInt64Dec) {
		return 0, false
	}
	return uint64(n.IntPart()), true
}

// NewPrice returns a price of input and output dollars per million tokens,
// prepared for a fast CostMicros. A Price built as a literal works too,
// only slower.
func NewPrice(input, output decimal.Decimal) Price {
	p := Price{Input: input, Output: output}
	p.prepare()
	return p
}

// prepare fills p.fast when both prices fit in nano-dollars.
func (p *Price) prepare() {
	in, ok1 := toNano(p.Input)
	out, ok2 := toNano(p.Output)
	p.fast = fastPrice{ok: ok1 && ok2, in: in, out: out, forInput: p.Input, forOut: p.Output}
}

// CostMicros is the cost of a call in micro-dollars: the exact decimal sum
// inputTokens × Input + outputTokens × Output (prices are dollars per million
// tokens, so the sum is in micro-dollars), rounded up once to a whole
// micro-dollar. Negative counts count as 0; a sum past MaxInt64 saturates.
// 1500 input and 300 output tokens at "0.15"/"0.60" cost 405 micro-dollars
// ("0.000405").
func (p Price) CostMicros(inputTokens, outputTokens int64) int64 {
	inputTokens, outputTokens = max(inputTokens, 0), max(outputTokens, 0)
	if f := &p.fast; f.ok && f.forInput.Equal(p.Input) && f.forOut.Equal(p.Output) {
		if v, ok := fastCost(f.in, f.out, uint64(inputTokens), uint64(outputTokens)); ok {
			return v
		}
	}
	sum := p.Input.Mul(decimal.NewFromInt(inputTokens)).Add(p.Output.Mul(decimal.NewFromInt(outputTokens)))
	return ceilMicros(sum)
}

// fastCost computes ceil((in×inNano + out×outNano) / 1e9) in 128 bits.
func fastCost(inNano, outNano, in, out uint64) (int64, bool) {
	h1, l1 := bits.Mul64(in, inNano)
	h2, l2 := bits.Mul64(out, outNano)
	lo, carry := bits.Add64(l1, l2, 0)
	hi, c2 := bits.Add64(h1, h2, carry)
	const div = 1_000_000_000
	if c2 != 0 || hi >= div {
		return 0, false
	}
	q, r := bits.Div64(hi, lo, div)
	if r > 0 {
		q++
	}
	if q > math.MaxInt64 || q == 0 && r > 0 {
		return 0, false
	}
	return int64(q), true
}

// ImageCostMicros is the cost of n generated images in micro-dollars,
// n × Image dollars, rounded up once. It is 0 when n ≤ 0 or the price has
// no image price.
func (p Price) ImageCostMicros(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return ceilMicros(p.Image.Mul(decimal.NewFromInt(n)).Shift(6))
}
