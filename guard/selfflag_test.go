package guard

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

const purpose = "Count the stock items visible in shelf photos."

func TestInstruction(t *testing.T) {
	for _, p := range []string{purpose, `Answer "billing" questions; {json} & <tags> stay verbatim.`, "Zähle Kisten — 箱を数える"} {
		in := Instruction(p)
		if !strings.Contains(in, p) {
			t.Errorf("Instruction(%q) = %q: purpose not verbatim", p, in)
		}
		if !strings.Contains(in, Marker) {
			t.Errorf("Instruction(%q) = %q: no marker", p, in)
		}
		if !strings.Contains(in, "begin your answer with this exact text: "+Marker+"\n") {
			t.Errorf("Instruction(%q): does not ask to begin with the exact marker", p)
		}
		if !strings.Contains(in, "do not mention") {
			t.Errorf("Instruction(%q): does not ask to stay silent otherwise", p)
		}
	}
}

// golden compares got with testdata/inject/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "inject", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n got %s\nwant %s", name, got, want)
	}
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "inject", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestInjectChat(t *testing.T) {
	for _, name := range []string{"chat_basic", "chat_empty", "chat_pretty"} {
		t.Run(name, func(t *testing.T) {
			in := readFixture(t, name+".json")
			out, err := InjectChat(in, purpose)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(out) {
				t.Fatalf("output is not valid JSON: %s", out)
			}
			golden(t, name+".golden.json", out)

			// The first message is the instruction; the rest is the input.
			var got, orig map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(in, &orig); err != nil {
				t.Fatal(err)
			}
			msgs := got["messages"].([]any)
			first := msgs[0].(map[string]any)
			if first["role"] != "system" || first["content"] != Instruction(purpose) {
				t.Errorf("first message = %v", first)
			}
			got["messages"] = msgs[1:]
			if !reflect.DeepEqual(got, orig) {
				t.Errorf("other content changed:\n got %v\nwant %v", got, orig)
			}
			// Every input byte is kept, in order, around the inserted message.
			i := bytes.Index(out, []byte(`{"role":"system","content":`))
			j := i + bytes.Index(out[i:], []byte(`"}`)) + 2
			if j < len(out) && out[j] == ',' {
				j++
			}
			if rebuilt := append(append([]byte{}, out[:i]...), out[j:]...); !bytes.Equal(rebuilt, in) {
				t.Errorf("bytes around the insert differ:\n got %s\nwant %s", rebuilt, in)
			}
		})
	}
}

func TestInjectChatErrors(t *testing.T) {
	for _, body := range []string{``, `[]`, `"x"`, `{"model":"m"}`, `{"messages":"hi"}`, `{"messages":{"role":"user"}}`, `{"messages":null}`} {
		if out, err := InjectChat([]byte(body), purpose); err == nil {
			t.Errorf("InjectChat(%s) = %s, want an error", body, out)
		}
	}
}

func TestInjectResponses(t *testing.T) {
	cases := []struct {
		name, want string
	}{
		{"responses_none", Instruction(purpose)},
		{"responses_null", Instruction(purpose)},
		{"responses_existing", Instruction(purpose) + "\n\nAnswer in \"German\".\nBe brief."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := readFixture(t, c.name+".json")
			out, err := InjectResponses(in, purpose)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, c.name+".golden.json", out)
			var got, orig map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("output is not valid JSON: %v: %s", err, out)
			}
			if err := json.Unmarshal(in, &orig); err != nil {
				t.Fatal(err)
			}
			if got["instructions"] != c.want {
				t.Errorf("instructions = %q, want %q", got["instructions"], c.want)
			}
			delete(got, "instructions")
			delete(orig, "instructions")
			if !reflect.DeepEqual(got, orig) {
				t.Errorf("other fields changed:\n got %v\nwant %v", got, orig)
			}
		})
	}
}

func TestInjectResponsesErrors(t *testing.T) {
	for _, body := range []string{``, `[]`, `{"instructions":5}`, `{"instructions":["a"]}`} {
		if out, err := InjectResponses([]byte(body), purpose); err == nil {
			t.Errorf("InjectResponses(%s) = %s, want an error", body, out)
		}
	}
}

