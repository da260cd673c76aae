package tokenizer

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

type refCase struct {
	encoding string
	text     string
	ids      []int
}

// loadReference reads testdata/reference.tsv: encoding, Go-quoted text and the
// ids tiktoken-go gives (written by testdata/genref).
func loadReference(t testing.TB) []refCase {
	t.Helper()
	f, err := os.Open("testdata/reference.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []refCase
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.Split(line, "\t")
		if len(cols) != 3 {
			t.Fatalf("reference.tsv: bad line %q", line)
		}
		text, err := strconv.Unquote(cols[1])
		if err != nil {
			t.Fatalf("reference.tsv: unquote %s: %v", cols[1], err)
		}
		var ids []int
		if cols[2] != "" {
			for _, s := range strings.Split(cols[2], ",") {
				id, err := strconv.Atoi(s)
				if err != nil {
					t.Fatalf("reference.tsv: id %q: %v", s, err)
				}
				ids = append(ids, id)
			}
		}
		out = append(out, refCase{cols[0], text, ids})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("reference.tsv: only %d cases", len(out))
	}
	return out
}

func TestReference(t *testing.T) {
	for _, c := range loadReference(t) {
		enc, err := Get(c.encoding)
		if err != nil {
			t.Fatal(err)
		}
		got := enc.Encode(c.text, nil)
		if !slices.Equal(got, c.ids) {
			t.Errorf("%s Encode(%q) = %v, want %v", c.encoding, c.text, got, c.ids)
		}
		if n := enc.Count(c.text); n != len(c.ids) {
			t.Errorf("%s Count(%q) = %d, want %d", c.encoding, c.text, n, len(c.ids))
		}
	}
}

func TestFixedCounts(t *testing.T) {
	tests := []struct {
		encoding, text string
		want           int
	}{
		{O200kBase, "hello world", 2},
		{CL100kBase, "hello world", 2},
		{O200kBase, "", 0},
		{CL100kBase, "<|endoftext|>", 7},
		{O200kBase, "<|endoftext|>", 7},
	}
	for _, tt := range tests {
		enc, err := Get(tt.encoding)
		if err != nil {
			t.Fatal(err)
		}
		if enc.Name() != tt.encoding {
			t.Errorf("Name() = %q, want %q", enc.Name(), tt.encoding)
		}
		if got := enc.Count(tt.text); got != tt.want {
			t.Errorf("%s Count(%q) = %d, want %d", tt.encoding, tt.text, got, tt.want)
		}
	}
}

func TestEncodeAppends(t *testing.T) {
	enc, err := Get(O200kBase)
	if err != nil {
		t.Fatal(err)
	}
	got := enc.Encode("hello world", []int{7})
	if want := []int{7, 24912, 2375}; !slices.Equal(got, want) {
		t.Errorf("Encode appended %v, want %v", got, want)
	}
}

func TestGetUnknown(t *testing.T) {
	for _, name := range []string{"", "p50k_base", "gpt2", "O200K_BASE"} {
		if enc, err := Get(name); err == nil || enc != nil {
			t.Errorf("Get(%q) = %v, %v; want nil and an error", name, enc, err)
		}
	}
}

// TestGetConcurrent loads and uses both encodings from many goroutines at
// once, on short and long pieces (the pooled heap merge), for -race.
func TestGetConcurrent(t *testing.T) {
	Preload(O200kBase, CL100kBase, "nope")
	texts := []string{"hello world", strings.Repeat("abc", 400) + " x", "I'm here\n\n" + strings.Repeat("中", 300)}
	want := map[string][]int{}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, name := range []string{O200kBase, CL100kBase} {
				enc, err := Get(name)
				if err != nil {
					t.Error(err)
					return
				}
				if n := enc.Count("hello world"); n != 2 {
					t.Errorf("%s: Count = %d, want 2", name, n)
				}
				for _, text := range texts {
					enc.Encode(text, nil)
				}
			}
		}()
	}
	wg.Wait()
	for _, name := range []string{O200kBase, CL100kBase} {
		enc, _ := Get(name)
		for _, text := range texts {
			want[name+text] = enc.Encode(text, nil)
		}
	}
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, name := range []string{O200kBase, CL100kBase} {
				enc, _ := Get(name)
				for _, text := range texts {
					if got := enc.Encode(text, nil); !slices.Equal(got, want[name+text]) {
						t.Errorf("%s: concurrent Encode differs on %.20q", name, text)
					}
				}
			}
		}()
	}
	wg.Wait()
}
