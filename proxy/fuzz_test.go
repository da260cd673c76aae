package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"taskgate/config"
	"taskgate/internal/fakeupstream"
	"taskgate/limits"
	"taskgate/proxy"
	"taskgate/tasks"
)

// fuzzConfig is one endpoint ({{UP}}) and one task with limits, so every
// fuzzed call goes through reserve and settle.
const fuzzConfig = `
admin_token: ` + adminToken + `
body_limit: 1MiB
endpoints:
  - name: primary
    base_url: {{UP}}
    api_key: ` + upstreamKey + `
    model: fake-mini
    context_window: 100000
    max_output_tokens: 1000
    capabilities: [vision, file_input, tools, json_schema, json]
    price: {input: "0.15", output: "0.60"}
    tokenizer: o200k_base
    timeout: 5s
    first_byte_timeout: 2s
    idle_timeout: 2s
tasks:
  - key: fuzz.task
    endpoints: [primary]
    limits:
      task: {requests: {day: 1000000000}, tokens: {day: 1000000000000}, money: {day: "1000000.00"}}
keys:
  - name: all
    secret: ` + testKey + `
    tasks: ["*"]
`

// fuzzGateway starts a gateway (memory store) in front of upstreamURL for
// the lifetime of tb and returns its client API URL.
func fuzzGateway(tb testing.TB, upstreamURL string) string {
	tb.Helper()
	cfg, err := config.Parse([]byte(strings.ReplaceAll(fuzzConfig, "{{UP}}", upstreamURL)), func(string) (string, bool) { return "", false })
	if err != nil {
		tb.Fatal(err)
	}
	lim := limits.New(limits.Options{Store: limits.NewMemoryStore(), Location: cfg.Location})
	tb.Cleanup(func() { lim.Close() })
	reg, err := tasks.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := proxy.New(proxy.Options{Registry: reg, Limiter: lim, Metrics: proxy.NewMetrics(), Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	app := srv.ClientApp()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go app.Listener(ln)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Drain(ctx, app)
	})
	return "http://" + ln.Addr().String()
}

var fuzzHTTP = &http.Client{Timeout: 15 * time.Second}

