package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"taskgate/config"
	"taskgate/guard"
	"taskgate/internal/fakeupstream"
	"taskgate/internal/redistest"
	"taskgate/limits"
	"taskgate/proxy"
	"taskgate/tasks"
)

// env is one gateway in front of fake upstreams, over real sockets.
type env struct {
	t         testing.TB
	up, up2   *fakeupstream.Server
	srv       *proxy.Server
	lim       *limits.Limiter
	store     limits.Store
	metrics   *proxy.Metrics
	clientURL string // http://127.0.0.1:port
	adminURL  string
}

const (
	testKey      = "sk-test-client"
	adminToken   = "admin-secret"
	upstreamKey  = "sk-upstream-1"
	upstreamKey2 = "sk-upstream-2"
)

// baseConfig is a config with two endpoints and a few tasks; {{UP}} and
// {{UP2}} are replaced by the fake upstreams' URLs. extra is appended
// under tasks: as more task entries.
const baseConfig = `
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
    capabilities: [tools, json_schema, json]
    price: {input: "0.15", output: "0.60"}
    tokenizer: o200k_base
    timeout: 5s
    first_byte_timeout: 2s
    idle_timeout: 2s
    breaker: {failures: 3, cooldown: 300ms}
  - name: secondary
    base_url: {{UP2}}
    api_key: ` + upstreamKey2 + `
    model: fake-large
    context_window: 100000
    max_output_tokens: 1000
    capabilities: [vision, file_input, tools, json_schema, json, image_output]
    price: {input: "2.50", output: "10.00", image: "0.04"}
    tokenizer: o200k_base
    timeout: 5s
    first_byte_timeout: 2s
    idle_timeout: 2s
tasks:
  - key: app.chat
    endpoints: [primary]
    typical_tokens: [100, 50]
  - key: app.other
    endpoints: [primary]
  - key: app.disabled
    enabled: false
    endpoints: [primary]
  - key: app.vision
    endpoints: [primary, secondary]
`

const baseKeys = `
keys:
  - name: all
    secret: ` + testKey + `
    tasks: ["*"]
    source: tests
  - name: chat-only
    secret: sk-chat-only
    tasks: [app.chat]
  - name: fixed-user
    secret: sk-fixed-user
    tasks: [app.chat]
    user: fixed-person
`

type envOptions struct {
	redisURL string // "": memory store
	prefix   string
	onError  string
	logs     io.Writer // nil: logs are discarded
}

// newEnv starts fake upstreams and a gateway for cfgText (baseConfig-like,
// with {{UP}}/{{UP2}}); keys from baseKeys are added when cfgText has none.
func newEnv(t testing.TB, cfgText string, o envOptions) *env {
	t.Helper()
	up, err := fakeupstream.New(fakeupstream.Options{APIKey: upstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	up2, err := fakeupstream.New(fakeupstream.Options{APIKey: upstreamKey2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up2.Close() })
	text := strings.ReplaceAll(strings.ReplaceAll(cfgText, "{{UP}}", up.URL()), "{{UP2}}", up2.URL())
	if !strings.Contains(text, "\nkeys:") {
		text += baseKeys
	}
	cfg, err := config.Parse([]byte(text), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	e := &env{t: t, up: up, up2: up2}
	e.start(cfg, o)
	return e
}

func (e *env) start(cfg *config.Config, o envOptions) {
	t := e.t
	if o.onError != "" {
		cfg.Store.OnError = o.onError
	}
	if o.redisURL != "" {
		prefix := o.prefix
		if prefix == "" {
			prefix = redistest.Prefix(t)
		}
		rs, err := limits.NewRedisStore(limits.RedisOptions{URL: o.redisURL, Prefix: prefix, Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		e.store = rs
	} else {
		e.store = limits.NewMemoryStore()
	}
	e.lim = limits.New(limits.Options{Store: e.store, Location: cfg.Location, OnError: o.onError})
	t.Cleanup(func() { e.lim.Close() })
	reg, err := tasks.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.metrics = proxy.NewMetrics()
	logOut := io.Writer(io.Discard)
	if o.logs != nil {
		logOut = o.logs
	}
	log := slog.New(slog.NewJSONHandler(logOut, nil))
	notifier := guard.NewNotifier(guard.NotifierOptions{Logger: log, Backoff: 20 * time.Millisecond,
		OnResult: func(r string) { e.metrics.WatcherDeliveries.WithLabelValues(r).Inc() }})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = notifier.Close(ctx)
	})
	e.srv, err = proxy.New(proxy.Options{Registry: reg, Limiter: e.lim, Metrics: e.metrics, Logger: log, Notifier: notifier})
	if err != nil {
		t.Fatal(err)
	}
	client, admin := e.srv.ClientApp(), e.srv.AdminApp()
	cl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go client.Listener(cl)
	go admin.Listener(al)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.srv.Drain(ctx, client, admin)
	})
	e.clientURL = "http://" + cl.Addr().String()
	e.adminURL = "http://" + al.Addr().String()
}

// sdk is the official OpenAI client pointed at the gateway, no retries.
func (e *env) sdk(key string, opts ...option.RequestOption) openai.Client {
	base := []option.RequestOption{option.WithBaseURL(e.clientURL + "/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0)}
	return openai.NewClient(append(base, opts...)...)
}

// post sends a raw request to the client API.
func (e *env) post(path, key, body string, headers ...string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.clientURL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// admin calls the admin API with the token and decodes JSON into out (if not nil).
func (e *env) admin(method, path, body string, out any) int {
	e.t.Helper()
	req, err := http.NewRequest(method, e.adminURL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

// apiErr is the OpenAI error shape.
type apiErr struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// readErr reads an error answer and checks its shape.
func readErr(t testing.TB, resp *http.Response) apiErr {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("error body is not JSON: %q", b)
	}
	for _, f := range []string{"message", "type", "param", "code"} {
		if _, ok := raw["error"][f]; !ok {
			t.Fatalf("error body lacks %q: %s", f, b)
		}
	}
	var e apiErr
	_ = json.Unmarshal(b, &e)
	if resp.Header.Get("x-request-id") == "" {
		t.Errorf("error answer without x-request-id: %s", b)
	}
	return e
}

func code(e apiErr) string {
	if e.Error.Code == nil {
		return "<null>"
	}
	return *e.Error.Code
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
