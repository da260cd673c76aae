package proxy_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"testing"

	"github.com/tidwall/gjson"
)

// TestCompressedRequestBody checks that a gzip-encoded request body
// (Content-Encoding: gzip) is decoded and served like a plain one: the
// upstream gets the JSON, with the endpoint's model.
func TestCompressedRequestBody(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write([]byte(`{"model":"app.chat","messages":[{"role":"user","content":"compressed hello"}]}`)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", e.clientURL+"/v1/chat/completions", &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	reqs := e.up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d upstream requests, want 1", len(reqs))
	}
	got := gjson.ParseBytes(reqs[0].Body)
	if got.Get("model").Str != "fake-mini" || got.Get("messages.0.content").Str != "compressed hello" {
		t.Errorf("upstream got %s", reqs[0].Body)
	}
}
