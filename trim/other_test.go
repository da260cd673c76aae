package trim

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCountEmbeddingsInput(t *testing.T) {
	e := enc(t, "o200k_base")
	tests := []struct {
		body  string
		want  int
		param string // an InvalidError for this param
	}{
		{`{"input":"hello world"}`, e.Count("hello world"), ""},
		{`{"input":["hello world","a b c"]}`, e.Count("hello world") + e.Count("a b c"), ""},
		{`{"input":[1,2,3,4]}`, 4, ""},
		{`{"input":[[1,2],[3],[]]}`, 3, ""},
		{`{"input":""}`, 0, ""},
		{`{"model":"m"}`, 0, "input"},
		{`{"input":null}`, 0, "input"},
		{`{"input":7}`, 0, "input"},
		{`{"input":[{"x":1}]}`, 0, "input[0]"},
		{`{"input":["a",["b"]]}`, 0, "input[1]"},
	}
	for _, tt := range tests {
		got, err := CountEmbeddingsInput("o200k_base", []byte(tt.body))
		checkCount(t, tt.body, got, err, tt.want, tt.param)
	}
}

func TestCountCompletionsPrompt(t *testing.T) {
	e := enc(t, "cl100k_base")
	tests := []struct {
		body  string
		want  int
		param string
	}{
		{`{"prompt":"Say this is a test"}`, e.Count("Say this is a test"), ""},
		{`{"prompt":"def f(","suffix":"return x"}`, e.Count("def f(") + e.Count("return x"), ""},
		{`{"prompt":["a","b"]}`, 2, ""},
		{`{"prompt":[50256]}`, 1, ""},
		{`{"model":"m"}`, 0, ""},
		{`{"prompt":{"a":1}}`, 0, "prompt"},
	}
	for _, tt := range tests {
		got, err := CountCompletionsPrompt("cl100k_base", []byte(tt.body))
		checkCount(t, tt.body, got, err, tt.want, tt.param)
	}
	if n, err := CountCompletionsPrompt("estimate", []byte(`{"prompt":"12345678"}`)); err != nil || n != 2 {
		t.Errorf("estimate: %d, %v", n, err)
	}
}

func checkCount(t *testing.T, body string, got int, err error, want int, param string) {
	t.Helper()
	var inv *InvalidError
	if param != "" {
		if !errors.As(err, &inv) || inv.Param != param {
			t.Errorf("%s: err %v, want an InvalidError for %q", body, err, param)
		}
		return
	}
	if err != nil || got != want {
		t.Errorf("%s: %d, %v; want %d", body, got, err, want)
	}
}

func TestCountResponsesInput(t *testing.T) {
	body, err := os.ReadFile(filepath.Join("testdata", "responses", "items.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"o200k_base", "cl100k_base"} {
		c := enc(t, name).Count
		tools := `[{"type":"function","name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}]`
		want := 3 + // priming
			3 + c("system") + c("Be brief.") +
			3 + c("user") + c("What is in this picture?") +
			3 + c("user") + c("And this one?") + 85 +
			3 + c("lookup") + c(`{"q":"cats"}`) +
			3 + c("three cats") +
			3 + c("thinking about cats") +
			3 + c("assistant") + c("Three cats.") +
			c(tools)
		got, err := CountResponsesInput(name, body)
		if err != nil || got != want {
			t.Errorf("%s: %d, %v; want %d", name, got, err, want)
		}
	}
	e := enc(t, "o200k_base")
	tests := []struct {
		body  string
		want  int
		param string
	}{
		{`{"input":"hello"}`, 3 + 3 + e.Count("user") + e.Count("hello"), ""},
		{`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/y.png"}]}]}`, 3 + 3 + 1 + 1445, ""},
		{`{"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}`, 3 + 3 + 1 + 1105, ""},
		{`{"previous_response_id":"r"}`, 3, ""},
		{`{"input":5}`, 0, "input"},
		{`{"input":[1]}`, 0, "input[0]"},
		{`{"input":[{"role":"user","content":5}]}`, 0, "input[0].content"},
		{`{"input":[{"role":"user","content":[5]}]}`, 0, "input[0].content[0]"},
		{`{"instructions":5}`, 0, "instructions"},
		{`[]`, 0, ""},
	}
	for _, tt := range tests {
		got, err := CountResponsesInput("o200k_base", []byte(tt.body))
		if tt.body == `[]` {
			if err == nil {
				t.Errorf("[]: no error")
			}
			continue
		}
		checkCount(t, tt.body, got, err, tt.want, tt.param)
	}
	// Estimate mode: 4 + ceil(bytes/4) an item, media apart.
	est, err := CountResponsesInput("estimate", []byte(`{"input":[{"role":"user","content":"12345678"}]}`))
	if want := 3 + 4 + (len(`{"role":"user","content":"12345678"}`)+3)/4; err != nil || est != want {
		t.Errorf("estimate: %d, %v; want %d", est, err, want)
	}
	if _, err := CountResponsesInput("p50k_base", body); err == nil {
		t.Error("unknown tokenizer accepted")
	}
}
