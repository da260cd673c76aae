package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"taskgate/config"
	"taskgate/internal/fakeupstream"
	"taskgate/internal/redistest"
)

// relConfig has two endpoints with short timeouts and quick breakers, a
// task that fails over from primary to secondary and one on primary only.
// Every task has limits in all units, so /admin/usage shows what was counted.
const relConfig = `
admin_token: ` + adminToken + `
body_limit: 1MiB
timezone: UTC
endpoints:
  - name: primary
    base_url: {{UP}}
    api_key: ` + upstreamKey + `
    model: fake-mini
    context_window: 100000
    max_output_tokens: 1000
    price: {input: "0.15", output: "0.60"}
    tokenizer: o200k_base
    timeout: 3s
    connect_timeout: 500ms
    first_byte_timeout: 300ms
    idle_timeout: 300ms
    breaker: {failures: 3, cooldown: 300ms}
  - name: secondary
    base_url: {{UP2}}
    api_key: ` + upstreamKey2 + `
    model: fake-large
    context_window: 100000
    max_output_tokens: 1000
    price: {input: "2.50", output: "10.00"}
    tokenizer: o200k_base
    timeout: 3s
    connect_timeout: 500ms
    first_byte_timeout: 300ms
    idle_timeout: 300ms
    breaker: {failures: 3, cooldown: 300ms}
tasks:
  - key: rel.failover
    endpoints: [primary, secondary]
    typical_tokens: [100, 50]
    limits:
      task: {requests: {day: 100000}, tokens: {day: 100000000}, money: {day: "1000.00"}}
  - key: rel.single
    endpoints: [primary]
    typical_tokens: [100, 50]
    limits:
      task: {requests: {day: 100000}, tokens: {day: 100000000}, money: {day: "1000.00"}}
keys:
  - name: all
    secret: ` + testKey + `
    tasks: ["*"]
`

// relMetric sums the samples of a metric on the gateway's /metrics whose
// labels include every given name/value pair (labels: k1, v1, k2, v2, …).
func (e *env) relMetric(name string, labels ...string) float64 {
	e.t.Helper()
	resp, err := http.Get(e.adminURL + "/metrics")
	if err != nil {
		e.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return sumMetric(string(b), name, labels...)
}

// sumMetric sums the samples of metric name in Prometheus text whose labels
// include every given pair.
func sumMetric(text, name string, labels ...string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(name):]
		var lbls string
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				continue
			}
			lbls, rest = rest[1:end], rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // a longer name
		}
		ok := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(","+lbls+",", ","+labels[i]+`="`+labels[i+1]+`",`) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// relUsage reads /admin/usage for a task.
func (e *env) relUsage(task string) usageJSON {
	e.t.Helper()
	var u usageJSON
	if st := e.admin("GET", "/admin/usage?task="+task, "", &u); st != 200 {
		e.t.Fatalf("usage of %s: status %d", task, st)
	}
	return u
}

