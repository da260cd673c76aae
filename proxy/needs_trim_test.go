package proxy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
)

const needsConfig = baseConfig + `
  - key: app.textonly
    endpoints: [primary]
  - key: app.small
    endpoints: [tiny]
    trim: {reserve_output: 100}
  - key: app.small_notrim
    endpoints: [tiny]
    trim: {enabled: false, reserve_output: 100}
  - key: app.bare
    endpoints: [bare]
`

// Two more endpoints: a small window, and one with no capabilities.
func needsEnv(t *testing.T) *env {
	cfg := strings.Replace(needsConfig, "tasks:\n", `  - name: tiny
    base_url: {{UP}}
    api_key: `+upstreamKey+`
    model: fake-tiny
    context_window: 400
    max_output_tokens: 100
    capabilities: [tools]
    price: {input: "1", output: "1"}
    tokenizer: o200k_base
  - name: bare
    base_url: {{UP}}
    api_key: `+upstreamKey+`
    model: fake-bare
    context_window: 100000
    max_output_tokens: 1000
    price: {input: "1", output: "1"}
tasks:
`, 1)
	return newEnv(t, cfg, envOptions{})
}

func imageMessage() openai.ChatCompletionMessageParamUnion {
	return openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
		openai.TextContentPart("What is on the shelf?"),
		openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://example.com/shelf.jpg", Detail: "low"}),
	})
}

func TestImageToTaskWithoutVisionRefused(t *testing.T) {
	e := needsEnv(t)
	client := e.sdk(testKey)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "app.textonly", Messages: []openai.ChatCompletionMessageParamUnion{imageMessage()},
	})
	var apierr *openai.Error
	if !errors.As(err, &apierr) || apierr.StatusCode != 400 || apierr.Code != "missing_capability" {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(apierr.Message, "vision") || !strings.Contains(apierr.Message, "app.textonly") {
		t.Errorf("message does not name the need and task: %s", apierr.Message)
	}
	if apierr.Response.Header.Get("x-should-retry") != "false" {
		t.Error("missing x-should-retry: false")
	}
	if e.up.Count() != 0 || e.up2.Count() != 0 {
		t.Error("an upstream received the refused call")
	}
}

func TestImageRoutedToCapableEndpoint(t *testing.T) {
	e := needsEnv(t)
	client := e.sdk(testKey)
	var resp *http.Response
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "app.vision", Messages: []openai.ChatCompletionMessageParamUnion{imageMessage()},
	}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("X-Taskgate-Endpoint"); got != "secondary" {
		t.Errorf("endpoint %q, want the vision-capable secondary", got)
	}
	if e.up.Count() != 0 || e.up2.Count() != 1 {
		t.Errorf("primary saw %d, secondary %d", e.up.Count(), e.up2.Count())
	}
	// Plain text on the same task goes to the first endpoint.
	if _, err := client.Chat.Completions.New(context.Background(), chatParams("app.vision", "hi"), option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("X-Taskgate-Endpoint"); got != "primary" {
		t.Errorf("text call endpoint %q", got)
	}
}

func TestToolsAndJSONSchemaNeeds(t *testing.T) {
	e := needsEnv(t)
	client := e.sdk(testKey)
	ctx := context.Background()
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "lookup", Parameters: shared.FunctionParameters{"type": "object"}})}
	p := chatParams("app.bare", "use a tool")
	p.Tools = tools
	_, err := client.Chat.Completions.New(ctx, p)
	var apierr *openai.Error
	if !errors.As(err, &apierr) || apierr.Code != "missing_capability" || !strings.Contains(apierr.Message, "tools") {
		t.Fatalf("tools on bare endpoint: %v", err)
	}
	p = chatParams("app.bare", "json please")
	p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "x", Schema: map[string]any{"type": "object"}}}}
	if _, err = client.Chat.Completions.New(ctx, p); !errors.As(err, &apierr) || !strings.Contains(apierr.Message, "json_schema") {
		t.Fatalf("json_schema on bare endpoint: %v", err)
	}
	// A soft need (json_object) is served anyway.
	p = chatParams("app.bare", "json please")
	p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	if _, err = client.Chat.Completions.New(ctx, p); err != nil {
		t.Fatalf("soft need refused: %v", err)
	}
	// Tools on a capable endpoint pass.
	p = chatParams("app.chat", "use a tool")
	p.Tools = tools
	if _, err = client.Chat.Completions.New(ctx, p); err != nil {
		t.Fatal(err)
	}
	if e.up.Count() != 2 {
		t.Errorf("upstream saw %d calls, want 2", e.up.Count())
	}
}

// history builds a chat body with a system prompt and n user/assistant turns
// of about 40 tokens each, then the newest user message.
func history(task string, n int) string {
	var b strings.Builder
	b.WriteString(`{"model":"` + task + `","messages":[{"role":"system","content":"You are terse."}`)
	for i := 0; i < n; i++ {
		b.WriteString(`,{"role":"user","content":"question ` + strconv.Itoa(i) + ` ` + strings.Repeat("lorem ipsum ", 15) + `"}`)
		b.WriteString(`,{"role":"assistant","content":"answer ` + strconv.Itoa(i) + ` ` + strings.Repeat("dolor sit ", 15) + `"}`)
	}
	b.WriteString(`,{"role":"user","content":"the newest question"}]}`)
	return b.String()
}

func TestTrimEndToEnd(t *testing.T) {
	e := needsEnv(t)
	resp := e.post("/v1/chat/completions", testKey, history("app.small", 20))
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	dropped, _ := strconv.Atoi(resp.Header.Get("X-Taskgate-Trimmed"))
	if dropped == 0 {
		t.Fatal("no X-Taskgate-Trimmed on a history that cannot fit 400 tokens")
	}
	sent := e.up.Requests()[0].Body
	msgs := gjson.GetBytes(sent, "messages").Array()
	if len(msgs) != 42-dropped {
		t.Errorf("upstream got %d messages, header says %d of 42 dropped", len(msgs), dropped)
	}
	if msgs[0].Get("role").Str != "system" || msgs[len(msgs)-1].Get("content").Str != "the newest question" {
		t.Errorf("system or newest message lost: %s", sent)
	}
	if len(sent) > 400*8 {
		t.Errorf("trimmed body still large: %d bytes", len(sent))
	}
}

func TestTrimOffAndTooLong(t *testing.T) {
	e := needsEnv(t)
	// trim disabled: an over-long call is refused, not forwarded.
	resp := e.post("/v1/chat/completions", testKey, history("app.small_notrim", 20))
	if resp.StatusCode != 400 || code(readErr(t, resp)) != "context_length_exceeded" {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if resp.Header.Get("x-should-retry") != "false" {
		t.Error("missing x-should-retry: false")
	}
	// The newest turn alone does not fit.
	huge := `{"model":"app.small","messages":[{"role":"user","content":"` + strings.Repeat("word ", 2000) + `"}]}`
	resp = e.post("/v1/chat/completions", testKey, huge)
	if resp.StatusCode != 400 || code(readErr(t, resp)) != "context_length_exceeded" {
		t.Fatalf("huge newest turn: status %d", resp.StatusCode)
	}
	if e.up.Count() != 0 {
		t.Errorf("upstream saw %d calls", e.up.Count())
	}
}
