package config

import (
	"os"
	"testing"
)

func BenchmarkCostMicros(b *testing.B) {
	for _, bc := range []struct {
		name string
		p    Price
	}{{"literal", price("0.15", "0.60")}, {"loaded", NewPrice(price("0.15", "0.60").Input, price("0.15", "0.60").Output)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				_ = bc.p.CostMicros(1500+int64(i&1023), 300)
			}
		})
	}
}

func BenchmarkParseExample(b *testing.B) {
	data, err := os.ReadFile("../examples/taskgate.yaml")
	if err != nil {
		b.Fatal(err)
	}
	lookup := func(name string) (string, bool) {
		if name == "REDIS_URL" {
			return "redis://localhost:6379/0", true
		}
		return "value-of-" + name, true
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, lookup); err != nil {
			b.Fatal(err)
		}
	}
}