// relReady is the status of /readyz.
func (e *env) relReady() int {
	e.t.Helper()
	resp, err := http.Get(e.adminURL + "/readyz")
	if err != nil {
		e.t.Fatalf("GET /readyz: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// checkRefunded checks that a task's windows count calls requests and no
// tokens, no money and nothing reserved: every call failed and was refunded.
func checkRefunded(t *testing.T, e *env, task string, calls int) {
	t.Helper()
	e.settleAll()
	u := e.relUsage(task)
	for _, w := range []struct{ unit, used string }{
		{"requests", strconv.Itoa(calls)}, {"tokens", "0"}, {"money", "0.000000"},
	} {
		used, reserved, ok := u.window("task", w.unit, "day")
		if !ok {
			t.Fatalf("no task %s/day window in %+v", w.unit, u)
		}
		if used != w.used {
			t.Errorf("%s used %s, want %s", w.unit, used, w.used)
		}
		if reserved != "0" && reserved != "0.000000" {
			t.Errorf("%s reserved %s after the calls ended", w.unit, reserved)
		}
	}
}

// checkSettled checks that nothing of a task is left reserved and returns
// the tokens used.
func checkSettled(t *testing.T, e *env, task string) int64 {
	t.Helper()
	e.settleAll()
	u := e.relUsage(task)
	for _, unit := range []string{"requests", "tokens", "money"} {
		if _, reserved, _ := u.window("task", unit, "day"); reserved != "0" && reserved != "0.000000" {
			t.Errorf("%s reserved %s after the call ended", unit, reserved)
		}
	}
	used, _, _ := u.window("task", "tokens", "day")
	n, _ := strconv.ParseInt(used, 10, 64)
	return n
}

func chatBody(task string, stream bool) string {
	return `{"model":"` + task + `","stream":` + strconv.FormatBool(stream) + `,"messages":[{"role":"user","content":"hello there"}]}`
}

// TestFailoverToSecondary fails the primary endpoint in each way that
// fails over and checks the call is served by the secondary, counted in
// the failover and upstream-error metrics.
func TestFailoverToSecondary(t *testing.T) {
	cases := []struct {
		name  string
		cfg   func(string) string
		setup func(e *env)
		kind  string
	}{
		{"500", nil, func(e *env) { e.up.Push(fakeupstream.Behavior{Status: 500}) }, "status_5xx"},
		{"503", nil, func(e *env) { e.up.Push(fakeupstream.Behavior{Status: 503}) }, "status_5xx"},
		{"429 with retry-after", nil, func(e *env) { e.up.Push(fakeupstream.Behavior{Status: 429, RetryAfter: "20"}) }, "status_429"},
		{"408", nil, func(e *env) { e.up.Push(fakeupstream.Behavior{Status: 408}) }, "status_408"},
		{"connection refused", nil, func(e *env) { _ = e.up.Close() }, "connect"},
		{"connection dropped", nil, func(e *env) { e.up.Push(fakeupstream.Behavior{DropConnection: true}) }, "connect"},
		{"stall before first byte", nil, func(e *env) { e.up.Push(fakeupstream.Behavior{FirstByteDelay: 3 * time.Second}) }, "timeout"},
		{"401 gateway key wrong", func(c string) string {
			return strings.Replace(c, "api_key: "+upstreamKey+"\n", "api_key: sk-wrong\n", 1)
		}, func(e *env) {}, "auth"},
		{"403", nil, func(e *env) { e.up.Push(fakeupstream.Behavior{Status: 403}) }, "auth"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := relConfig
			if tc.cfg != nil {
				cfg = tc.cfg(cfg)
			}
			e := newEnv(t, cfg, envOptions{})
			for _, stream := range []bool{false, true} {
				tc.setup(e)
				before := e.up2.Count()
				t0 := time.Now()
				resp := e.post("/v1/chat/completions", testKey, chatBody("rel.failover", stream))
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("stream=%v: status %d: %s", stream, resp.StatusCode, b)
				}
				if d := time.Since(t0); d > 2*time.Second {
					t.Errorf("stream=%v: failover took %v", stream, d)
				}
				if got := resp.Header.Get("X-Taskgate-Endpoint"); got != "secondary" {
					t.Errorf("stream=%v: X-Taskgate-Endpoint %q", stream, got)
				}
				if e.up2.Count() != before+1 {
					t.Errorf("stream=%v: secondary saw %d calls", stream, e.up2.Count()-before)
				}
				if stream && !strings.Contains(string(b), "data: [DONE]") {
					t.Errorf("stream ended without [DONE]: %s", b)
				}
			}
			if got := e.relMetric("taskgate_failovers_total", "endpoint", "primary", "kind", tc.kind); got != 2 {
				t.Errorf("taskgate_failovers_total{primary,%s} = %v, want 2", tc.kind, got)
			}
			if got := e.relMetric("taskgate_upstream_errors_total", "endpoint", "primary", "kind", tc.kind); got != 2 {
				t.Errorf("taskgate_upstream_errors_total{primary,%s} = %v, want 2", tc.kind, got)
			}
			e.settleAll()
			if n := checkSettled(t, e, "rel.failover"); n <= 0 {
				t.Errorf("served calls counted %d tokens", n)
			}
		})
	}
}

// TestCallerErrorsPassThrough checks that an upstream 400, 404, 413 or
// 422 reaches the client unchanged, with no failover.
func TestCallerErrorsPassThrough(t *testing.T) {
	e := newEnv(t, relConfig, envOptions{})
	for _, status := range []int{400, 404, 413, 422} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			msg := fmt.Sprintf("upstream says %d", status)
			e.up.Push(fakeupstream.Behavior{Status: status, ErrorMessage: msg, ErrorCode: "upstream_code"})
			before2 := e.up2.Count()
			resp := e.post("/v1/chat/completions", testKey, chatBody("rel.failover", false))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, b)
			}
			if gjson.GetBytes(b, "error.message").Str != msg || gjson.GetBytes(b, "error.code").Str != "upstream_code" {
				t.Errorf("body changed: %s", b)
			}
			if resp.Header.Get("X-Taskgate-Endpoint") != "primary" {
				t.Errorf("X-Taskgate-Endpoint %q", resp.Header.Get("X-Taskgate-Endpoint"))
			}
			if e.up2.Count() != before2 {
				t.Error("a caller error failed over")
			}
		})
	}
	if got := e.relMetric("taskgate_failovers_total"); got != 0 {
		t.Errorf("failovers %v", got)
	}
	e.settleAll()
	u := e.relUsage("rel.failover")
	if used, _, _ := u.window("task", "requests", "day"); used != "4" {
		t.Errorf("requests used %s, want 4", used)
	}
	checkSettled(t, e, "rel.failover")
}

