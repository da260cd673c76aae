package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"taskgate/internal/fakeupstream"
	"taskgate/internal/redistest"
)

// TestGracefulShutdown starts a slow stream, sends SIGTERM and checks that
// /readyz fails at once, new connections are refused, the stream still
// finishes completely, the process exits 0 within the grace period and the
// stream's reservation is settled in Redis.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	up, err := fakeupstream.New(fakeupstream.Options{APIKey: upKey})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	chunks := make([]string, 15)
	for i := range chunks {
		chunks[i] = " w"
	}
	up.SetDefault(fakeupstream.Behavior{Chunks: chunks, EventDelay: 100 * time.Millisecond})

	const prefix = "tgshut:"
	path := filepath.Join(t.TempDir(), "taskgate.yaml")
	writeFile(t, path, procConfig(up.URL(), rs.URL(), prefix,
		simpleTask("proc.a", `{task: {requests: {day: 100}, tokens: {day: 100000}}}`)))
	p := startGateway(t, path)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", p.client+"/v1/chat/completions",
		strings.NewReader(`{"model":"proc.a","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	events := make(chan string, 64)
	go streamLines(ctx, resp.Body, events)
	<-events // the first event: the stream is under way

	t0 := time.Now()
	p.signal(syscall.SIGTERM)
	waitUntil(t, "/readyz to fail", time.Second, func() bool { return p.ready() == 503 })
	if d := time.Since(t0); d > 500*time.Millisecond {
		t.Errorf("/readyz failed %v after SIGTERM", d)
	}
	// New connections are no longer accepted.
	waitUntil(t, "the client listener to close", time.Second, func() bool {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
		r, err := c.Post(p.client+"/v1/models", "application/json", nil)
		if err == nil {
			r.Body.Close()
		}
		return err != nil
	})

	var got []string
	for d := range events {
		got = append(got, d)
	}
	text := strings.Join(got, "\n")
	if len(got) < 2 || got[len(got)-1] != "[DONE]" || strings.Count(text, `"content":" w"`) != len(chunks) {
		t.Fatalf("the stream did not finish during the drain: %d events, last %q", len(got), got[len(got)-1])
	}
	if code := p.waitExit(10 * time.Second); code != 0 {
		t.Errorf("exit code %d", code)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("shutdown took %v, longer than shutdown_grace 10s", d)
	}

	// The reservation was settled: no open hold, nothing reserved, the
	// call and its tokens counted.
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rc.Close()
	bg := context.Background()
	if n, err := rc.HLen(bg, prefix+"{proc.a}:holds").Result(); err != nil || n != 0 {
		t.Errorf("open holds after shutdown: %d (%v)", n, err)
	}
	keys, err := rc.Keys(bg, prefix+"{proc.a}:t:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if strings.Contains(k, ":th:") {
			continue
		}
		h, err := rc.HGetAll(bg, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		// A window holds u (settled) and t (settled + reserved): equal once
		// nothing is reserved.
		if h["t"] != h["u"] {
			t.Errorf("%s: settled %q but settled+reserved %q after shutdown", k, h["u"], h["t"])
		}
		switch {
		case strings.Contains(k, ":t:requests:day:"):
			seen["requests"] = true
			if h["u"] != "1" {
				t.Errorf("%s: used %q, want 1", k, h["u"])
			}
		case strings.Contains(k, ":t:tokens:day:"):
			seen["tokens"] = true
			if h["u"] == "" || h["u"] == "0" {
				t.Errorf("%s: no tokens settled (%v)", k, h)
			}
		}
	}
	if !seen["requests"] || !seen["tokens"] {
		t.Errorf("window keys missing: %v", keys)
	}
}
