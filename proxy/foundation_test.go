package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"taskgate/config"
	"taskgate/internal/fakeupstream"
)

func chatParams(model, text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    openai.ChatModel(model),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
	}
}

func TestChatPlainThroughSDK(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	client := e.sdk(testKey)
	var resp *http.Response
	c, err := client.Chat.Completions.New(context.Background(), chatParams("app.chat", "Hi there"), option.WithResponseInto(&resp), option.WithHeader("X-Taskgate-Source", "tests"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Choices[0].Message.Content; got != fakeupstream.DefaultContent {
		t.Errorf("content = %q", got)
	}
	for h, want := range map[string]string{"X-Taskgate-Task": "app.chat", "X-Taskgate-Endpoint": "primary"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if resp.Header.Get("x-request-id") == "" {
		t.Errorf("missing x-request-id: %v", resp.Header)
	}
	// 0.15 and 0.60 dollars per million input and output tokens, in whole micro-dollars rounded up.
	in, out := c.Usage.PromptTokens, c.Usage.CompletionTokens
	wantCost := config.FormatMicros((in*150_000 + out*600_000 + 999_999) / 1_000_000)
	if got := resp.Header.Get("X-Taskgate-Cost"); got != wantCost {
		t.Errorf("X-Taskgate-Cost = %q, want %q (%d in, %d out)", got, wantCost, in, out)
	}
	reqs := e.up.Requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d requests", len(reqs))
	}
	r := reqs[0]
	if got := r.Header.Get("Authorization"); got != "Bearer "+upstreamKey {
		t.Errorf("upstream Authorization = %q", got)
	}
	for name := range r.Header {
		if strings.HasPrefix(strings.ToLower(name), "x-taskgate") {
			t.Errorf("upstream saw gateway header %s", name)
		}
	}
	if strings.Contains(string(r.Body), testKey) || strings.Contains(r.Header.Get("Authorization"), testKey) {
		t.Error("the client's key reached the upstream")
	}
	if !strings.Contains(string(r.Body), `"model":"fake-mini"`) {
		t.Errorf("upstream body model not replaced: %s", r.Body)
	}
	if r.Path != "/v1/chat/completions" {
		t.Errorf("upstream path %q", r.Path)
	}
}

func TestUnknownFieldsPassThrough(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	resp := e.post("/v1/chat/completions", testKey, `{"model":"app.chat","messages":[{"role":"user","content":"x"}],"some_future_field":{"a":[1,2]},"temperature":0.3}`)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	body := string(e.up.Requests()[0].Body)
	if !strings.Contains(body, `"some_future_field":{"a":[1,2]}`) || !strings.Contains(body, `"temperature":0.3`) {
		t.Errorf("upstream body lost fields: %s", body)
	}
}

func TestChatStreamEventByEvent(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	e.up.Push(fakeupstream.Behavior{Chunks: []string{"one", " two", " three", " four"}, EventDelay: 250 * time.Millisecond})
	client := e.sdk(testKey)
	start := time.Now()
	var resp *http.Response
	stream := client.Chat.Completions.NewStreaming(context.Background(), chatParams("app.chat", "count"), option.WithResponseInto(&resp))
	var acc openai.ChatCompletionAccumulator
	var first time.Duration
	n := 0
	for stream.Next() {
		ch := stream.Current()
		acc.AddChunk(ch)
		if n == 0 {
			first = time.Since(start)
		}
		n++
		if ch.Usage.TotalTokens != 0 {
			t.Error("client that did not ask for usage got a usage chunk")
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	total := time.Since(start)
	if got := acc.Choices[0].Message.Content; got != "one two three four" {
		t.Errorf("content %q", got)
	}
	// The upstream takes ≥ 5×250 ms; the first event must not wait for it.
	if first > total-600*time.Millisecond {
		t.Errorf("first event after %v of %v: not relayed event by event", first, total)
	}
	body := string(e.up.Requests()[0].Body)
	if !strings.Contains(body, `"include_usage":true`) {
		t.Errorf("gateway did not ask upstream for usage: %s", body)
	}
	if est := resp.Header.Get("X-Taskgate-Cost-Estimate"); !regexp.MustCompile(`^[0-9]+\.[0-9]{6}$`).MatchString(est) || est == "0.000000" {
		t.Errorf("X-Taskgate-Cost-Estimate = %q, want dollars with six decimals", est)
	}
}

func TestStreamIncludeUsageWhenAsked(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	client := e.sdk(testKey)
	p := chatParams("app.chat", "hi")
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(context.Background(), p)
	var usage int64
	for stream.Next() {
		if u := stream.Current().Usage.TotalTokens; u > 0 {
			usage = u
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if usage == 0 {
		t.Error("client that asked for usage got none")
	}
}

func TestEmbeddingsCompletionsModels(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	client := e.sdk(testKey)
	ctx := context.Background()
	emb, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "app.chat",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(emb.Data) != 2 {
		t.Errorf("embeddings: %d vectors", len(emb.Data))
	}
	comp, err := client.Completions.New(ctx, openai.CompletionNewParams{
		Model:  "app.chat",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say hi")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if comp.Choices[0].Text == "" {
		t.Error("completion without text")
	}
	chatOnly := e.sdk("sk-chat-only")
	models, err := chatOnly.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(models.Data) != 1 || models.Data[0].ID != "app.chat" {
		t.Errorf("models for chat-only key: %+v", models.Data)
	}
	all, err := client.Models.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Data) != 4 {
		t.Errorf("models for * key: %d", len(all.Data))
	}
}

func TestTaskIdentification(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	msg := `"messages":[{"role":"user","content":"x"}]`
	cases := []struct {
		name    string
		key     string
		body    string
		headers []string
		status  int
		code    string
		task    string
	}{
		{"model names the task", testKey, `{"model":"app.other",` + msg + `}`, nil, 200, "", "app.other"},
		{"header names the task", testKey, `{"model":"gpt-4o-mini",` + msg + `}`, []string{"X-Taskgate-Task", "app.other"}, 200, "", "app.other"},
		{"key's only task", "sk-chat-only", `{"model":"gpt-4o-mini",` + msg + `}`, nil, 200, "", "app.chat"},
		{"no task", testKey, `{"model":"gpt-4o-mini",` + msg + `}`, nil, 400, "task_required", ""},
		{"not allowed", "sk-chat-only", `{"model":"app.other",` + msg + `}`, nil, 403, "task_not_allowed", ""},
		{"unknown by header", testKey, `{"model":"x",` + msg + `}`, []string{"X-Taskgate-Task", "app.nope"}, 404, "unknown_task", ""},
		{"unknown by model", testKey, `{"model":"app.nope",` + msg + `}`, nil, 404, "unknown_task", ""},
		{"no key", "", `{"model":"app.chat",` + msg + `}`, nil, 401, "invalid_api_key", ""},
		{"wrong key", "sk-wrong", `{"model":"app.chat",` + msg + `}`, nil, 401, "invalid_api_key", ""},
		{"disabled", testKey, `{"model":"app.disabled",` + msg + `}`, nil, 403, "task_disabled", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := e.post("/v1/chat/completions", tc.key, tc.body, tc.headers...)
			if resp.StatusCode != tc.status {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			if tc.code != "" {
				if got := code(readErr(t, resp)); got != tc.code {
					t.Errorf("code %q, want %q", got, tc.code)
				}
				return
			}
			resp.Body.Close()
			if got := resp.Header.Get("X-Taskgate-Task"); got != tc.task {
				t.Errorf("task %q, want %q", got, tc.task)
			}
		})
	}
}

func TestSDKErrorForIdentification(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	client := e.sdk("sk-wrong")
	_, err := client.Chat.Completions.New(context.Background(), chatParams("app.chat", "x"))
	var apierr *openai.Error
	if !errors.As(err, &apierr) || apierr.StatusCode != 401 || apierr.Code != "invalid_api_key" {
		t.Fatalf("err = %v", err)
	}
}

func TestBadInputs(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	big := `{"model":"app.chat","messages":[{"role":"user","content":"` + strings.Repeat("a", 2<<20) + `"}]}`
	cases := []struct {
		name, path, body string
		status           int
		code             string
	}{
		{"malformed JSON", "/v1/chat/completions", `{"model":"app.chat","messages":[`, 400, "invalid_request"},
		{"messages as a string", "/v1/chat/completions", `{"model":"app.chat","messages":"hello"}`, 400, "invalid_request"},
		{"model not a string", "/v1/chat/completions", `{"model":5,"messages":[]}`, 400, "invalid_request"},
		{"stream not a bool", "/v1/chat/completions", `{"model":"app.chat","stream":"yes","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request"},
		{"body over the limit", "/v1/chat/completions", big, 413, "request_too_large"},
		{"NUL byte", "/v1/chat/completions", "{\"model\":\"app.chat\",\"messages\":[{\"role\":\"user\",\"content\":\"a\x00b\"}]}", 400, "invalid_request"},
		{"invalid UTF-8", "/v1/chat/completions", "{\"model\":\"app.chat\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, "invalid_request"},
		{"deep nesting", "/v1/chat/completions", `{"model":"app.chat","x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `,"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request"},
		{"empty body", "/v1/chat/completions", ``, 400, "invalid_request"},
		{"not an object", "/v1/chat/completions", `[1,2]`, 400, "invalid_request"},
		{"unknown path", "/v1/nope", `{}`, 404, "not_found"},
		{"admin path on client listener", "/admin/blocks", `{}`, 404, "not_found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var resp *http.Response
			if len(tc.body) > 1<<20 {
				resp = overLimit(t, e.clientURL, tc.path, len(tc.body))
			} else {
				resp = e.post(tc.path, testKey, tc.body)
			}
			if resp.StatusCode != tc.status {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d, want %d: %.200s", resp.StatusCode, tc.status, b)
			}
			if got := code(readErr(t, resp)); got != tc.code {
				t.Errorf("code %q, want %q", got, tc.code)
			}
			// The next good call still works.
			ok := e.post("/v1/chat/completions", testKey, `{"model":"app.chat","messages":[{"role":"user","content":"x"}]}`)
			ok.Body.Close()
			if ok.StatusCode != 200 {
				t.Fatalf("good call after bad input: %d", ok.StatusCode)
			}
		})
	}
	if n := e.up.Count(); n != len(cases) {
		t.Errorf("upstream saw %d calls, want only the %d good ones", n, len(cases))
	}
}

// overLimit announces a body of n bytes and sends only the headers: the
// gateway must refuse it from Content-Length alone. (Sending the whole body
// races the server's close after its 413 and can end in a reset.)
func overLimit(t *testing.T, base, path string, n int) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, testKey, n)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to an over-limit body: %v", err)
	}
	return resp
}

func TestAdminNeedsToken(t *testing.T) {
	e := newEnv(t, baseConfig, envOptions{})
	for _, p := range []string{"/admin/blocks", "/admin/tasks", "/admin/usage?task=app.chat"} {
		resp, err := http.Get(e.adminURL + p)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 401 {
			t.Errorf("%s without token: %d", p, resp.StatusCode)
		}
		resp.Body.Close()
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(e.adminURL + p)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
		resp.Body.Close()
	}
}