func TestStripMarker(t *testing.T) {
	cases := []struct {
		in, want string
		flagged  bool
	}{
		{"", "", false},
		{"hello", "hello", false},
		{"  hello", "  hello", false},
		{Marker, "", true},
		{Marker + " This is not about stock.", "This is not about stock.", true},
		{Marker + "\n\n  text", "text", true},
		{" \n\t" + Marker + " text", "text", true},
		{Marker + "text", "text", true},
		{Marker + " " + Marker + " x", Marker + " x", true}, // only the leading one
		{"[[off-purpose]", "[[off-purpose]", false},
		{"[[off-purpose]]", "", true},
		{"[[OFF-PURPOSE]] x", "[[OFF-PURPOSE]] x", false},
		{"x " + Marker, "x " + Marker, false},
		{"\u00a0\u3000" + Marker + "\u2003ä", "ä", true}, // unicode spaces
		{Marker + "\u00a0", "", true},
	}
	for _, c := range cases {
		got, flagged := StripMarker(c.in)
		if got != c.want || flagged != c.flagged {
			t.Errorf("StripMarker(%q) = %q, %v; want %q, %v", c.in, got, flagged, c.want, c.flagged)
		}
	}
}

func TestMarkerStripperSteps(t *testing.T) {
	cases := []struct {
		name    string
		deltas  []string
		want    []string // Feed's result for each delta
		flush   string
		flagged bool
	}{
		{"plain text passes at once", []string{"Hello", " world"}, []string{"Hello", " world"}, "", false},
		{"empty deltas", []string{"", "", "Hi", ""}, []string{"", "", "Hi", ""}, "", false},
		{"marker whole", []string{Marker + " Not stock."}, []string{"Not stock."}, "", true},
		{"marker then text", []string{Marker, " ", "Not", " stock"}, []string{"", "", "Not", " stock"}, "", true},
		{"marker byte by byte", append(strings.Split(Marker, ""), "\n", "ok"), append(make([]string, len(Marker)+1), "ok"), "", true},
		{"looks like marker, is not", []string{"[[", "off", "-pur", "pose]x"}, []string{"", "", "", "[[off-purpose]x"}, "", false},
		{"diverges early", []string{"[[", "ox"}, []string{"", "[[ox"}, "", false},
		{"single bracket then text", []string{"[", "1] item"}, []string{"", "[1] item"}, "", false},
		{"markdown link", []string{"[a](b)"}, []string{"[a](b)"}, "", false},
		{"leading whitespace held", []string{"\n", "  ", "Hello"}, []string{"", "", "\n  Hello"}, "", false},
		{"leading whitespace before marker", []string{"\n ", "[[off-", "purpose]]", "  ", "\n", "x"}, []string{"", "", "", "", "", "x"}, "", true},
		{"whitespace only, then end", []string{" ", "\n"}, []string{"", ""}, " \n", false},
		{"prefix then end", []string{"[[off-pur"}, []string{""}, "[[off-pur", false},
		{"marker then end", []string{"[[off-purpose]]", " "}, []string{"", ""}, "", true},
		{"marker in the middle is kept", []string{"a", Marker}, []string{"a", Marker}, "", false},
		{"multi-byte text", []string{"Zähl", "e 箱"}, []string{"Zähl", "e 箱"}, "", false},
		{"multi-byte split", []string{"\xe7\xae", "\xb1 x"}, []string{"", "箱 x"}, "", false},
		{"nbsp split before marker", []string{"\xc2", "\xa0" + Marker, "\xc2", "\xa0ok"}, []string{"", "", "", "ok"}, "", true},
		{"multi-byte after marker", []string{Marker + " ", "\xc3", "\xa4"}, []string{"", "", "ä"}, "", true},
		{"cut rune at the end", []string{"\xe7\xae"}, []string{""}, "\xe7\xae", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s MarkerStripper
			for i, d := range c.deltas {
				if got := s.Feed(d); got != c.want[i] {
					t.Errorf("Feed #%d (%q) = %q, want %q", i, d, got, c.want[i])
				}
			}
			if got := s.Flush(); got != c.flush {
				t.Errorf("Flush = %q, want %q", got, c.flush)
			}
			if s.Flagged() != c.flagged {
				t.Errorf("Flagged = %v, want %v", s.Flagged(), c.flagged)
			}
		})
	}
}

