package trim

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"taskgate/trim/tokenizer"
)

// promptTokens counts a chat body's prompt with one tokenizer.
func promptTokens(t testing.TB, tok string, body []byte) int {
	t.Helper()
	p := parseRoot(t, body)
	f := fitter{msgs: p.msgs, tools: p.tools}
	c, err := getCounter(tok)
	if err != nil {
		t.Fatal(err)
	}
	return f.count(c)
}

func parseRoot(t testing.TB, body []byte) parsedBody {
	t.Helper()
	p, err := parseBody(bytesString(body), Fields{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func enc(t testing.TB, name string) tokenizer.Encoding {
	t.Helper()
	e, err := tokenizer.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestCountReference pins prompt counts of fixed bodies. The cookbook
// example (names.json) is the OpenAI cookbook's "How to count tokens with
// tiktoken": the API billed 129 prompt tokens on gpt-4/gpt-3.5-turbo
// (cl100k_base) and 124 on gpt-4o (o200k_base).
func TestCountReference(t *testing.T) {
	tests := []struct {
		file                 string
		o200k, cl100k, estim int
	}{
		{"user_hello.json", 8, 8, 16},
		{"names.json", 124, 129, 216},
		{"multibyte.json", 36, 38, 51},
		{"tool_calls.json", 92, 94, 183},
		{"images.json", 2985, 2985, 3041},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", "count", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			for tok, want := range map[string]int{"o200k_base": tt.o200k, "cl100k_base": tt.cl100k, "estimate": tt.estim} {
				if got := promptTokens(t, tok, body); got != want {
					t.Errorf("%s: %d tokens, want %d", tok, got, want)
				}
			}
		})
	}
}

// TestCountRule recomputes the reference bodies from the rule in the
// package doc with the tokenizer directly.
func TestCountRule(t *testing.T) {
	for _, name := range []string{"o200k_base", "cl100k_base"} {
		e := enc(t, name)
		c := e.Count
		hello := 3 + c("user") + c("hello") + 3
		multi := 3 + c("system") + c("Réponds en français. 日本語も話せます。") +
			3 + c("user") + c("Grüße! 🙂 été — \"quoted\"\n\ttabbed") + 3
		tools := `[{"type":"function","function":{"name":"get_weather","description":"Get the weather of a city.","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
		calls := 3 + c("user") + c("What's the weather in Paris and Tokyo?") +
			3 + c("assistant") + 2*c("get_weather") + c(`{"city":"Paris"}`) + c(`{"city":"Tokyo"}`) +
			3 + c("tool") + c("18°C, cloudy") + 3 + c("tool") + c("24°C, sunny") + c(tools) + 3
		images := 3 + c("user") + c("Compare these.") + 85 + 1445 + 1445 + 3
		for file, want := range map[string]int{"user_hello.json": hello, "multibyte.json": multi, "tool_calls.json": calls, "images.json": images} {
			body, err := os.ReadFile(filepath.Join("testdata", "count", file))
			if err != nil {
				t.Fatal(err)
			}
			if got := promptTokens(t, name, body); got != want {
				t.Errorf("%s %s: %d, want %d by the rule", name, file, got, want)
			}
		}
	}
}

func TestImageTokens(t *testing.T) {
	tests := []struct {
		w, h   int
		detail string
		want   int
	}{
		{1024, 1024, "high", 765},  // OpenAI's example: 768×768, 4 tiles
		{2048, 4096, "high", 1105}, // OpenAI's example: 768×1536, 6 tiles
		{4096, 8192, "low", 85},    // OpenAI's example
		{512, 512, "auto", 255},    // one tile
		{513, 512, "", 425},        // two tiles
		{100, 100, "high", 255},    // never scaled up
		{768, 2048, "high", 1445},  // the most: 2×4 tiles
		{20000, 100, "high", 765},  // 2048×10: 4×1 tiles
		{0, 0, "high", 1445},       // unknown
		{0, 0, "auto", 1445},       // unknown
		{0, 0, "low", 85},          // unknown but low
		{1920, 1080, "auto", 1105}, // 1365×768: 3×2 tiles
	}
	for _, tt := range tests {
		if got := ImageTokens(tt.w, tt.h, tt.detail); got != tt.want {
			t.Errorf("ImageTokens(%d, %d, %q) = %d, want %d", tt.w, tt.h, tt.detail, got, tt.want)
		}
	}
}

func dataURLOf(t testing.TB, mime string, encode func(*bytes.Buffer) error) string {
	t.Helper()
	var buf bytes.Buffer
	if err := encode(&buf); err != nil {
		t.Fatal(err)
	}
	return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestImageSize(t *testing.T) {
	img := func(w, h int) image.Image { return image.NewGray(image.Rect(0, 0, w, h)) }
	pngURL := dataURLOf(t, "image/png", func(b *bytes.Buffer) error { return png.Encode(b, img(1024, 700)) })
	jpgURL := dataURLOf(t, "image/jpeg", func(b *bytes.Buffer) error { return jpeg.Encode(b, img(300, 2000), nil) })
	gifURL := dataURLOf(t, "image/gif", func(b *bytes.Buffer) error { return gif.Encode(b, img(50, 60), nil) })
	tests := []struct {
		raw  string
		w, h int
		ok   bool
	}{
		{`"` + pngURL + `"`, 1024, 700, true},
		{`"` + jpgURL + `"`, 300, 2000, true},
		{`"` + gifURL + `"`, 50, 60, true},
		{`"` + strings.ReplaceAll(pngURL, "/", `\/`) + `"`, 1024, 700, true},
		{`"https://example.com/a.png"`, 0, 0, false},
		{`"data:image/png;base64,!!!!"`, 0, 0, false},
		{`"data:image/png;base64,"`, 0, 0, false},
		{`"data:image/png,rawdata"`, 0, 0, false},
		{`"data:image/webp;base64,UklGRg=="`, 0, 0, false},
		{`""`, 0, 0, false},
		{`"`, 0, 0, false},
		{``, 0, 0, false},
	}
	for _, tt := range tests {
		w, h, ok := imageSize(tt.raw)
		if w != tt.w || h != tt.h || ok != tt.ok {
			name := tt.raw
			if len(name) > 40 {
				name = name[:40]
			}
			t.Errorf("imageSize(%s…) = %d, %d, %v; want %d, %d, %v", name, w, h, ok, tt.w, tt.h, tt.ok)
		}
	}
	// A data URL image counts by its size: 1024×700 is never scaled up: 2×2 tiles.
	body := `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + pngURL + `"}}]}]}`
	want := 3 + 1 + (85 + 170*4) + 3
	if got := promptTokens(t, "o200k_base", []byte(body)); got != want {
		t.Errorf("data URL image prompt = %d, want %d", got, want)
	}
}

// randomText makes text of n runes mixing ASCII words, digits,
// punctuation, whitespace runs, accents, CJK and emoji.
func randomText(r *rand.Rand, n int) string {
	pools := []string{
		"the quick brown fox jumps over a lazy dog ",
		"0123456789", " \t\n\n  ", ".,;:!?'\"()[]{}<>/\\|-_=+*&^%$#@~`",
		"éèàçüößñ", "日本語中文한국어", "🙂🚀👍🏽🇫🇷", "\u200b\u00a0\ufeff",
	}
	var b strings.Builder
	for range n {
		p := []rune(pools[r.IntN(len(pools))])
		b.WriteRune(p[r.IntN(len(p))])
	}
	return b.String()
}

// TestTokensNeverPassBytes checks the claim the cheap bound rests on, for
// both encodings: a text never has more tokens than bytes.
func TestTokensNeverPassBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, name := range []string{"o200k_base", "cl100k_base"} {
		e := enc(t, name)
		for i := range 300 {
			s := randomText(r, 1+r.IntN(400))
			if i%10 == 0 {
				// Invalid UTF-8 too.
				s += string([]byte{0xff, 0xfe, byte(r.IntN(256))})
			}
			if n := e.Count(s); n > len(s) {
				t.Fatalf("%s: %d tokens for %d bytes: %q", name, n, len(s), s)
			}
		}
	}
}

