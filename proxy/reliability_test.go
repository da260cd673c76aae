package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
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
	if out := e.relMetric("taskgate_tokens_total", "task", "rel.single", "direction", "output"); out <= 0 {
		t.Errorf("output tokens streamed before the cut were not counted: %v", out)
	}
	used := checkSettled(t, e, "rel.single")
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

// TestClientAbortCancelsUpstream checks that a client that goes away
// mid-stream makes the gateway drop the upstream call, and that the call is
// settled from the text streamed so far.
func TestClientAbortCancelsUpstream(t *testing.T) {
	fake, err := fakeupstream.New(fakeupstream.Options{APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	tr := &closeTracker{h: fake.Handler()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: tr}
	go hs.Serve(ln)
	defer hs.Close()
	cfg := strings.Replace(relConfig, "{{UP}}", "http://"+ln.Addr().String()+"/v1", 1)
	e := newEnv(t, cfg, envOptions{})

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
	if err := rc.Do(context.Background(), "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	resp := e.post("/v1/chat/completions", testKey, chatBody("rel.single", false))
	if d := time.Since(t0); d > time.Second {
		t.Errorf("refusal with a hung Redis took %v (store timeout 500ms)", d)
	}
	if resp.StatusCode != 503 || code(readErr(t, resp)) != "store_unavailable" {
		t.Errorf("hung Redis: status %d", resp.StatusCode)
	}
	waitFor(t, "calls to succeed after the pause", ok)
}

// TestStoreOutageFailOpen checks that with on_error: fail_open calls are
// served while Redis is down (and /readyz reports not ready, as DESIGN §3
// says), and that the counts made meanwhile reach Redis once it is back:
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
	if st := e.relReady(); st != 503 {
		t.Errorf("/readyz %d while the store is down (DESIGN: not ready)", st)
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