// TestAllEndpointsFail checks the answer when failover runs out, and that
// every failed call stays counted as a request with its tokens and money
// refunded.
func TestAllEndpointsFail(t *testing.T) {
	cases := []struct {
		name       string
		b1, b2     fakeupstream.Behavior
		status     int
		code       string
		retryAfter string
	}{
		{"5xx", fakeupstream.Behavior{Status: 500}, fakeupstream.Behavior{Status: 502}, 502, "upstream_error", ""},
		{"all timed out", fakeupstream.Behavior{FirstByteDelay: 3 * time.Second}, fakeupstream.Behavior{FirstByteDelay: 3 * time.Second}, 504, "upstream_timeout", ""},
		{"timeout then 500", fakeupstream.Behavior{FirstByteDelay: 3 * time.Second}, fakeupstream.Behavior{Status: 500}, 502, "upstream_error", ""},
		{"rate limited", fakeupstream.Behavior{Status: 500}, fakeupstream.Behavior{Status: 429, RetryAfter: "7"}, 429, "upstream_rate_limited", "7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, relConfig, envOptions{})
			for i, stream := range []bool{false, true} {
				e.up.Push(tc.b1)
				e.up2.Push(tc.b2)
				resp := e.post("/v1/chat/completions", testKey, chatBody("rel.failover", stream))
				if resp.StatusCode != tc.status {
					b, _ := io.ReadAll(resp.Body)
					t.Fatalf("call %d: status %d, want %d: %s", i, resp.StatusCode, tc.status, b)
				}
				if got := code(readErr(t, resp)); got != tc.code {
					t.Errorf("call %d: code %s, want %s", i, got, tc.code)
				}
				if got := resp.Header.Get("retry-after"); got != tc.retryAfter {
					t.Errorf("call %d: retry-after %q, want %q", i, got, tc.retryAfter)
				}
				if resp.Header.Get("x-should-retry") == "false" {
					t.Errorf("call %d: an upstream failure carries x-should-retry: false", i)
				}
			}
			checkRefunded(t, e, "rel.failover", 2)
		})
	}
	t.Run("every breaker open", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, relConfig, envOptions{})
		e.up.SetDefault(fakeupstream.Behavior{Status: 500})
		e.up2.SetDefault(fakeupstream.Behavior{Status: 500})
		for i := 0; i < 3; i++ { // breaker.failures: 3
			resp := e.post("/v1/chat/completions", testKey, chatBody("rel.failover", false))
			if resp.StatusCode != 502 {
				t.Fatalf("call %d: %d", i, resp.StatusCode)
			}
			resp.Body.Close()
		}
		n1, n2 := e.up.Count(), e.up2.Count()
		resp := e.post("/v1/chat/completions", testKey, chatBody("rel.failover", false))
		if resp.StatusCode != 503 {
			t.Fatalf("status %d, want 503", resp.StatusCode)
		}
		if got := code(readErr(t, resp)); got != "unavailable" {
			t.Errorf("code %s", got)
		}
		if e.up.Count() != n1 || e.up2.Count() != n2 {
			t.Error("an open breaker's endpoint was tried")
		}
		checkRefunded(t, e, "rel.failover", 4)
	})
}

