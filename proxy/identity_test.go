package proxy_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRequireUser(t *testing.T) {
	cfg := baseConfig + `
  - key: app.needsuser
    endpoints: [primary]
    require_user: true
`
	e := newEnv(t, cfg, envOptions{})
	resp := e.post("/v1/chat/completions", testKey, `{"model":"app.needsuser","messages":[{"role":"user","content":"x"}]}`)
	if resp.StatusCode != 400 || code(readErr(t, resp)) != "user_required" {
		t.Fatalf("no user: status %d", resp.StatusCode)
	}
	for _, h := range [][]string{{"X-Taskgate-User", "u1"}, nil} {
		body := `{"model":"app.needsuser","messages":[{"role":"user","content":"x"}]}`
		if h == nil {
			body = `{"model":"app.needsuser","safety_identifier":"u2","messages":[{"role":"user","content":"x"}]}`
		}
		r := e.post("/v1/chat/completions", testKey, body, h...)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Errorf("with a user (%v): %d", h, r.StatusCode)
		}
	}
	if e.up.Count() != 2 {
		t.Errorf("upstream saw %d calls", e.up.Count())
	}
}

// TestKeysNeverLogged runs good, refused and failing calls and checks that
// neither the client's key nor the endpoint's key appears in any log line.
func TestKeysNeverLogged(t *testing.T) {
	var logs syncBuffer
	e := newEnv(t, baseConfig, envOptions{logs: &logs})
	bodies := []struct{ key, body string }{
		{testKey, `{"model":"app.chat","messages":[{"role":"user","content":"x"}]}`},
		{testKey, `{"model":"app.chat","stream":true,"messages":[{"role":"user","content":"x"}]}`},
		{testKey, `{"model":"app.nope","messages":[]}`},
		{"sk-wrong-secret", `{"model":"app.chat","messages":[{"role":"user","content":"x"}]}`},
	}
	for _, b := range bodies {
		r := e.post("/v1/chat/completions", b.key, b.body)
		r.Body.Close()
	}
	e.up.Close() // an upstream failure is logged too
	r := e.post("/v1/chat/completions", testKey, `{"model":"app.chat","messages":[{"role":"user","content":"x"}]}`)
	r.Body.Close()
	e.settleAll()
	out := logs.String()
	if !strings.Contains(out, `"msg":"call"`) {
		t.Fatalf("no journal lines logged: %s", out)
	}
	for _, secret := range []string{testKey, upstreamKey, "sk-wrong-secret"} {
		if strings.Contains(out, secret) {
			t.Errorf("a log line contains the secret %q", secret)
		}
	}
}
