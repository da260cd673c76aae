package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

const hostileConfig = baseConfig + `
  - key: app.counted
    endpoints: [primary]
    limits:
      task: {requests: {day: 1000}}
`

// TestHostileInput sends inputs built to hurt and checks each gets a clear
// 4xx in the OpenAI shape, nothing reaches the upstream or is counted, and
// no goroutine is left behind.
func TestHostileInput(t *testing.T) {
	e := newEnv(t, hostileConfig, envOptions{})
	// Warm up the keep-alive pools, then take the goroutine baseline.
	r := e.post("/v1/chat/completions", testKey, `{"model":"app.chat","messages":[{"role":"user","content":"x"}]}`)
	r.Body.Close()
	e.settleAll()
	http.DefaultClient.CloseIdleConnections()
	baseline := runtime.NumGoroutine()

	many := func(n int, item string) string {
		return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
	}
	cases := []struct {
		name, body string
		status     int
		code       string
	}{
		{"10,001 messages", `{"model":"app.counted","messages":[` + many(10001, `{"role":"user","content":"x"}`) + `]}`, 400, "invalid_request"},
		{"1,001 content parts", `{"model":"app.counted","messages":[{"role":"user","content":[` + many(1001, `{"type":"text","text":"x"}`) + `]}]}`, 400, "invalid_request"},
		{"a message that is not an object", `{"model":"app.counted","messages":[1]}`, 400, "invalid_request"},
		{"max_tokens negative", `{"model":"app.counted","max_tokens":-5,"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request"},
		{"user not a string", `{"model":"app.counted","user":{"a":1},"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request"},
		{"NUL escaped is fine but raw is not", "{\"model\":\"app.counted\",\"messages\":[{\"role\":\"user\",\"content\":\"\x00\"}]}", 400, "invalid_request"},
	}
	for _, tc := range cases {
		resp := e.post("/v1/chat/completions", testKey, tc.body)
		if resp.StatusCode != tc.status {
			b, _ := io.ReadAll(resp.Body)
			t.Errorf("%s: status %d, want %d: %.200s", tc.name, resp.StatusCode, tc.status, b)
			continue
		}
		if got := code(readErr(t, resp)); got != tc.code {
			t.Errorf("%s: code %q, want %q", tc.name, got, tc.code)
		}
	}

	// Headers larger than the read buffer: 431 in the OpenAI shape.
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.clientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nX-Junk: %s\r\nContent-Length: 2\r\n\r\n{}", strings.Repeat("a", 64<<10))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("huge headers: %v", err)
	}
	if resp.StatusCode != 431 {
		t.Errorf("huge headers: status %d, want 431", resp.StatusCode)
	} else if code(readErr(t, resp)) != "headers_too_large" {
		t.Error("huge headers: not the OpenAI error shape")
	}
	conn.Close()

	// A client that opens a connection and sends half a request, then leaves.
	half, err := net.Dial("tcp", strings.TrimPrefix(e.clientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(half, "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nContent-Length: 100\r\n\r\n{\"mod")
	half.Close()

	if n := e.up.Count(); n != 1 {
		t.Errorf("upstream saw %d calls, want only the warm-up", n)
	}
	e.settleAll()
	var u usageJSON
	e.admin("GET", "/admin/usage?task=app.counted", "", &u)
	if used, _, _ := u.window("task", "requests", "day"); used != "0" {
		t.Errorf("hostile calls counted: %s", used)
	}
	http.DefaultClient.CloseIdleConnections()
	waitFor(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= baseline+2 })
}

// TestSlowClientGetsRequestTimeout: a client that sends part of a request
// and stalls gets 408 request_timeout after client_timeout, in the OpenAI
// shape, and nothing is counted.
func TestSlowClientGetsRequestTimeout(t *testing.T) {
	e := newEnv(t, "client_timeout: 300ms\n"+hostileConfig, envOptions{})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.clientURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{\"model\":\"app.counted\"", testKey)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("slow client: %v", err)
	}
	if resp.StatusCode != 408 || code(readErr(t, resp)) != "request_timeout" {
		t.Fatalf("slow client: status %d", resp.StatusCode)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("answered after %v", d)
	}
	if e.up.Count() != 0 {
		t.Error("the upstream saw the slow call")
	}
}