// TestBreakerOpensAndCloses checks that breaker.failures failures in a row
// open an endpoint's breaker (it is then skipped without a try), that after
// the cooldown one probe goes through, a failed probe opens it again and a
// good one closes it.
func TestBreakerOpensAndCloses(t *testing.T) {
	e := newEnv(t, relConfig, envOptions{})
	e.up.SetDefault(fakeupstream.Behavior{Status: 500})
	call := func() string {
		t.Helper()
		resp := e.post("/v1/chat/completions", testKey, chatBody("rel.failover", false))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp.Header.Get("X-Taskgate-Endpoint")
	}
	for i := 0; i < 3; i++ {
		if ep := call(); ep != "secondary" {
			t.Fatalf("call %d served by %s", i, ep)
		}
		want := 0.0
		if i == 2 {
			want = 1
		}
		if got := e.relMetric("taskgate_breaker_open", "endpoint", "primary"); got != want {
			t.Fatalf("after %d failures taskgate_breaker_open = %v, want %v", i+1, got, want)
		}
	}
	if e.up.Count() != 3 {
		t.Fatalf("primary saw %d calls", e.up.Count())
	}
	// Open: skipped without a try (the cooldown is 300ms; two quick calls).
	call()
	call()
	if e.up.Count() != 3 {
		t.Fatalf("an open breaker let %d calls through", e.up.Count()-3)
	}
	if e.relMetric("taskgate_upstream_errors_total", "endpoint", "primary", "kind", "breaker_open") < 2 {
		t.Error("skips of the open breaker are not counted")
	}
	// After the cooldown one probe goes through; it fails: open again.
	waitFor(t, "a probe after the cooldown", func() bool { call(); return e.up.Count() == 4 })
	if got := e.relMetric("taskgate_breaker_open", "endpoint", "primary"); got != 1 {
		t.Errorf("after a failed probe taskgate_breaker_open = %v", got)
	}
	call()
	if e.up.Count() != 4 {
		t.Error("a failed probe did not open the breaker again")
	}
	// The primary recovers: the next probe closes the breaker.
	e.up.SetDefault(fakeupstream.Behavior{})
	waitFor(t, "the primary serving again", func() bool { return call() == "primary" })
	if got := e.relMetric("taskgate_breaker_open", "endpoint", "primary"); got != 0 {
		t.Errorf("after a good probe taskgate_breaker_open = %v", got)
	}
	for i := 0; i < 3; i++ {
		if ep := call(); ep != "primary" {
			t.Fatalf("closed breaker: call served by %s", ep)
		}
	}
}

// sseData reads an SSE body and returns the data of each event in order.
func sseData(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// TestStreamCutMidway checks that an upstream stream that breaks off ends
// the client's stream with an error event, and that the tokens streamed so
// far are settled with nothing left reserved.
func TestStreamCutMidway(t *testing.T) {
	e := newEnv(t, relConfig, envOptions{})
	e.up.Push(fakeupstream.Behavior{Content: "one two three four five six seven eight", CutAfterEvents: 4})
	resp := e.post("/v1/chat/completions", testKey, chatBody("rel.single", true))
	data := sseData(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(data) < 2 {
		t.Fatalf("status %d, events %q", resp.StatusCode, data)
	}
	last := data[len(data)-1]
	if gjson.Get(last, "error.code").Str != "upstream_error" || gjson.Get(last, "error.message").Str == "" {
		t.Fatalf("last event %q is not an upstream_error", last)
	}
	for _, d := range data {
		if d == "[DONE]" {
			t.Error("a broken stream ended with [DONE]")
		}
	}
	// The openai SDK reports the error event as an error.
	e.up.Push(fakeupstream.Behavior{Content: "one two three four five six seven eight", CutAfterEvents: 4})
	sdk := e.sdk(testKey)
	s := sdk.Chat.Completions.NewStreaming(context.Background(), chatParams("rel.single", "hi"))
	text := ""
	for s.Next() {
		if c := s.Current(); len(c.Choices) > 0 {
			text += c.Choices[0].Delta.Content
		}
	}
	if s.Err() == nil || text != "one two three" {
		t.Errorf("SDK: text %q, err %v", text, s.Err())
	}
	// The call ends (metrics, settlement) just after the client's last
	// event: wait for it before reading what it counted.
	used := checkSettled(t, e, "rel.single")
	if out := e.relMetric("taskgate_tokens_total", "task", "rel.single", "direction", "output"); out <= 0 {
		t.Errorf("output tokens streamed before the cut were not counted: %v", out)
	}
	in := e.relMetric("taskgate_tokens_total", "task", "rel.single", "direction", "input")
	out := e.relMetric("taskgate_tokens_total", "task", "rel.single", "direction", "output")
	if float64(used) != in+out {
		t.Errorf("tokens used %d, metrics say %v in + %v out", used, in, out)
	}
	if e.relMetric("taskgate_upstream_errors_total", "endpoint", "primary", "kind", "stream_upstream_error") != 2 {
		t.Error("stream breaks not counted")
	}
}

// TestStreamStallMidway checks that a stream that stalls beyond
// idle_timeout ends with an upstream_timeout error event, promptly, and is
// settled.
func TestStreamStallMidway(t *testing.T) {
	e := newEnv(t, relConfig, envOptions{})
	e.up.Push(fakeupstream.Behavior{EventDelay: 3 * time.Second})
	t0 := time.Now()
	resp := e.post("/v1/chat/completions", testKey, chatBody("rel.single", true))
	data := sseData(t, resp.Body)
	resp.Body.Close()
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("a stall of 3s with idle_timeout 300ms ended after %v", d)
	}
	if len(data) == 0 {
		t.Fatal("no events")
	}
	if last := data[len(data)-1]; gjson.Get(last, "error.code").Str != "upstream_timeout" {
		t.Fatalf("last event %q is not upstream_timeout", last)
	}
	if used := checkSettled(t, e, "rel.single"); used <= 0 {
		t.Errorf("the stalled call counted %d tokens; its prompt was sent", used)
	}
}

// closeTracker serves a fake upstream and counts requests that ended
// because the gateway closed the connection.
type closeTracker struct {
	h         http.Handler
	cancelled atomic.Int64
}

func (c *closeTracker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.h.ServeHTTP(w, r)
	if r.Context().Err() != nil {
		c.cancelled.Add(1)
	}
}

// rawAnswerUpstream is an upstream that reads each request and answers it
// with answer, writing to the connection itself (closed when answer
// returns); it returns its base URL. The listener closes with the test.
func rawAnswerUpstream(t testing.TB, answer func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				answer(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/v1"
}

// trackedUpstream serves a fake upstream behind a closeTracker on a
// listener of its own (closed when the test ends) and returns its base URL.
func trackedUpstream(t *testing.T) (*fakeupstream.Server, *closeTracker, string) {
	t.Helper()
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fake.Close() })
	tr := &closeTracker{h: fake.Handler()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: tr}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return fake, tr, "http://" + ln.Addr().String() + "/v1"
}

