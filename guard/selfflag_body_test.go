package guard

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func readAnswer(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "answers", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// goldenAnswer compares got with testdata/answers/name, or rewrites it with -update.
func goldenAnswer(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "answers", name)
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

// sseData splits a fixture into the data of its events.
func sseData(t *testing.T, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		d, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			t.Fatalf("fixture line %q is not a data line", line)
		}
		out = append(out, d)
	}
	return out
}

func TestStripChatResponse(t *testing.T) {
	out, flagged, err := StripChatResponse(readAnswer(t, "chat_flagged.json"))
	if err != nil || !flagged {
		t.Fatalf("flagged = %v, err = %v", flagged, err)
	}
	if got := gjson.GetBytes(out, "choices.0.message.content").Str; got != "I can help with recipes, but this assistant counts stock." {
		t.Errorf("choice 0 content = %q", got)
	}
	if got := gjson.GetBytes(out, "choices.1.message.content").Str; got != "There are 12 boxes." {
		t.Errorf("choice 1 content = %q", got)
	}
	if got := gjson.GetBytes(out, "choices.2.message.content"); got.Type != gjson.Null {
		t.Errorf("choice 2 content = %v, want null", got)
	}
	if gjson.GetBytes(out, "usage.total_tokens").Int() != 32 {
		t.Error("usage lost")
	}

	clean := readAnswer(t, "chat_clean.json")
	out, flagged, err = StripChatResponse(clean)
	if err != nil || flagged || !bytes.Equal(out, clean) {
		t.Errorf("clean answer: flagged = %v, err = %v, changed = %v", flagged, err, !bytes.Equal(out, clean))
	}
	for _, body := range []string{`{}`, `{"choices":null}`, `not json`} {
		if out, flagged, err := StripChatResponse([]byte(body)); err != nil || flagged || string(out) != body {
			t.Errorf("StripChatResponse(%s) = %s, %v, %v", body, out, flagged, err)
		}
	}
}

func TestChatStreamStripper(t *testing.T) {
	cases := []struct {
		in, golden string
		flagged    bool
	}{
		{"chat_stream.sse", "chat_stream.golden.sse", true},
		{"chat_stream_held.sse", "chat_stream_held.golden.sse", false},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			var s ChatStreamStripper
			var got bytes.Buffer
			for _, d := range sseData(t, readAnswer(t, c.in)) {
				out, err := s.Chunk(d)
				if err != nil {
					t.Fatal(err)
				}
				got.WriteString("data: ")
				got.Write(out)
				got.WriteByte('\n')
			}
			if want := readAnswer(t, c.golden); !bytes.Equal(got.Bytes(), want) {
				t.Errorf("stream differs:\n got %s\nwant %s", got.Bytes(), want)
			}
			if s.Flagged() != c.flagged {
				t.Errorf("Flagged = %v, want %v", s.Flagged(), c.flagged)
			}
		})
	}
}

func TestChatStreamStripperPassesUnchanged(t *testing.T) {
	var s ChatStreamStripper
	for _, d := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Twelve"},"finish_reason":null}]}`,
		`{"choices":[{"index":0,"delta":{"content":" boxes"},"finish_reason":"stop"}]}`,
		`{"choices":[],"usage":{"total_tokens":3}}`,
		`{"error":{"message":"x"}}`,
	} {
		out, err := s.Chunk([]byte(d))
		if err != nil || string(out) != d {
			t.Errorf("Chunk(%s) = %s, %v; want it unchanged", d, out, err)
		}
	}
}

func TestStripResponsesResponse(t *testing.T) {
	out, flagged, err := StripResponsesResponse(readAnswer(t, "responses_flagged.json"))
	if err != nil || !flagged {
		t.Fatalf("flagged = %v, err = %v", flagged, err)
	}
	if got := gjson.GetBytes(out, "output.1.content.0.text").Str; got != "Not about stock." {
		t.Errorf("text = %q", got)
	}
	goldenAnswer(t, "responses_flagged.golden.json", out)
}

func TestResponsesStreamStripper(t *testing.T) {
	var s ResponsesStreamStripper
	var got bytes.Buffer
	var deltas strings.Builder
	for _, d := range sseData(t, readAnswer(t, "responses_stream.sse")) {
		out, err := s.Event(d)
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString("data: ")
		got.Write(out)
		got.WriteByte('\n')
		if gjson.GetBytes(out, "type").Str == "response.output_text.delta" {
			deltas.WriteString(gjson.GetBytes(out, "delta").Str)
		}
		if bytes.Contains(out, []byte(Marker)) {
			t.Errorf("marker left in %s", out)
		}
	}
	if !s.Flagged() {
		t.Error("not flagged")
	}
	if deltas.String() != "Not about stock." {
		t.Errorf("deltas = %q", deltas.String())
	}
	goldenAnswer(t, "responses_stream.golden.sse", got.Bytes())
}

func BenchmarkChatStreamStripperChunk(b *testing.B) {
	chunk := []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" boxes"},"finish_reason":null}]}`)
	var s ChatStreamStripper
	if _, err := s.Chunk([]byte(`{"choices":[{"index":0,"delta":{"content":"Twelve"},"finish_reason":null}]}`)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Chunk(chunk); err != nil {
			b.Fatal(err)
		}
	}
}