// TestBoundHolds checks that a message's exact count never passes its bound.
func TestBoundHolds(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 50 {
		body := genHistory(r, 20, genOpts{tools: i%2 == 0, attachments: true, images: true})
		p := parseRoot(t, body)
		for _, name := range []string{"o200k_base", "cl100k_base"} {
			c, _ := getCounter(name)
			for j := range p.msgs {
				m := &p.msgs[j]
				if got := exactCount(c, m); got > m.info.bound() {
					t.Fatalf("%s: message %d counts %d over its bound %d: %s", name, j, got, m.info.bound(), m.raw)
				}
				if est := m.info.estimate(); est > m.info.bound() {
					t.Fatalf("estimate %d over bound %d: %s", est, m.info.bound(), m.raw)
				}
			}
		}
	}
}

func TestCountText(t *testing.T) {
	tests := []struct {
		tok, text string
		want      int
	}{
		{"o200k_base", "hello world", 2},
		{"cl100k_base", "hello world", 2},
		{"estimate", "hello world", 3},
		{"estimate", "", 0},
		{"o200k_base", "", 0},
		{"nonsense", "hello world", 3}, // falls back to the estimate
	}
	for _, tt := range tests {
		if got := CountText(tt.tok, tt.text); got != tt.want {
			t.Errorf("CountText(%s, %q) = %d, want %d", tt.tok, tt.text, got, tt.want)
		}
	}
}

func TestRuneFloor(t *testing.T) {
	s := "aé日🙂"
	for n := 0; n <= len(s)+1; n++ {
		p := runeFloor(s, n)
		if p > n && n <= len(s) || !utf8.ValidString(s[:p]) {
			t.Errorf("runeFloor(%d) = %d", n, p)
		}
	}
}

func TestCountFilesAndAudio(t *testing.T) {
	pdf := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("%PDF"), 16000)) // 64,000 bytes
	small := base64.StdEncoding.EncodeToString([]byte("%PDF-1.4 tiny"))
	audio := base64.StdEncoding.EncodeToString(make([]byte, 48000))
	text := base64.StdEncoding.EncodeToString([]byte("name,qty\nbolts,12\n"))
	tests := []struct {
		part string
		want int // tokens of the part
	}{
		{`{"type":"file","file":{"file_id":"file-abc"}}`, 1105},
		{`{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,` + pdf + `"}}`, 2000},
		{`{"type":"file","file":{"file_data":"data:application/pdf;base64,` + small + `"}}`, 1105},
		{`{"type":"input_audio","input_audio":{"data":"` + audio + `","format":"wav"}}`, 48},
		{`{"type":"file","file":{"filename":"s.csv","file_data":"data:text/csv;base64,` + text + `"}}`, -1}, // its text
	}
	for _, tt := range tests {
		body := []byte(`{"messages":[{"role":"user","content":[` + tt.part + `]}]}`)
		for _, tok := range []string{"o200k_base", "cl100k_base"} {
			want := tt.want
			if want < 0 {
				want = enc(t, tok).Count("name,qty\nbolts,12\n")
			}
			if got := promptTokens(t, tok, body) - (3 + 1 + 3); got != want {
				t.Errorf("%s %.60s: %d, want %d", tok, tt.part, got, want)
			}
		}
	}
}
