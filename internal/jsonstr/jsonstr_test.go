package jsonstr

import (
	"bytes"
	"encoding/json"
	"testing"
)

var cases = []string{
	"", "plain", `quote " and \ backslash`, "new\nline\ttab\rcr\bback\fform",
	"\x00\x01\x1f", "<b>&amp;</b>", "héllo wörld 日本語 🎉", "bad \xff\xfe utf8",
	"line\u2028sep\u2029para", "\x7f",
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

func FuzzAppend(f *testing.F) {
	for _, s := range cases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendHTML(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendHTML(%q) = %s, want %s", s, got, want)
		}
		var back string
		if err := json.Unmarshal(Append(nil, s), &back); err != nil {
			t.Fatalf("Append(%q) is not JSON: %v", s, err)
		}
	})
}
