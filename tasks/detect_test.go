package tasks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDetect(t *testing.T) {
	tests := []struct {
		file string
		want Needs
	}{
		{"chat_text.json", 0},
		{"chat_image.json", Vision},
		{"chat_file.json", FileInput},
		{"chat_audio.json", 0},
		{"chat_tools.json", Tools},
		{"chat_tools_empty.json", 0},
		{"chat_functions.json", Tools},
		{"chat_json_schema.json", JSONSchema},
		{"chat_json_object.json", JSON},
		{"chat_text_format.json", 0},
		{"chat_image_output.json", ImageOutput},
		{"chat_everything.json", Vision | FileInput | Tools | JSONSchema | ImageOutput},
		{"chat_type_as_key.json", 0},
		{"chat_malformed_messages.json", 0},
		{"chat_malformed_parts.json", FileInput},
		{"chat_truncated.json", Vision}, // what could be read
		{"resp_string.json", 0},
		{"resp_image.json", Vision},
		{"resp_file.json", FileInput},
		{"resp_tool_output_image.json", Vision},
		{"resp_tools.json", Tools},
		{"resp_image_generation.json", Tools | ImageOutput},
		{"resp_json_schema.json", JSONSchema},
		{"resp_json_object.json", JSON},
		{"resp_malformed.json", 0},
		{"resp_malformed_items.json", FileInput},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", "detect", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			detect := DetectChat
			if strings.HasPrefix(tt.file, "resp_") {
				detect = DetectResponses
			}
			if got := detect(body); got != tt.want {
				t.Errorf("needs = {%v}, want {%v}", got, tt.want)
			}
		})
	}
}

// TestDetectWrongAPI checks that each detector reads only its own API's
// fields: a Responses body asks nothing of DetectChat and vice versa.
func TestDetectWrongAPI(t *testing.T) {
	for _, f := range []string{"resp_image.json", "resp_file.json", "resp_json_schema.json"} {
		body, err := os.ReadFile(filepath.Join("testdata", "detect", f))
		if err != nil {
			t.Fatal(err)
		}
		if got := DetectChat(body); got != 0 {
			t.Errorf("DetectChat(%s) = {%v}, want none", f, got)
		}
	}
	for _, f := range []string{"chat_image.json", "chat_file.json", "chat_json_schema.json", "chat_image_output.json"} {
		body, err := os.ReadFile(filepath.Join("testdata", "detect", f))
		if err != nil {
			t.Fatal(err)
		}
		if got := DetectResponses(body); got != 0 {
			t.Errorf("DetectResponses(%s) = {%v}, want none", f, got)
		}
	}
}

func TestDetectEmpty(t *testing.T) {
	for _, b := range [][]byte{nil, {}, []byte("null"), []byte("[]"), []byte("{"), []byte(`"x"`)} {
		if n := DetectChat(b) | DetectResponses(b); n != 0 {
			t.Errorf("%q: needs {%v}, want none", b, n)
		}
	}
}

func FuzzDetect(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "detect", "*.json"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"messages":[{"content":[{"type":"image_url"`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c := DetectChat(body)
		r := DetectResponses(body)
		if c&^(Hard|JSON) != 0 || r&^(Hard|JSON) != 0 {
			t.Fatalf("unknown bits: %b %b", c, r)
		}
	})
}

func BenchmarkDetectChat(b *testing.B) {
	body, err := os.ReadFile(filepath.Join("testdata", "detect", "chat_everything.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		DetectChat(body)
	}
}