// TestClientAbortCancelsUpstream checks that a client that goes away
// mid-stream makes the gateway drop the upstream call, and that the call is
// settled from the text streamed so far.
func TestClientAbortCancelsUpstream(t *testing.T) {
	fake, tr, url := trackedUpstream(t)
	e := newEnv(t, strings.Replace(relConfig, "{{UP}}", url, 1), envOptions{})

	chunks := make([]string, 200)
	for i := range chunks {
		chunks[i] = " word"
	}
	fake.SetDefault(fakeupstream.Behavior{Chunks: chunks, EventDelay: 20 * time.Millisecond})

	for _, how := range []string{"raw", "sdk"} {
		t.Run(how, func(t *testing.T) {
			before := tr.cancelled.Load()
			outBefore := e.relMetric("taskgate_tokens_total", "task", "rel.single", "direction", "output")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			got := 0
			if how == "raw" {
				req, _ := http.NewRequestWithContext(ctx, "POST", e.clientURL+"/v1/chat/completions", strings.NewReader(chatBody("rel.single", true)))
				req.Header.Set("Authorization", "Bearer "+testKey)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() && got < 4 {
					if strings.Contains(sc.Text(), `"content":" word"`) {
						got++
					}
				}
				cancel()
				resp.Body.Close()
			} else {
				sdk := e.sdk(testKey)
				s := sdk.Chat.Completions.NewStreaming(ctx, chatParams("rel.single", "hi"))
				for s.Next() && got < 4 {
					if c := s.Current(); len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
						got++
					}
				}
				cancel()
				s.Close()
			}
			if got < 4 {
				t.Fatalf("read %d chunks before aborting", got)
			}
			waitFor(t, "the upstream call to be cancelled", func() bool { return tr.cancelled.Load() == before+1 })
			e.settleAll()
			out := e.relMetric("taskgate_tokens_total", "task", "rel.single", "direction", "output") - outBefore
			if out < 4 || out >= 200 {
				t.Errorf("aborted stream settled with %v output tokens, want the streamed part (≥ 4, < 200)", out)
			}
			checkSettled(t, e, "rel.single")
			if e.relMetric("taskgate_active_streams") != 0 {
				t.Error("an aborted stream is still counted as active")
			}
		})
	}
}

