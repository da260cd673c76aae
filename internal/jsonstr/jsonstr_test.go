package jsonstr

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"
)

var cases = []string{
	"", "plain", `quote " and \ backslash`, "new\nline\ttab\rcr\bback\fform",
	"\x00\x01\x1f", "<b>&amp;</b>", "héllo wörld 日本語 🎉", "bad \xff\xfe utf8",
	"line\u2028sep\u2029para", "\x7f",
	// Past the first eight bytes (read a word at a time while all are plain).
	"abcdefgh<ijklmno>p&", "abcdefghi\"jklmnopq\\r", "0123456789abcdefé日本", "abcdefgh\x01\x1f\x7f",
	"abcdefghijklmnop\u2028q", "abcdefgh\xffabcdefgh", "abcdefg\n", "abcdefgh", "abcdefghijklmnopqrstuvwxyz012345",
}

func TestAppendHTMLMatchesEncodingJSON(t *testing.T) {
	for _, s := range cases {
		want, _ := json.Marshal(s)
		if got := AppendHTML(nil, s); !bytes.Equal(got, want) {
			t.Errorf("AppendHTML(%q) = %s, want %s", s, got, want)
		}
	}
}

func TestAppendRoundTrips(t *testing.T) {
	for _, s := range cases {
		b := Append([]byte("x"), s)
		var back string
		if err := json.Unmarshal(b[1:], &back); err != nil {
			t.Fatalf("Append(%q) = %s: %v", s, b, err)
		}
		var want string // encoding/json's reading: invalid UTF-8 as U+FFFD
		m, _ := json.Marshal(s)
		_ = json.Unmarshal(m, &want)
		if back != want {
			t.Errorf("Append(%q) decodes to %q", s, back)
		}
		if bytes.ContainsAny(b, "\n\r\t") {
			t.Errorf("Append(%q) left a raw control byte: %q", s, b)
		}
	}
	if got := string(Append(nil, "<&>")); got != `"<&>"` {
		t.Errorf("Append escapes HTML: %s", got)
	}
}

// slogString is how log/slog's JSON handler writes s as an attribute value.
func slogString(s string) []byte {
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey {
			return slog.Attr{}
		}
		return a
	}})
	slog.New(h).Info("", "s", s)
	line := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	return bytes.TrimSuffix(bytes.TrimPrefix(line, []byte(`{"s":`)), []byte("}"))
}

func TestAppendLogMatchesSlog(t *testing.T) {
	for _, s := range cases {
		if got, want := AppendLog(nil, s), slogString(s); !bytes.Equal(got, want) {
			t.Errorf("AppendLog(%q) = %s, want %s", s, got, want)
		}
	}
}

func TestAppendFloatMatchesEncodingJSON(t *testing.T) {
	for _, f := range []float64{0, 1, -1, 0.5, 1.234, 12.345678, 1e-6, 9.99e-7, 1e-7, 1.5e-9, 1e20, 1e21, 1.5e300, -2.5e-10,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 123456789.123, 0.001} {
		want, _ := json.Marshal(f)
		if got := AppendFloat(nil, f); !bytes.Equal(got, want) {
			t.Errorf("AppendFloat(%v) = %s, want %s", f, got, want)
		}
	}
}

func TestAppendMilliMatchesAppendFloat(t *testing.T) {
	ns := []int64{0, 1, 5, 10, 99, 100, 999, 1000, 1001, 1010, 1100, 1234, 12345, 999999, 1000000,
		-1, -1000, -1234, 1<<43 - 1, -(1<<43 - 1), 1 << 43, -(1 << 43), 1 << 53, math.MaxInt64, math.MinInt64 + 1}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		ns = append(ns, r.Int64N(1<<44)-1<<43, r.Int64N(1_000_000))
	}
	for _, n := range ns {
		if got, want := AppendMilli(nil, n), AppendFloat(nil, float64(n)/1000); !bytes.Equal(got, want) {
			t.Fatalf("AppendMilli(%d) = %s, AppendFloat %s", n, got, want)
		}
	}
}

func FuzzAppend(f *testing.F) {
	for _, s := range cases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendHTML(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendHTML(%q) = %s, want %s", s, got, want)
		}
		if got, want := AppendLog(nil, s), slogString(s); !bytes.Equal(got, want) {
			t.Fatalf("AppendLog(%q) = %s, want %s", s, got, want)
		}
		var back string
		if err := json.Unmarshal(Append(nil, s), &back); err != nil {
			t.Fatalf("Append(%q) is not JSON: %v", s, err)
		}
	})
}