// FuzzChatRequest sends arbitrary bodies to the client API routes through
// the real app and a healthy fake upstream: the gateway must not panic or
// hang, must always answer JSON (or, for a stream, well-formed SSE), and
// must never answer 5xx on its own.
func FuzzChatRequest(f *testing.F) {
	up, err := fakeupstream.New(fakeupstream.Options{APIKey: upstreamKey, NoRecord: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { up.Close() })
	base := fuzzGateway(f, up.URL())
	seeds := []string{
		`{"model":"fuzz.task","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"fuzz.task","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"fuzz.task","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"low"}}]}]}`,
		`{"model":"fuzz.task","messages":[{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"},{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}`,
		`{"model":"fuzz.task","max_tokens":-1,"messages":[]}`,
		`{"model":1}`,
		`{"model":"fuzz.task","messages":[{"role":"user","content":null}],"user":5}`,
		`{"model":"fuzz.task","messages":"no"}`,
		`[1,2,3]`,
		``,
		`{"model":"fuzz.task","messages":[{"role":"user","content":"\ud800"}]}`,
		`{"model":"fuzz.task","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}}`,
		`{"model":"fuzz.task","input":"embed me"}`,
		`{"model":"fuzz.task","prompt":"complete me","stream":true}`,
		`{"model":"fuzz.task","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"stream":true}`,
		strings.Repeat(`{"a":`, 70) + `1` + strings.Repeat(`}`, 70),
	}
	for i, s := range seeds {
		f.Add([]byte(s), uint8(i))
	}
	paths := []string{"/v1/chat/completions", "/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses"}
	f.Fuzz(func(t *testing.T, body []byte, route uint8) {
		path := paths[int(route)%len(paths)]
		req, err := http.NewRequest("POST", base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := fuzzHTTP.Do(req)
		if err != nil {
			t.Fatalf("%s %q: %v", path, body, err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s %q: reading the answer: %v", path, body, err)
		}
		if resp.Header.Get("x-request-id") == "" {
			t.Errorf("%s %q: no x-request-id", path, body)
		}
		ct := resp.Header.Get("Content-Type")
		if resp.StatusCode == 200 && strings.HasPrefix(ct, "text/event-stream") {
			checkSSE(t, out, false)
			return
		}
		if !strings.HasPrefix(ct, "application/json") || !json.Valid(out) {
			t.Fatalf("%s %q: status %d, %s answer that is not JSON: %q", path, body, resp.StatusCode, ct, out)
		}
		if resp.StatusCode >= 300 && !gjson.GetBytes(out, "error.message").Exists() {
			t.Errorf("%s %q: error %d without the OpenAI error shape: %s", path, body, resp.StatusCode, out)
		}
		if resp.StatusCode >= 500 {
			t.Errorf("%s %q: the gateway answered %d with a healthy upstream: %s", path, body, resp.StatusCode, out)
		}
	})
}

// checkSSE parses a relayed stream as an SSE client would (lines end in
// \r\n, \n or \r; a blank line ends an event) and checks that it ends with
// a complete event and that, unless [DONE] was relayed, the last event is
// the gateway's JSON error event. strict also asks that every event's data
// be JSON or [DONE] (true for a healthy upstream).
func checkSSE(t *testing.T, out []byte, upstreamArbitrary bool) {
	t.Helper()
	var (
		events  []string // data of each dispatched event
		data    []string
		hasData bool
		line    []byte
		done    bool
		partial bool // bytes after the last dispatched event
	)
	dispatch := func() {
		if hasData {
			events = append(events, strings.Join(data, "\n"))
		}
		data, hasData = nil, false
	}
	handle := func(l []byte) {
		if len(l) == 0 {
			dispatch()
			partial = false
			return
		}
		partial = true
		field, value, _ := bytes.Cut(l, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		if string(field) == "data" {
			data = append(data, string(value))
			hasData = true
			switch {
			case string(value) == "[DONE]":
				done = true
			case bytes.HasPrefix(value, []byte(`{"type":"response.`)):
				switch gjson.GetBytes(value, "type").Str {
				case "response.completed", "response.failed", "response.incomplete":
					done = true // the Responses API ends without [DONE]
				}
			}
		}
	}
	for i := 0; i < len(out); i++ {
		switch c := out[i]; c {
		case '\n':
			handle(line)
			line = line[:0]
		case '\r':
			handle(line)
			line = line[:0]
			if i+1 < len(out) && out[i+1] == '\n' {
				i++
			}
		default:
			line = append(line, c)
		}
	}
	if len(line) > 0 || partial {
		t.Fatalf("the stream ends inside an event: %q", tailBytes(out))
	}
	if len(events) == 0 {
		t.Fatalf("no event at all: %q", out)
	}
	last := events[len(events)-1]
	if !done {
		if !gjson.Valid(last) || !gjson.Get(last, "error.message").Exists() {
			t.Fatalf("the stream ends without [DONE] and without an error event; last event %q in %q", last, tailBytes(out))
		}
		if c := gjson.Get(last, "error.code").Str; c != "upstream_error" && c != "upstream_timeout" {
			t.Errorf("error event code %q in %q", c, out)
		}
	}
	if !upstreamArbitrary {
		for _, ev := range events {
			if ev != "[DONE]" && !gjson.Valid(ev) {
				t.Errorf("event data is not JSON: %q", ev)
			}
		}
	}
}

func tailBytes(b []byte) []byte {
	if len(b) > 400 {
		return b[len(b)-400:]
	}
	return b
}

// rawUpstream is a TCP server that answers every request with a fixed
// HTTP head and the bytes of the current payload, then closes.
// rawUpstream answers every streamed request with the payload of the
// moment, written as it is after the headers, then closes.
type rawUpstream struct {
	base    string // its base URL
	payload atomic.Pointer[rawAnswer]
}

type rawAnswer struct {
	chunked bool
	body    []byte
}

func newRawUpstream(tb testing.TB) *rawUpstream {
	u := &rawUpstream{}
	u.payload.Store(&rawAnswer{})
	u.base = rawAnswerUpstream(tb, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		a := u.payload.Load()
		head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
		if a.chunked {
			head += "Transfer-Encoding: chunked\r\n"
		}
		_, _ = c.Write([]byte(head + "\r\n"))
		_, _ = c.Write(a.body)
	})
	return u
}

func (u *rawUpstream) url() string { return u.base }

// FuzzSSERelay relays arbitrary upstream stream bytes (as a body read to
// the connection's end, or as raw bytes claimed to be chunked) and checks
// that the gateway neither panics nor hangs and that the client receives
// complete events ending in [DONE] or the gateway's error event.
func FuzzSSERelay(f *testing.F) {
	up := newRawUpstream(f)
	base := fuzzGateway(f, up.url())
	chunk := `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`
	usage := `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`
	for _, s := range []string{
		chunk + "\n\n" + usage + "\n\ndata: [DONE]\n\n",
		chunk + "\n\n",
		chunk,
		chunk + "\r",
		chunk + "\r\n\r\n" + "data: [DONE]\r\n\r\n",
		": keep-alive\n\n" + chunk + "\n\n",
		"event: x\ndata: {\"usage\":{\"prompt_tokens\":1}}\n\n",
		"data: [DONE]\n\ngarbage",
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\nb\"}}]}\n\n",
		"data:" + strings.Repeat("x", 70000) + "\n\n",
		"",
		"\n\n\n",
		"data: {\"error\":{\"message\":\"boom\"}}\n\n",
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte("5\r\ndata:\r\n0\r\n\r\n"), true)
	f.Add([]byte("ffffff\r\ndata: x"), true)
	f.Add([]byte("zz\r\n"), true)
	f.Fuzz(func(t *testing.T, payload []byte, chunked bool) {
		up.payload.Store(&rawAnswer{chunked: chunked, body: payload})
		req, err := http.NewRequest("POST", base+"/v1/chat/completions",
			strings.NewReader(`{"model":"fuzz.task","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := fuzzHTTP.Do(req)
		if err != nil {
			t.Fatalf("payload %q: %v", payload, err)
		}
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("payload %q: reading the stream: %v (got %q)", payload, err, tailBytes(out))
		}
		if resp.StatusCode != 200 {
			t.Fatalf("payload %q: status %d: %s", payload, resp.StatusCode, out)
		}
		checkSSE(t, out, true)
	})
}
