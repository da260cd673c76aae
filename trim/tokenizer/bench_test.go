package tokenizer

import (
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// benchInputs returns the benchmark texts: English prose, Go code, a 100 KB
// prompt mixing prose, code, YAML, multilingual text and edge cases, and
// 100 KB of random characters from many scripts (the worst case: few pieces
// are tokens).
func benchInputs(b *testing.B) []corpusFile {
	b.Helper()
	read := func(name string) string {
		t, err := os.ReadFile("testdata/corpus/" + name)
		if err != nil {
			b.Fatal(err)
		}
		return string(t)
	}
	prose := read("prose.txt")
	prose = strings.Repeat(prose, 8) // ~19 KB
	code := read("strings.go.txt")
	var prompt strings.Builder
	for prompt.Len() < 100_000 {
		for _, n := range []string{"design.md", "prose.txt", "strings.go.txt", "encoder.py.txt", "multilingual.txt", "edge.txt"} {
			prompt.WriteString(read(n))
		}
	}
	return []corpusFile{{"prose", prose}, {"code", code}, {"prompt100KB", prompt.String()[:100_000]}, {"charsoup100KB", charSoup(100_000)}}
}

// charSoup returns n bytes or so of lines of 50 random characters drawn from
// words, digits, spaces, punctuation, accented letters, CJK, emoji and
// invisible characters.
func charSoup(n int) string {
	r := rand.New(rand.NewPCG(1, 1))
	pools := [][]rune{
		[]rune("the quick brown fox jumps over a lazy dog "),
		[]rune("0123456789"), []rune(" \t\n\n  "), []rune(".,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`"),
		[]rune("éèàçüößñ"), []rune("日本語中文한국어"), []rune("🙂🚀👍🏽🇫🇷"), []rune("\u200b\u00a0\ufeff"),
	}
	var b strings.Builder
	for b.Len() < n {
		for range 50 {
			p := pools[r.IntN(len(pools))]
			b.WriteRune(p[r.IntN(len(p))])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func benchEncodings(b *testing.B) []Encoding {
	var out []Encoding
	for _, name := range []string{O200kBase, CL100kBase} {
		e, err := Get(name)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, e, oracle(b, name))
	}
	return out
}

func impl(e Encoding) string {
	if _, ok := e.(*tiktokenEncoding); ok {
		return "tiktoken"
	}
	return "ours"
}

func BenchmarkEncode(b *testing.B) {
	inputs := benchInputs(b)
	for _, e := range benchEncodings(b) {
		for _, in := range inputs {
			b.Run(e.Name()+"/"+in.name+"/"+impl(e), func(b *testing.B) {
				b.SetBytes(int64(len(in.text)))
				b.ReportAllocs()
				var dst []int
				cpu := startCPU()
				for b.Loop() {
					dst = e.Encode(in.text, dst[:0])
				}
				cpu.report(b, len(in.text))
			})
		}
	}
}

func BenchmarkCount(b *testing.B) {
	inputs := benchInputs(b)
	for _, e := range benchEncodings(b) {
		for _, in := range inputs {
			b.Run(e.Name()+"/"+in.name+"/"+impl(e), func(b *testing.B) {
				b.SetBytes(int64(len(in.text)))
				b.ReportAllocs()
				cpu := startCPU()
				for b.Loop() {
					e.Count(in.text)
				}
				cpu.report(b, len(in.text))
			})
		}
	}
}

// cpuClock measures the process's CPU time (user + system) over a benchmark,
// which other load on the machine inflates far less than wall time.
type cpuClock struct{ start time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock{processCPU()} }

// report adds cpu-ns/op and cpu-MB/s (MB per CPU second) to b's results.
func (c cpuClock) report(b *testing.B, bytes int) {
	d := processCPU() - c.start
	if d <= 0 || b.N == 0 {
		return
	}
	perOp := float64(d.Nanoseconds()) / float64(b.N)
	b.ReportMetric(perOp, "cpu-ns/op")
	b.ReportMetric(float64(bytes)/perOp*1e3, "cpu-MB/s")
}

// heapAfter returns the growth of the live heap, in bytes, across f (what
// f's result keeps alive), and the bytes f allocated in all.
func heapAfter(f func() any) (live, allocated int64) {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	x := f()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(x)
	return int64(m1.HeapAlloc) - int64(m0.HeapAlloc), int64(m1.TotalAlloc - m0.TotalAlloc)
}

// BenchmarkLoad reports the heap an encoding keeps after loading (heap-MB),
// what loading allocates in all (alloc-MB), and the time of its first load (first-load-ms; for ours also ns/op over
// repeated loads). Run it alone (-run '^$' -bench Load): tiktoken-go caches
// its ranks per process, so only its first load in a process is measured.
func BenchmarkLoad(b *testing.B) {
	for _, name := range []string{O200kBase, CL100kBase} {
		b.Run(name+"/ours", func(b *testing.B) {
			c := loadClasses()
			classBytes := int64(unsafe.Sizeof(*c)) + int64(len(c.blocks))
			var first time.Duration
			heap, alloc := heapAfter(func() any {
				start := time.Now()
				e, err := load(name)
				first = time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				return e
			})
			for b.Loop() {
				if _, err := load(name); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(heap+classBytes)/1e6, "heap-MB")
			b.ReportMetric(float64(alloc)/1e6, "alloc-MB")
			b.ReportMetric(float64(first.Microseconds())/1e3, "first-load-ms")
		})
		b.Run(name+"/tiktoken", func(b *testing.B) {
			oracleMu.Lock()
			_, loaded := oracles[name]
			oracleMu.Unlock()
			if loaded {
				b.Skip("tiktoken-go already loaded in this process")
			}
			var first time.Duration
			heap, alloc := heapAfter(func() any {
				start := time.Now()
				e := oracle(b, name)
				first = time.Since(start)
				return e
			})
			for b.Loop() {
				// Nothing: later loads would reuse tiktoken-go's cached ranks.
			}
			b.ReportMetric(float64(first.Nanoseconds()), "ns/op")
			b.ReportMetric(float64(heap)/1e6, "heap-MB")
			b.ReportMetric(float64(alloc)/1e6, "alloc-MB")
			b.ReportMetric(float64(first.Microseconds())/1e3, "first-load-ms")
		})
	}
}

// BenchmarkCorpusFiles counts every corpus file with ours, o200k_base: the
// long generated runs show the heap merge's speed.
func BenchmarkCorpusFiles(b *testing.B) {
	e, err := Get(O200kBase)
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range loadCorpus(b) {
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(len(f.text)))
			cpu := startCPU()
			for b.Loop() {
				e.Count(f.text)
			}
			cpu.report(b, len(f.text))
		})
	}
}