// TestStoreOutageFailClosed checks that with on_error: fail_closed a call
// is refused promptly with 503 store_unavailable while Redis is down, that
// /readyz fails, and that both recover when Redis is back.
func TestStoreOutageFailClosed(t *testing.T) {
	rs := redistest.Start(t)
	e := newEnv(t, relConfig, envOptions{redisURL: rs.URL(), onError: config.FailClosed})
	ok := func() bool {
		resp := e.post("/v1/chat/completions", testKey, chatBody("rel.single", false))
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	if !ok() || e.relReady() != 200 {
		t.Fatal("not serving before the outage")
	}
	e.settleAll()
	rs.Stop()
	n := e.up.Count()
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		resp := e.post("/v1/chat/completions", testKey, chatBody("rel.single", i == 1))
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("refusal took %v", d)
		}
		if resp.StatusCode != 503 {
			t.Fatalf("status %d during the outage", resp.StatusCode)
		}
		if got := code(readErr(t, resp)); got != "store_unavailable" {
			t.Errorf("code %s", got)
		}
		if resp.Header.Get("retry-after") != "1" {
			t.Errorf("retry-after %q", resp.Header.Get("retry-after"))
		}
	}
	if e.up.Count() != n {
		t.Error("a call was forwarded while the store was down (fail_closed)")
	}
	if st := e.relReady(); st != 503 {
		t.Errorf("/readyz %d while the store is down", st)
	}
	if e.relMetric("taskgate_store_errors_total", "op", "reserve") < 3 {
		t.Error("store errors not counted")
	}
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "calls to succeed after Redis is back", ok)
	waitFor(t, "/readyz after Redis is back", func() bool { return e.relReady() == 200 })

	// A Redis that accepts connections but does not answer (CLIENT PAUSE):
	// the refusal still comes within the store timeout.
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rc.Close()
	if err := rc.Do(context.Background(), "CLIENT", "PAUSE", "2000", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	resp := e.post("/v1/chat/completions", testKey, chatBody("rel.single", false))
	if d := time.Since(t0); d > 1500*time.Millisecond {
		t.Errorf("refusal with a hung Redis took %v (store timeout 500ms)", d)
	}
	if resp.StatusCode != 503 || code(readErr(t, resp)) != "store_unavailable" {
		t.Errorf("hung Redis: status %d", resp.StatusCode)
	}
	waitFor(t, "calls to succeed after the pause", ok)
}

// TestStoreOutageFailOpen checks that with on_error: fail_open calls are
// served while Redis is down (/readyz stays 200 "degraded", so a load
// balancer keeps the replica, and taskgate_store_degraded is 1), and that the counts made meanwhile reach Redis once it is back:
// /admin/usage then equals what the upstream reported.
func TestStoreOutageFailOpen(t *testing.T) {
	rs := redistest.Start(t)
	e := newEnv(t, relConfig, envOptions{redisURL: rs.URL(), onError: config.FailOpen})
	// Redis restarts empty (no persistence), so the outage starts before
	// the first call: every count must come from the reconciliation.
	rs.Stop()
	client := e.sdk(testKey)
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		t0 := time.Now()
		if _, err := client.Chat.Completions.New(ctx, chatParams("rel.single", "during the outage "+strconv.Itoa(i))); err != nil {
			t.Fatalf("call %d during the outage: %v", i, err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("call %d took %v", i, d)
		}
	}
	s := client.Chat.Completions.NewStreaming(ctx, chatParams("rel.single", "streamed during the outage"))
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream during the outage: %v", err)
	}
	e.settleAll()
	if st := e.relReady(); st != 200 {
		t.Errorf("/readyz %d while the store is down under fail_open, want 200 degraded", st)
	}
	if got := e.metric("taskgate_store_degraded"); got != "1" {
		t.Errorf("taskgate_store_degraded = %q during the outage", got)
	}
	if err := rs.Restart(); err != nil {
		t.Fatal(err)
	}
	// One more call after Redis is back (it may still be served locally
	// until the background loop notices).
	if _, err := client.Chat.Completions.New(ctx, chatParams("rel.single", "after")); err != nil {
		t.Fatalf("call after the outage: %v", err)
	}
	e.settleAll()
	total := e.up.UsageTotal()
	want := strconv.FormatInt(total.PromptTokens+total.CompletionTokens, 10)
	var last usageJSON
	deadline := time.Now().Add(10 * time.Second)
	for {
		last = e.relUsage("rel.single")
		used, reserved, _ := last.window("task", "tokens", "day")
		reqs, _, _ := last.window("task", "requests", "day")
		if used == want && reqs == "6" && reserved == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the outage: tokens used %s (want %s), requests %s (want 6), reserved %s", used, want, reqs, reserved)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitFor(t, "/readyz after Redis is back", func() bool { return e.relReady() == 200 })
}

var soakFlag = flag.Bool("soak", false, "run the long soak test (60s; also TASKGATE_SOAK=1)")

