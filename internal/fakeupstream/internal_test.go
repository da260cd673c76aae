package fakeupstream

import (
	"encoding/json"
	"reflect"
	"taskgate/internal/jsonstr"
	"testing"
)

func TestPieces(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"Hello", []string{"Hello"}},
		{DefaultContent, []string{"Hello", " from", " the", " fake", " model."}},
		{"  lead", []string{"  lead"}},
		{"a  b\nc ", []string{"a", "  b", "\nc", " "}},
	}
	for _, tt := range tests {
		got := Pieces(tt.in)
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Pieces(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestArgPieces(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", []string{""}},
		{`{"a":1}`, []string{`{"a":1}`}},
		{`{"city":"Paris"}`, []string{`{"city":`, `"Paris"}`}},
		{"ééééé", []string{"éééé", "é"}},
	}
	for _, tt := range tests {
		if got := argPieces(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("argPieces(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAppendJSONString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{"q\"b\\", `"q\"b\\"`},
		{"n\nr\rt\t", `"n\nr\rt\t"`},
		{"\x00\x1f", `"\u0000\u001f"`},
		{"<a&b>", `"<a&b>"`},
		{"é😀", `"é😀"`},
		{"bad\xffutf8", `"bad\ufffdutf8"`},
		{"\u2028", `"\u2028"`},
	}
	for _, tt := range tests {
		got := string(jsonstr.Append(nil, tt.in))
		if got != tt.want {
			t.Errorf("jsonstr.Append(%q) = %s, want %s", tt.in, got, tt.want)
		}
		var back string
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			t.Errorf("%s is not JSON: %v", got, err)
		}
	}
}

func TestPromptTokens(t *testing.T) {
	tests := []struct {
		n    int
		want int64
	}{{0, 1}, {1, 1}, {4, 1}, {5, 2}, {400, 100}}
	for _, tt := range tests {
		if got := PromptTokens(make([]byte, tt.n)); got != tt.want {
			t.Errorf("PromptTokens(%d bytes) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		method, path string
		want         route
		id           string
	}{
		{"POST", "/v1/chat/completions", routeChat, ""},
		{"GET", "/v1/chat/completions", routeNone, ""},
		{"POST", "/v1/completions", routeCompletions, ""},
		{"POST", "/v1/embeddings", routeEmbeddings, ""},
		{"GET", "/v1/models", routeModels, ""},
		{"GET", "/v1/models/fake-mini", routeModel, "fake-mini"},
		{"POST", "/v1/responses", routeResponses, ""},
		{"GET", "/v1/responses/resp_1", routeResponseGet, "resp_1"},
		{"DELETE", "/v1/responses/resp_1", routeResponseDelete, "resp_1"},
		{"GET", "/v1/responses/resp_1/input_items", routeResponseItems, "resp_1"},
		{"GET", "/v1/responses/a/b", routeNone, ""},
		{"POST", "/v1/images/generations", routeImages, ""},
		{"POST", "/chat/completions", routeNone, ""},
	}
	for _, tt := range tests {
		got, id := match(tt.method, tt.path)
		if got != tt.want || id != tt.id {
			t.Errorf("match(%s %s) = %v %q, want %v %q", tt.method, tt.path, got, id, tt.want, tt.id)
		}
	}
}
