package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"taskgate/internal/redistest"
	"taskgate/proxy"
)

const apiConfig = baseConfig + `
  - key: app.api
    endpoints: [primary, secondary]
    typical_tokens: [20, 20]
    limits:
      task: {requests: {day: 1000}, tokens: {day: 1000000}, money: {day: "10.00"}}
  - key: app.images
    endpoints: [secondary]
    limits:
      task: {money: {day: "1.00"}}
  - key: app.closed
    endpoints: [secondary]
    limits:
      task: {requests: {day: 0}}
`

func TestResponsesPlainStreamedAndPolled(t *testing.T) {
	e := newEnv(t, apiConfig, envOptions{redisURL: redistest.URL(t)})
	client := e.sdk(testKey)
	ctx := context.Background()
	r, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:        "app.api",
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("Say hello")},
		Instructions: openai.String("Be brief."),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.OutputText() == "" {
		t.Fatal("no output text")
	}
	s := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "app.api",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Stream hello")},
	})
	var text strings.Builder
	completed := false
	for s.Next() {
		ev := s.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			completed = true
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if !completed || text.Len() == 0 {
		t.Fatalf("stream: completed %v, text %q", completed, text.String())
	}
	e.settleAll()
	var before usageJSON
	e.admin("GET", "/admin/usage?task=app.api", "", &before)
	tokens, reserved, _ := before.window("task", "tokens", "day")
	total := e.up.UsageTotal()
	if want := fmt.Sprint(total.PromptTokens + total.CompletionTokens); tokens != want {
		t.Errorf("tokens used %s, upstream reported %s", tokens, want)
	}
	if reserved != "0" {
		t.Errorf("reserved %s", reserved)
	}
	// Polling the response passes through and charges nothing.
	got, err := client.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}, option.WithHeader("X-Taskgate-Task", "app.api"))
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != r.ID {
		t.Errorf("polled %q, want %q", got.ID, r.ID)
	}
	e.settleAll()
	var after usageJSON
	e.admin("GET", "/admin/usage?task=app.api", "", &after)
	if a, _, _ := after.window("task", "requests", "day"); a != "2" {
		t.Errorf("requests after polling: %s, want 2", a)
	}
}

func TestResponsesNeedsRefusal(t *testing.T) {
	e := newEnv(t, apiConfig, envOptions{})
	client := e.sdk(testKey)
	_, err := client.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "app.chat",
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
				responses.ResponseInputContentParamOfInputImage("low"),
			}, "user"),
		}},
	})
	var apierr *openai.Error
	if !errors.As(err, &apierr) || apierr.Code != "missing_capability" {
		t.Fatalf("err = %v", err)
	}
	if e.up.Count() != 0 {
		t.Error("upstream saw the refused call")
	}
}

func TestImagesPricedPerImage(t *testing.T) {
	e := newEnv(t, apiConfig, envOptions{})
	client := e.sdk(testKey)
	ctx := context.Background()
	img, err := client.Images.Generate(ctx, openai.ImageGenerateParams{Prompt: "a cat", Model: "app.images", N: openai.Int(2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Data) != 2 {
		t.Fatalf("%d images", len(img.Data))
	}
	e.settleAll()
	var u usageJSON
	e.admin("GET", "/admin/usage?task=app.images", "", &u)
	if money, _, _ := u.window("task", "money", "day"); money != "0.080000" {
		t.Errorf("money %s, want 0.080000 (2 × $0.04)", money)
	}
	// A task whose endpoints cannot make images refuses.
	_, err = client.Images.Generate(ctx, openai.ImageGenerateParams{Prompt: "a cat", Model: "app.chat"})
	var apierr *openai.Error
	if !errors.As(err, &apierr) || apierr.Code != "missing_capability" || !strings.Contains(apierr.Message, "image_output") {
		t.Fatalf("image on a text task: %v", err)
	}
}

// TestEveryRoutePassesThroughLimits proves there is no side door: a task
// with a limit of 0 requests refuses every route that reaches an upstream.
func TestEveryRoutePassesThroughLimits(t *testing.T) {
	e := newEnv(t, apiConfig, envOptions{})
	bodies := map[string]string{
		"/v1/chat/completions":   `{"model":"app.closed","messages":[{"role":"user","content":"x"}]}`,
		"/v1/completions":        `{"model":"app.closed","prompt":"x"}`,
		"/v1/embeddings":         `{"model":"app.closed","input":"x"}`,
		"/v1/responses":          `{"model":"app.closed","input":"x"}`,
		"/v1/images/generations": `{"model":"app.closed","prompt":"x"}`,
	}
	routes := proxy.Routes()
	if len(routes) != len(bodies) {
		t.Fatalf("the gateway serves %d routes, the test knows %d: %v", len(routes), len(bodies), routes)
	}
	for _, path := range routes {
		body, ok := bodies[path]
		if !ok {
			t.Fatalf("route %s has no test body", path)
		}
		for _, stream := range []bool{false, true} {
			b := body
			if stream {
				b = strings.Replace(b, "{", `{"stream":true,`, 1)
			}
			resp := e.post(path, testKey, b)
			if resp.StatusCode != 429 || code(readErr(t, resp)) != "limit_exceeded" {
				t.Errorf("%s (stream %v): status %d, want 429 limit_exceeded", path, stream, resp.StatusCode)
			}
		}
	}
	if n := e.up.Count() + e.up2.Count(); n != 0 {
		t.Errorf("upstreams saw %d calls", n)
	}
}
