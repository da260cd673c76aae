package proxy_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// gzipped is s compressed with gzip.
func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestCompressedRequestBody checks request bodies sent with a
// Content-Encoding: decoded and served like a plain one (the upstream gets
// the JSON, with the endpoint's model), and refused in the OpenAI shape,
// with nothing sent upstream, when they decode to more than body_limit
// (1 MiB here), cannot be decoded, or use a coding the gateway does not
// know.
func TestCompressedRequestBody(t *testing.T) {
	const chat = `{"model":"app.chat","messages":[{"role":"user","content":"compressed hello"}]}`
	bomb := `{"model":"app.chat","messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<20) + `"}]}`
	tests := []struct {
		name     string
		encoding string
		body     []byte
		status   int
		code     string
	}{
		{"gzip", "gzip", gzipped(t, chat), 200, ""},
		{"decodes past body_limit", "gzip", gzipped(t, bomb), 413, "request_too_large"},
		{"corrupt gzip", "gzip", []byte("not gzip at all"), 400, "invalid_request"},
		{"unknown coding", "compress", []byte(chat), 400, "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, baseConfig, envOptions{})
			req, err := http.NewRequest("POST", e.clientURL+"/v1/chat/completions", bytes.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+testKey)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Content-Encoding", tt.encoding)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			reqs := e.up.Requests()
			if tt.status != 200 {
				if code := gjson.GetBytes(body, "error.code").Str; code != tt.code {
					t.Errorf("error code %q, want %q: %s", code, tt.code, body)
				}
				if len(reqs) != 0 {
					t.Errorf("%d upstream requests for a refused body", len(reqs))
				}
				return
			}
			if len(reqs) != 1 {
				t.Fatalf("%d upstream requests, want 1", len(reqs))
			}
			got := gjson.ParseBytes(reqs[0].Body)
			if got.Get("model").Str != "fake-mini" || got.Get("messages.0.content").Str != "compressed hello" {
				t.Errorf("upstream got %s", reqs[0].Body)
			}
		})
	}
}