// feedAll runs a stripper over deltas and returns everything shown.
func feedAll(deltas []string) (string, bool) {
	var s MarkerStripper
	var b strings.Builder
	for _, d := range deltas {
		b.WriteString(s.Feed(d))
	}
	b.WriteString(s.Flush())
	return b.String(), s.Flagged()
}

// TestMarkerStripperEverySplit cuts texts at every pair of byte offsets.
func TestMarkerStripperEverySplit(t *testing.T) {
	texts := []string{
		Marker + " The request is about cooking.",
		" \n" + Marker + "\n\n\tDas ist kein Lagerthema. 箱",
		Marker,
		Marker + "  ",
		"[[off-purpose] almost",
		"[[off-purposeX]] no",
		"There are 12 boxes.",
		"  [1] twelve",
		"\u00a0" + Marker + "\u3000ok",
		"箱" + Marker,
		"",
	}
	for _, text := range texts {
		want, wantFlag := StripMarker(text)
		for i := 0; i <= len(text); i++ {
			for j := i; j <= len(text); j++ {
				got, flagged := feedAll([]string{text[:i], text[i:j], text[j:]})
				if got != want || flagged != wantFlag {
					t.Fatalf("text %q cut at %d,%d: got %q, %v; want %q, %v", text, i, j, got, flagged, want, wantFlag)
				}
			}
		}
	}
}

// TestMarkerStripperNoDelay checks that once the text seen cannot begin
// with the marker, everything seen has been shown.
func TestMarkerStripperNoDelay(t *testing.T) {
	for _, text := range []string{"Hello there", "[[off-purpose]x and more", "  [x]", "[[ o", "箱 x"} {
		var s MarkerStripper
		var shown strings.Builder
		for i := 0; i < len(text); i++ {
			shown.WriteString(s.Feed(text[i : i+1]))
			seen := text[:i+1]
			trimmed := strings.TrimLeft(seen, " ")
			undecided := trimmed == "" || strings.HasPrefix(Marker, trimmed) || !utf8.ValidString(seen)
			if !undecided && shown.String() != seen {
				t.Fatalf("text %q after %d bytes: shown %q, want %q", text, i+1, shown.String(), seen)
			}
		}
	}
}

func FuzzMarkerStripper(f *testing.F) {
	f.Add(Marker+" off topic", []byte{3, 7})
	f.Add("  "+Marker+"\n\nx", []byte{1, 1, 1, 1, 1})
	f.Add("[[off-purpose]", []byte{5})
	f.Add("\u00a0"+Marker+"\u00a0箱", []byte{1, 16, 1, 1})
	f.Add("plain answer", []byte{})
	f.Fuzz(func(t *testing.T, text string, cuts []byte) {
		var deltas []string
		rest := text
		for _, c := range cuts {
			n := int(c) % (len(rest) + 1)
			deltas = append(deltas, rest[:n])
			rest = rest[n:]
		}
		deltas = append(deltas, rest)
		got, flagged := feedAll(deltas)
		want, wantFlag := StripMarker(text)
		if got != want || flagged != wantFlag {
			t.Fatalf("deltas %q: got %q, %v; want %q, %v", deltas, got, flagged, want, wantFlag)
		}
	})
}

func BenchmarkMarkerStripperPassThrough(b *testing.B) {
	b.ReportAllocs()
	deltas := []string{"There", " are", " twelve", " boxes", " on", " the", " shelf", "."}
	for b.Loop() {
		var s MarkerStripper
		for _, d := range deltas {
			_ = s.Feed(d)
		}
		_ = s.Flush()
	}
}

func BenchmarkInjectChat(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"You count boxes."},{"role":"user","content":"How many boxes are on shelf 3?"}],"stream":true}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := InjectChat(body, purpose); err != nil {
			b.Fatal(err)
		}
	}
}