// soakConfig has one endpoint ({{UP}}) whose breaker never opens (failing
// calls are part of the mix) and two tasks with limits: soak.ok for calls
// that finish (plain, streamed, failing) and soak.abort for streams the
// client aborts, which are settled from the streamed text.
const soakConfig = `
admin_token: ` + adminToken + `
body_limit: 1MiB
endpoints:
  - name: primary
    base_url: {{UP}}
    api_key: ` + upstreamKey + `
    model: fake-mini
    context_window: 100000
    max_output_tokens: 1000
    price: {input: "0.15", output: "0.60"}
    tokenizer: o200k_base
    timeout: 10s
    breaker: {failures: 1000000000, cooldown: 1s}
tasks:
  - key: soak.ok
    endpoints: [primary]
    typical_tokens: [20, 20]
    limits:
      task: {requests: {day: 100000000}, tokens: {day: 100000000000}, money: {day: "1000000.00"}}
      user: {tokens: {day: 100000000000}}
  - key: soak.abort
    endpoints: [primary]
    typical_tokens: [20, 200]
    limits:
      task: {requests: {day: 100000000}, tokens: {day: 100000000000}, money: {day: "1000000.00"}}
keys:
  - name: all
    secret: ` + testKey + `
    tasks: ["*"]
`

// TestSoak runs many concurrent clients mixing plain, streamed, aborted
// and failing calls against real Redis (≈3 s; 60 s with -soak or
// TASKGATE_SOAK=1) and then checks that nothing is left reserved, that the
// tokens counted equal the upstream's usage (aborted streams: the prompt
// plus the text streamed before the abort), and that goroutines and heap
// return to their baseline.
func TestSoak(t *testing.T) {
	dur := 3 * time.Second
	if *soakFlag || os.Getenv("TASKGATE_SOAK") == "1" {
		dur = 60 * time.Second
	}
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: upstreamKey, NoRecord: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	abortChunks := make([]string, 100)
	for i := range abortChunks {
		abortChunks[i] = " w"
	}
	fake.SetHandlerHook(func(r fakeupstream.Recorded) *fakeupstream.Behavior {
		switch {
		case bytes.Contains(r.Body, []byte("FAIL")):
			return &fakeupstream.Behavior{Status: 500}
		case bytes.Contains(r.Body, []byte("ABORT")):
			return &fakeupstream.Behavior{Chunks: abortChunks, EventDelay: 10 * time.Millisecond}
		}
		return &fakeupstream.Behavior{}
	})
	cfg := strings.Replace(soakConfig, "{{UP}}", fake.URL(), 1)
	e := newEnv(t, cfg, envOptions{redisURL: redistest.URL(t)})

	const workers = 16
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 15 * time.Second}
	var nOK, nFail, nAbort, nBad atomic.Int64
	var firstBad atomic.Pointer[string]
	bad := func(format string, a ...any) {
		nBad.Add(1)
		s := fmt.Sprintf(format, a...)
		firstBad.CompareAndSwap(nil, &s)
	}
	post := func(ctx context.Context, task, content string, stream bool) (*http.Response, error) {
		body := `{"model":"` + task + `","stream":` + strconv.FormatBool(stream) +
			`,"messages":[{"role":"user","content":"` + content + `"}]}`
		req, _ := http.NewRequestWithContext(ctx, "POST", e.clientURL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("X-Taskgate-User", "soaker")
		return hc.Do(req)
	}
	one := func(i int) {
		switch i % 10 {
		case 0, 1, 2, 3: // plain
			resp, err := post(context.Background(), "soak.ok", "plain call", false)
			if err != nil {
				bad("plain: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				bad("plain: %d", resp.StatusCode)
				return
			}
			nOK.Add(1)
		case 4, 5, 6: // streamed
			resp, err := post(context.Background(), "soak.ok", "streamed call", true)
			if err != nil {
				bad("stream: %v", err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
				bad("stream: %d %q", resp.StatusCode, tailBytes(b))
				return
			}
			nOK.Add(1)
		case 7: // aborted after two chunks of text
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			resp, err := post(ctx, "soak.abort", "ABORT", true)
			if err != nil {
				bad("abort: %v", err)
				return
			}
			sc := bufio.NewScanner(resp.Body)
			got := 0
			for got < 2 && sc.Scan() {
				if strings.Contains(sc.Text(), `"content":" w"`) {
					got++
				}
			}
			cancel()
			resp.Body.Close()
			if got < 2 {
				bad("abort: read %d chunks", got)
				return
			}
			nAbort.Add(1)
		default: // failing upstream, plain and streamed
			resp, err := post(context.Background(), "soak.ok", "FAIL", i%10 == 9)
			if err != nil {
				bad("fail: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 502 {
				bad("fail: %d", resp.StatusCode)
				return
			}
			nFail.Add(1)
		}
	}
	run := func(d time.Duration) {
		deadline := time.Now().Add(d)
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := w; time.Now().Before(deadline); i += 7 {
					one(i)
				}
			}(w)
		}
		wg.Wait()
	}
	quiesce := func() {
		e.settleAll()
		tr.CloseIdleConnections()
	}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}

	// Warm up (connection pools, scripts, tokenizer), then take the baseline.
	run(300 * time.Millisecond)
	quiesce()
	time.Sleep(100 * time.Millisecond) // let closed connections' goroutines end
	baseG, baseHeap := runtime.NumGoroutine(), heap()
	nOK.Store(0)
	nFail.Store(0)
	nAbort.Store(0)

	t0 := time.Now()
	run(dur)
	quiesce()
	calls := nOK.Load() + nFail.Load() + nAbort.Load()
	t.Logf("soak %v: %d calls (%d ok, %d failing, %d aborted) in %v", dur, calls, nOK.Load(), nFail.Load(), nAbort.Load(), time.Since(t0))
	if n := nBad.Load(); n > 0 {
		t.Fatalf("%d calls went wrong; first: %s", n, *firstBad.Load())
	}
	if nOK.Load() == 0 || nFail.Load() == 0 || nAbort.Load() == 0 {
		t.Fatal("the mix did not run")
	}

	// Nothing left reserved; counts add up.
	for _, task := range []string{"soak.ok", "soak.abort"} {
		u := e.relUsage(task)
		for _, w := range u.Windows {
			if r := amountText(w.Reserved); r != "0" && r != "0.000000" {
				t.Errorf("%s %s %s/%s: %s left reserved", task, w.Scope, w.Unit, w.Period, r)
			}
		}
	}
	ok := e.relUsage("soak.ok")
	used, _, _ := ok.window("task", "tokens", "day")
	total := fake.UsageTotal()
	if want := strconv.FormatInt(total.PromptTokens+total.CompletionTokens, 10); used != want {
		t.Errorf("soak.ok tokens used %s, the upstream reported %s", used, want)
	}
	ab := e.relUsage("soak.abort")
	abUsed, _, _ := ab.window("task", "tokens", "day")
	abReqs, _, _ := ab.window("task", "requests", "day")
	in := e.relMetric("taskgate_tokens_total", "task", "soak.abort", "direction", "input")
	out := e.relMetric("taskgate_tokens_total", "task", "soak.abort", "direction", "output")
	if abUsed != strconv.FormatInt(int64(in+out), 10) {
		t.Errorf("soak.abort tokens used %s, settled %v in + %v out", abUsed, in, out)
	}
	// Each aborted stream relayed at least the two chunks read and far
	// fewer than its 100 (the abort is noticed within an event or two).
	if n, _ := strconv.ParseInt(abReqs, 10, 64); n < nAbort.Load() {
		t.Errorf("soak.abort requests %s < %d aborted", abReqs, nAbort.Load())
	} else if out < float64(2*n) || out > float64(20*n) {
		t.Errorf("aborted streams settled %v output tokens for %d calls, want 2–20 each", out, n)
	}

	// Goroutines back to the baseline (small slack for pooled connections).
	slack := workers + 10
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseG+slack {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("goroutines %d, baseline %d (+%d slack):\n%s", runtime.NumGoroutine(), baseG, slack, buf[:n])
		}
		tr.CloseIdleConnections()
		time.Sleep(20 * time.Millisecond)
	}
	if h := heap(); h > baseHeap+64<<20 {
		t.Errorf("heap %d MiB after the soak, %d MiB at the baseline", h>>20, baseHeap>>20)
	}
}

// TestPlainBodyCutFailsOver checks that a plain 200 answer whose body
// breaks off (fewer bytes than its Content-Length, then the connection
// closes) is a failed try: nothing was sent to the client yet, so the call
// fails over.
func TestPlainBodyCutFailsOver(t *testing.T) {
	url := rawAnswerUpstream(t, func(c net.Conn) {
		c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"id\":\"chatcmpl-cut\","))
	})
	e := newEnv(t, strings.Replace(relConfig, "{{UP}}", url, 1), envOptions{})
	resp := e.post("/v1/chat/completions", testKey, chatBody("rel.failover", false))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Taskgate-Endpoint") != "secondary" || !json.Valid(b) {
		t.Fatalf("status %d, endpoint %q: %s", resp.StatusCode, resp.Header.Get("X-Taskgate-Endpoint"), b)
	}
	if e.relMetric("taskgate_failovers_total", "endpoint", "primary") != 1 {
		t.Error("the cut answer was not counted as a failover")
	}
	checkSettled(t, e, "rel.failover")
}
