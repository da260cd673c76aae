package fakeupstream_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"taskgate/internal/fakeupstream"
)

const testKey = "sk-fake-test"

// start runs a server with testKey and returns it with an SDK client that
// does not retry.
func start(t *testing.T, opts fakeupstream.Options) (*fakeupstream.Server, openai.Client) {
	t.Helper()
	if opts.APIKey == "" {
		opts.APIKey = testKey
	}
	s, err := fakeupstream.New(opts)
	if err != nil {
		t.Fatalf("start fake upstream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := openai.NewClient(option.WithBaseURL(s.URL()+"/"), option.WithAPIKey(opts.APIKey), option.WithMaxRetries(0))
	return s, c
}

func userMsg(text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "fake-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
	}
}

// lastBody is the body of the newest recorded request.
func lastBody(t *testing.T, s *fakeupstream.Server) []byte {
	t.Helper()
	reqs := s.Requests()
	if len(reqs) == 0 {
		t.Fatal("no request recorded")
	}
	return reqs[len(reqs)-1].Body
}

func TestChatPlain(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	tests := []struct {
		name        string
		b           fakeupstream.Behavior
		wantContent string
		wantFinish  string
		wantTool    *fakeupstream.ToolCall
		wantModel   string
		usage       func(body []byte) (p, c int64) // nil: no usage
	}{
		{
			name: "default", wantContent: fakeupstream.DefaultContent, wantFinish: "stop", wantModel: "fake-mini",
			usage: func(b []byte) (int64, int64) { return fakeupstream.PromptTokens(b), 5 },
		},
		{
			name: "content", b: fakeupstream.Behavior{Content: "one two\nthree"}, wantContent: "one two\nthree", wantFinish: "stop", wantModel: "fake-mini",
			usage: func(b []byte) (int64, int64) { return fakeupstream.PromptTokens(b), 3 },
		},
		{
			name: "chunks", b: fakeupstream.Behavior{Chunks: []string{"ab", "c"}}, wantContent: "abc", wantFinish: "stop", wantModel: "fake-mini",
			usage: func(b []byte) (int64, int64) { return fakeupstream.PromptTokens(b), 2 },
		},
		{
			name: "usage override", b: fakeupstream.Behavior{Usage: &fakeupstream.Usage{PromptTokens: 7, CompletionTokens: 9}},
			wantContent: fakeupstream.DefaultContent, wantFinish: "stop", wantModel: "fake-mini",
			usage: func([]byte) (int64, int64) { return 7, 9 },
		},
		{
			name: "no usage", b: fakeupstream.Behavior{NoUsage: true, FinishReason: "length", Model: "fake-mini-2025"},
			wantContent: fakeupstream.DefaultContent, wantFinish: "length", wantModel: "fake-mini-2025",
		},
		{
			name: "tool call", b: fakeupstream.Behavior{ToolCall: &fakeupstream.ToolCall{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			wantFinish: "tool_calls", wantModel: "fake-mini",
			wantTool: &fakeupstream.ToolCall{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`},
			usage:    func(b []byte) (int64, int64) { return fakeupstream.PromptTokens(b), 2 },
		},
		{
			name: "off purpose", b: fakeupstream.Behavior{OffPurpose: true, Content: "No."},
			wantContent: "[[off-purpose]] No.", wantFinish: "stop", wantModel: "fake-mini",
			usage: func(b []byte) (int64, int64) { return fakeupstream.PromptTokens(b), 3 },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.Push(tt.b)
			before := s.UsageTotal()
			res, err := client.Chat.Completions.New(context.Background(), userMsg("hi"))
			if err != nil {
				t.Fatalf("chat: %v", err)
			}
			if res.Object != "chat.completion" || !strings.HasPrefix(res.ID, "chatcmpl-") || res.Model != tt.wantModel {
				t.Errorf("object %q id %q model %q", res.Object, res.ID, res.Model)
			}
			if len(res.Choices) != 1 {
				t.Fatalf("choices = %d", len(res.Choices))
			}
			ch := res.Choices[0]
			if ch.Message.Content != tt.wantContent || ch.FinishReason != tt.wantFinish || ch.Message.Role != "assistant" {
				t.Errorf("content %q finish %q role %q", ch.Message.Content, ch.FinishReason, ch.Message.Role)
			}
			if tt.wantTool != nil {
				if len(ch.Message.ToolCalls) != 1 {
					t.Fatalf("tool calls = %d", len(ch.Message.ToolCalls))
				}
				tc := ch.Message.ToolCalls[0]
				if tc.ID != tt.wantTool.ID || tc.Function.Name != tt.wantTool.Name || tc.Function.Arguments != tt.wantTool.Arguments || tc.Type != "function" {
					t.Errorf("tool call = %+v", tc)
				}
				if !gjson.Get(res.RawJSON(), "choices.0.message.content").Exists() || gjson.Get(res.RawJSON(), "choices.0.message.content").Type != gjson.Null {
					t.Errorf("content should be null next to tool_calls: %s", res.RawJSON())
				}
			}
			got := s.UsageTotal()
			if tt.usage == nil {
				if res.JSON.Usage.Valid() {
					t.Errorf("usage reported: %s", res.RawJSON())
				}
				if got != before {
					t.Errorf("usage total moved: %+v → %+v", before, got)
				}
				return
			}
			p, c := tt.usage(lastBody(t, s))
			if res.Usage.PromptTokens != p || res.Usage.CompletionTokens != c || res.Usage.TotalTokens != p+c {
				t.Errorf("usage = %+v, want %d/%d", res.Usage, p, c)
			}
			if d := got.TotalTokens - before.TotalTokens; d != p+c {
				t.Errorf("UsageTotal grew by %d, want %d", d, p+c)
			}
		})
	}
}

func TestChatStream(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	tests := []struct {
		name         string
		b            fakeupstream.Behavior
		includeUsage bool
		wantContent  string
		wantChunks   int  // content/argument delta chunks
		wantUsage    bool // the accumulated result has usage
		wantFinish   string
		wantTool     string
	}{
		{name: "default", wantContent: fakeupstream.DefaultContent, wantChunks: 5, wantFinish: "stop"},
		{name: "include usage", includeUsage: true, wantContent: fakeupstream.DefaultContent, wantChunks: 5, wantUsage: true, wantFinish: "stop"},
		{name: "chunks", b: fakeupstream.Behavior{Chunks: []string{"a", "b\n", "\"c\""}}, includeUsage: true, wantContent: "ab\n\"c\"", wantChunks: 3, wantUsage: true, wantFinish: "stop"},
		{name: "no usage", b: fakeupstream.Behavior{NoUsage: true}, includeUsage: true, wantContent: fakeupstream.DefaultContent, wantChunks: 5, wantFinish: "stop"},
		{name: "repeat usage", b: fakeupstream.Behavior{RepeatUsage: true}, wantContent: fakeupstream.DefaultContent, wantChunks: 5, wantUsage: true, wantFinish: "stop"},
		{name: "tool call", b: fakeupstream.Behavior{ToolCall: &fakeupstream.ToolCall{Name: "lookup", Arguments: `{"sku":"A-1234567"}`}}, includeUsage: true, wantChunks: 3, wantUsage: true, wantFinish: "tool_calls", wantTool: `{"sku":"A-1234567"}`},
		{name: "event delay", b: fakeupstream.Behavior{EventDelay: time.Millisecond, Content: "x y"}, wantContent: "x y", wantChunks: 2, wantFinish: "stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.Push(tt.b)
			params := userMsg("stream please")
			if tt.includeUsage {
				params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			stream := client.Chat.Completions.NewStreaming(context.Background(), params)
			var acc openai.ChatCompletionAccumulator
			deltas, usageChunks := 0, 0
			var last openai.ChatCompletionChunk
			for stream.Next() {
				chunk := stream.Current()
				if !acc.AddChunk(chunk) {
					t.Fatalf("accumulator refused chunk %s", chunk.RawJSON())
				}
				if len(chunk.Choices) == 1 && (chunk.Choices[0].Delta.Content != "" || (len(chunk.Choices[0].Delta.ToolCalls) == 1 && chunk.Choices[0].Delta.ToolCalls[0].Function.Arguments != "")) {
					deltas++
				}
				if len(chunk.Choices) == 0 {
					usageChunks++
				}
				if chunk.Object != "chat.completion.chunk" {
					t.Errorf("object = %q", chunk.Object)
				}
				last = chunk
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			if deltas != tt.wantChunks {
				t.Errorf("delta chunks = %d, want %d", deltas, tt.wantChunks)
			}
			wantUsageChunks := 0
			if tt.includeUsage && tt.wantUsage {
				wantUsageChunks = 1
			}
			if usageChunks != wantUsageChunks {
				t.Errorf("usage-only chunks = %d, want %d", usageChunks, wantUsageChunks)
			}
			if wantUsageChunks == 1 && (len(last.Choices) != 0 || last.Usage.TotalTokens == 0) {
				t.Errorf("last chunk is not the usage chunk: %s", last.RawJSON())
			}
			got := acc.Choices[0]
			if got.Message.Content != tt.wantContent || got.FinishReason != tt.wantFinish {
				t.Errorf("content %q finish %q", got.Message.Content, got.FinishReason)
			}
			if tt.wantTool != "" {
				if len(got.Message.ToolCalls) != 1 || got.Message.ToolCalls[0].Function.Arguments != tt.wantTool || got.Message.ToolCalls[0].Function.Name != "lookup" || !strings.HasPrefix(got.Message.ToolCalls[0].ID, "call_") {
					t.Errorf("tool calls = %+v", got.Message.ToolCalls)
				}
			}
			p := fakeupstream.PromptTokens(lastBody(t, s))
			if tt.b.RepeatUsage {
				// The accumulator sums usage over chunks; the last chunk holds the total.
				acc.Usage = last.Usage
			}
			if tt.wantUsage {
				if acc.Usage.PromptTokens != p || acc.Usage.CompletionTokens != int64(tt.wantChunks) || acc.Usage.TotalTokens != p+int64(tt.wantChunks) {
					t.Errorf("usage = %+v, want prompt %d completion %d", acc.Usage, p, tt.wantChunks)
				}
			} else if acc.Usage.TotalTokens != 0 {
				t.Errorf("usage reported: %+v", acc.Usage)
			}
		})
	}
}

// rawPost posts body to the server's path with the test key and returns the
// answer.
func rawPost(t *testing.T, s *fakeupstream.Server, path, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("post %s: %v", path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return res, string(b)
}

// events splits an SSE body into its data payloads, checking the framing.
func events(t *testing.T, body string) []string {
	t.Helper()
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("stream does not end with a blank line: %q", body)
	}
	var out []string
	for _, block := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		var data string
		for _, line := range strings.Split(block, "\n") {
			switch {
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			case strings.HasPrefix(line, "event: "):
			default:
				t.Fatalf("bad SSE line %q", line)
			}
		}
		out = append(out, data)
	}
	return out
}

func TestChatStreamFraming(t *testing.T) {
	s, _ := start(t, fakeupstream.Options{})
	tests := []struct {
		name, body string
		b          fakeupstream.Behavior
		want       []string // gjson checks per event, "" = skip; last is [DONE]
	}{
		{
			name: "include usage",
			body: `{"model":"m1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`,
			b:    fakeupstream.Behavior{Content: "a b"},
			want: []string{
				`{"role":"assistant","content":"","usage":null}`,
				`{"content":"a","usage":null}`,
				`{"content":" b","usage":null}`,
				`{"finish":"stop","usage":null}`,
				`{"choices":0,"completion":2}`,
				"[DONE]",
			},
		},
		{
			name: "repeat usage",
			body: `{"model":"m1","stream":true,"messages":[{"role":"user","content":"x"}]}`,
			b:    fakeupstream.Behavior{Content: "a b", RepeatUsage: true},
			want: []string{
				`{"role":"assistant","content":"","completion":0}`,
				`{"content":"a","completion":1}`,
				`{"content":" b","completion":2}`,
				`{"finish":"stop","completion":2}`,
				"[DONE]",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.Push(tt.b)
			res, body := rawPost(t, s, "/chat/completions", tt.body)
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Errorf("content type %q", ct)
			}
			evs := events(t, body)
			if len(evs) != len(tt.want) {
				t.Fatalf("events = %d, want %d: %q", len(evs), len(tt.want), body)
			}
			for i, ev := range evs {
				want := tt.want[i]
				if want == "[DONE]" {
					if ev != "[DONE]" {
						t.Errorf("event %d = %q, want [DONE]", i, ev)
					}
					continue
				}
				if !gjson.Valid(ev) {
					t.Fatalf("event %d not JSON: %q", i, ev)
				}
				if gjson.Get(ev, "model").String() != "m1" || gjson.Get(ev, "object").String() != "chat.completion.chunk" {
					t.Errorf("event %d head: %s", i, ev)
				}
				w := gjson.Parse(want)
				checks := map[string]string{
					"role": "choices.0.delta.role", "content": "choices.0.delta.content",
					"finish": "choices.0.finish_reason", "completion": "usage.completion_tokens",
				}
				w.ForEach(func(k, v gjson.Result) bool {
					switch k.Str {
					case "usage":
						if u := gjson.Get(ev, "usage"); !u.Exists() || u.Type != gjson.Null {
							t.Errorf("event %d: usage should be null: %s", i, ev)
						}
					case "choices":
						if n := len(gjson.Get(ev, "choices").Array()); !gjson.Get(ev, "choices").IsArray() || n != int(v.Int()) {
							t.Errorf("event %d: choices = %d: %s", i, n, ev)
						}
					default:
						if got := gjson.Get(ev, checks[k.Str]); got.Raw != v.Raw {
							t.Errorf("event %d: %s = %s, want %s: %s", i, k.Str, got.Raw, v.Raw, ev)
						}
					}
					return true
				})
			}
		})
	}
}

func TestCompletions(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	s.Push(fakeupstream.Behavior{Content: "once upon"})
	res, err := client.Completions.New(context.Background(), openai.CompletionNewParams{
		Model:  "fake-mini",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say")},
	})
	if err != nil {
		t.Fatalf("completion: %v", err)
	}
	if res.Object != "text_completion" || res.Choices[0].Text != "once upon" || res.Choices[0].FinishReason != "stop" || res.Usage.CompletionTokens != 2 {
		t.Errorf("completion = %s", res.RawJSON())
	}

	stream := client.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:         "fake-mini",
		Prompt:        openai.CompletionNewParamsPromptUnion{OfString: openai.String("Say")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var text strings.Builder
	var usage int64
	for stream.Next() {
		c := stream.Current()
		for _, ch := range c.Choices {
			text.WriteString(ch.Text)
		}
		if c.Usage.TotalTokens > 0 {
			usage = c.Usage.CompletionTokens
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("completion stream: %v", err)
	}
	if text.String() != fakeupstream.DefaultContent || usage != 5 {
		t.Errorf("streamed %q usage %d", text.String(), usage)
	}
}

func TestEmbeddings(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	tests := []struct {
		name   string
		params openai.EmbeddingNewParams
		n      int
		dims   int
	}{
		{name: "string", params: openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("hello")}}, n: 1, dims: 8},
		{name: "strings", params: openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b", "c"}}}, n: 3, dims: 8},
		{name: "tokens", params: openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{1, 2, 3}}}, n: 1, dims: 8},
		{name: "dimensions", params: openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}, Dimensions: openai.Int(16)}, n: 1, dims: 16},
		{name: "base64", params: openai.EmbeddingNewParams{Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"hello", "x"}}, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64}, n: 2, dims: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.params.Model = "fake-embed"
			before := s.UsageTotal()
			res, err := client.Embeddings.New(context.Background(), tt.params)
			if err != nil {
				t.Fatalf("embeddings: %v", err)
			}
			if len(res.Data) != tt.n || res.Model != "fake-embed" {
				t.Fatalf("data = %d model %q", len(res.Data), res.Model)
			}
			for i, d := range res.Data {
				if d.Index != int64(i) || len(d.Embedding) != tt.dims && !strings.Contains(tt.name, "base64") {
					t.Errorf("item %d: index %d dims %d", i, d.Index, len(d.Embedding))
				}
			}
			if tt.name == "string" {
				want := fakeupstream.Embedding("hello", 8)
				for i := range want {
					if float32(res.Data[0].Embedding[i]) != want[i] {
						t.Fatalf("vector %v, want %v", res.Data[0].Embedding, want)
					}
				}
			}
			p := fakeupstream.PromptTokens(lastBody(t, s))
			if res.Usage.PromptTokens != p || res.Usage.TotalTokens != p || s.UsageTotal().PromptTokens-before.PromptTokens != p {
				t.Errorf("usage = %+v, want %d", res.Usage, p)
			}
		})
	}
}

func TestModels(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	if _, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "seen-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
	}); err != nil {
		t.Fatalf("chat: %v", err)
	}
	page, err := client.Models.List(context.Background())
	if err != nil {
		t.Fatalf("models: %v", err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "fake-mini,fake-large,seen-model" {
		t.Errorf("models = %v", ids)
	}
	m, err := client.Models.Get(context.Background(), "anything")
	if err != nil || m.ID != "anything" || m.Object != "model" {
		t.Errorf("model get = %+v, %v", m, err)
	}
	if s.Count() != 3 {
		t.Errorf("count = %d", s.Count())
	}
}

func TestResponsesPlain(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	ctx := context.Background()
	res, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:        "fake-large",
		Instructions: openai.String("Be brief."),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("Hello?")},
	})
	if err != nil {
		t.Fatalf("responses: %v", err)
	}
	p := fakeupstream.PromptTokens(lastBody(t, s))
	if !strings.HasPrefix(res.ID, "resp_") || res.Status != "completed" || res.Model != "fake-large" || res.OutputText() != fakeupstream.DefaultContent {
		t.Errorf("response = %s", res.RawJSON())
	}
	if res.Instructions.OfString != "Be brief." {
		t.Errorf("instructions = %s", res.Instructions.RawJSON())
	}
	if res.Usage.InputTokens != p || res.Usage.OutputTokens != 5 || res.Usage.TotalTokens != p+5 {
		t.Errorf("usage = %+v", res.Usage)
	}
	if res.Output[0].Type != "message" || res.Output[0].Content[0].Type != "output_text" {
		t.Errorf("output = %s", res.RawJSON())
	}

	got, err := client.Responses.Get(ctx, res.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != res.ID || got.OutputText() != fakeupstream.DefaultContent {
		t.Fatalf("get = %v, %v", got, err)
	}
	items, err := client.Responses.InputItems.List(ctx, res.ID, responses.InputItemListParams{})
	if err != nil {
		t.Fatalf("input items: %v", err)
	}
	if len(items.Data) != 1 || items.Data[0].Type != "message" || items.Data[0].Role != "user" || gjson.Get(items.Data[0].RawJSON(), "content.0.text").String() != "Hello?" {
		t.Errorf("input items = %s", items.RawJSON())
	}
	if _, err := client.Responses.Get(ctx, "resp_missing", responses.ResponseGetParams{}); !isStatus(err, 404) {
		t.Errorf("missing response: %v", err)
	}
	if err := client.Responses.Delete(ctx, res.ID); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := client.Responses.Get(ctx, res.ID, responses.ResponseGetParams{}); !isStatus(err, 404) {
		t.Errorf("deleted response still served: %v", err)
	}

	// A tool call, with an item-list input and store: false.
	s.Push(fakeupstream.Behavior{ToolCall: &fakeupstream.ToolCall{Name: "f", Arguments: `{"a":1}`}})
	res, err = client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "fake-mini",
		Store: openai.Bool(false),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("first", responses.EasyInputMessageRoleUser),
		}},
	})
	if err != nil {
		t.Fatalf("responses tool: %v", err)
	}
	if len(res.Output) != 1 || res.Output[0].Type != "function_call" || res.Output[0].Name != "f" || res.Output[0].Arguments.OfString != `{"a":1}` || !strings.HasPrefix(res.Output[0].CallID, "call_") {
		t.Errorf("tool output = %s", res.RawJSON())
	}
	if _, err := client.Responses.Get(ctx, res.ID, responses.ResponseGetParams{}); !isStatus(err, 404) {
		t.Errorf("store:false response was kept: %v", err)
	}
}

func isStatus(err error, status int) bool {
	var apiErr *openai.Error
	return errors.As(err, &apiErr) && apiErr.StatusCode == status
}

func TestResponsesStream(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	ctx := context.Background()
	tests := []struct {
		name      string
		b         fakeupstream.Behavior
		wantTypes []string
		wantText  string
		terminal  string
	}{
		{
			name: "text", b: fakeupstream.Behavior{Content: "Hi there"},
			wantTypes: []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
				"response.output_text.delta", "response.output_text.delta", "response.output_text.done", "response.content_part.done",
				"response.output_item.done", "response.completed"},
			wantText: "Hi there", terminal: "completed",
		},
		{
			name: "tool", b: fakeupstream.Behavior{ToolCall: &fakeupstream.ToolCall{Name: "f", Arguments: `{"q":"x"}`}},
			wantTypes: []string{"response.created", "response.in_progress", "response.output_item.added",
				"response.function_call_arguments.delta", "response.function_call_arguments.delta", "response.function_call_arguments.done",
				"response.output_item.done", "response.completed"},
			terminal: "completed",
		},
		{
			name: "incomplete", b: fakeupstream.Behavior{Content: "cut", FinishReason: "length"},
			wantTypes: []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
				"response.output_text.delta", "response.output_text.done", "response.content_part.done",
				"response.output_item.done", "response.incomplete"},
			wantText: "cut", terminal: "incomplete",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.Push(tt.b)
			stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
				Model: "fake-mini",
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
			})
			var types []string
			var text strings.Builder
			var final responses.Response
			for i := int64(0); stream.Next(); i++ {
				ev := stream.Current()
				types = append(types, ev.Type)
				if ev.SequenceNumber != i {
					t.Errorf("event %d sequence_number %d", i, ev.SequenceNumber)
				}
				switch ev.Type {
				case "response.output_text.delta":
					text.WriteString(ev.AsResponseOutputTextDelta().Delta)
				case "response.completed", "response.incomplete":
					final = ev.Response
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			if strings.Join(types, " ") != strings.Join(tt.wantTypes, " ") {
				t.Errorf("events:\n got %v\nwant %v", types, tt.wantTypes)
			}
			if text.String() != tt.wantText || final.OutputText() != tt.wantText {
				t.Errorf("text %q final %q", text.String(), final.OutputText())
			}
			p := fakeupstream.PromptTokens(lastBody(t, s))
			if string(final.Status) != tt.terminal || final.Usage.InputTokens != p || final.Usage.TotalTokens != p+final.Usage.OutputTokens {
				t.Errorf("final = %s", final.RawJSON())
			}
			got, err := client.Responses.Get(ctx, final.ID, responses.ResponseGetParams{})
			if err != nil || got.Status != final.Status {
				t.Errorf("stored streamed response: %v %v", got, err)
			}
		})
	}
}

func TestImages(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	ctx := context.Background()
	res, err := client.Images.Generate(ctx, openai.ImageGenerateParams{Prompt: "a cat", Model: "fake-image", N: openai.Int(2)})
	if err != nil {
		t.Fatalf("images: %v", err)
	}
	if len(res.Data) != 2 || res.Data[0].B64JSON == "" || res.Created == 0 {
		t.Errorf("images = %s", res.RawJSON())
	}
	res, err = client.Images.Generate(ctx, openai.ImageGenerateParams{Prompt: "a dog", ResponseFormat: openai.ImageGenerateParamsResponseFormatURL})
	if err != nil {
		t.Fatalf("images url: %v", err)
	}
	if len(res.Data) != 1 || !strings.HasPrefix(res.Data[0].URL, "https://") {
		t.Errorf("images = %s", res.RawJSON())
	}
	if got := s.UsageTotal(); got.Images != 3 || got.TotalTokens != 0 {
		t.Errorf("usage total = %+v", got)
	}
}

func TestErrors(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	tests := []struct {
		name       string
		b          fakeupstream.Behavior
		status     int
		code, typ  string
		retryAfter string
	}{
		{name: "500", b: fakeupstream.Behavior{Status: 500}, status: 500, code: "server_error", typ: "server_error"},
		{name: "429", b: fakeupstream.Behavior{Status: 429, RetryAfter: "7"}, status: 429, code: "rate_limit_exceeded", typ: "requests", retryAfter: "7"},
		{name: "400", b: fakeupstream.Behavior{Status: 400}, status: 400, typ: "invalid_request_error"},
		{name: "401", b: fakeupstream.Behavior{Status: 401}, status: 401, code: "invalid_api_key", typ: "invalid_request_error"},
		{name: "override", b: fakeupstream.Behavior{Status: 503, ErrorCode: "overloaded", ErrorMessage: "busy", Header: map[string]string{"X-Should-Retry": "false"}}, status: 503, code: "overloaded", typ: "server_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.Push(tt.b)
			_, err := client.Chat.Completions.New(context.Background(), userMsg("x"))
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want API error", err)
			}
			if apiErr.StatusCode != tt.status || apiErr.Code != tt.code || apiErr.Type != tt.typ || apiErr.Message == "" {
				t.Errorf("error = %d %q %q %q", apiErr.StatusCode, apiErr.Code, apiErr.Type, apiErr.Message)
			}
			if !gjson.Get(apiErr.RawJSON(), "param").Exists() {
				t.Errorf("param missing from %s", apiErr.RawJSON())
			}
			if got := apiErr.Response.Header.Get("Retry-After"); got != tt.retryAfter {
				t.Errorf("Retry-After = %q, want %q", got, tt.retryAfter)
			}
			for k, v := range tt.b.Header {
				if apiErr.Response.Header.Get(k) != v {
					t.Errorf("header %s = %q", k, apiErr.Response.Header.Get(k))
				}
			}
		})
	}
	if s.UsageTotal() != (fakeupstream.Usage{}) {
		t.Errorf("errors reported usage: %+v", s.UsageTotal())
	}
}

func TestRetryAfterWithSDKRetries(t *testing.T) {
	s, _ := start(t, fakeupstream.Options{})
	client := openai.NewClient(option.WithBaseURL(s.URL()+"/"), option.WithAPIKey(testKey), option.WithMaxRetries(2))
	s.Push(fakeupstream.Behavior{Status: 429, RetryAfter: "0"}, fakeupstream.Behavior{Status: 500, RetryAfter: "0"})
	res, err := client.Chat.Completions.New(context.Background(), userMsg("x"))
	if err != nil {
		t.Fatalf("chat after retries: %v", err)
	}
	if res.Choices[0].Message.Content != fakeupstream.DefaultContent || s.Count() != 3 || s.Pending() != 0 {
		t.Errorf("content %q count %d pending %d", res.Choices[0].Message.Content, s.Count(), s.Pending())
	}
}

func TestRequestErrors(t *testing.T) {
	s, _ := start(t, fakeupstream.Options{})
	tests := []struct {
		name, method, path, key, body string
		status                        int
		code                          string
	}{
		{name: "bad json", method: "POST", path: "/chat/completions", key: testKey, body: `{"model":`, status: 400},
		{name: "not an object", method: "POST", path: "/chat/completions", key: testKey, body: `[1]`, status: 400},
		{name: "empty", method: "POST", path: "/responses", key: testKey, body: ``, status: 400},
		{name: "no key", method: "POST", path: "/chat/completions", body: `{}`, status: 401, code: "invalid_api_key"},
		{name: "wrong key", method: "POST", path: "/chat/completions", key: "sk-other", body: `{}`, status: 401, code: "invalid_api_key"},
		{name: "unknown path", method: "POST", path: "/nope", key: testKey, body: `{}`, status: 404, code: "unknown_url"},
		{name: "wrong method", method: "GET", path: "/chat/completions", key: testKey, status: 404, code: "unknown_url"},
		{name: "embeddings without input", method: "POST", path: "/embeddings", key: testKey, body: `{"model":"e"}`, status: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, s.URL()+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.key != "" {
				req.Header.Set("Authorization", "Bearer "+tt.key)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("do: %v", err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status {
				t.Errorf("status = %d, want %d: %s", res.StatusCode, tt.status, b)
			}
			e := gjson.GetBytes(b, "error")
			if !e.Get("message").Exists() || !e.Get("type").Exists() || !e.Get("param").Exists() || !e.Get("code").Exists() {
				t.Errorf("not an OpenAI error: %s", b)
			}
			if e.Get("code").String() != tt.code {
				t.Errorf("code = %s, want %q", e.Get("code").Raw, tt.code)
			}
		})
	}
}

func TestStreamFaults(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	tests := []struct {
		name       string
		b          fakeupstream.Behavior
		wantEvents int
		wantUsage  int64 // completion tokens added to UsageTotal
		streamErr  bool
	}{
		{name: "cut after 2", b: fakeupstream.Behavior{CutAfterEvents: 2}, wantEvents: 2, streamErr: true},
		{name: "cut with running usage", b: fakeupstream.Behavior{CutAfterEvents: 3, RepeatUsage: true}, wantEvents: 3, wantUsage: 2, streamErr: true},
		{name: "cut before done", b: fakeupstream.Behavior{CutAfterEvents: 8}, wantEvents: 8, wantUsage: 5, streamErr: true},
		{name: "cut beyond end", b: fakeupstream.Behavior{CutAfterEvents: 100}, wantEvents: 8, wantUsage: 5},
		{name: "error event", b: fakeupstream.Behavior{StreamErrorAfterEvents: 2, ErrorMessage: "boom"}, wantEvents: 2, streamErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.Push(tt.b)
			before := s.UsageTotal()
			params := userMsg("x")
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			stream := client.Chat.Completions.NewStreaming(context.Background(), params)
			n := 0
			for stream.Next() {
				n++
			}
			err := stream.Err()
			if n != tt.wantEvents {
				t.Errorf("events = %d, want %d", n, tt.wantEvents)
			}
			if (err != nil) != tt.streamErr {
				t.Errorf("stream err = %v, want error %v", err, tt.streamErr)
			}
			if tt.b.StreamErrorAfterEvents > 0 {
				var se *ssestream.StreamError
				if !errors.As(err, &se) || !strings.Contains(se.Message, "boom") {
					t.Errorf("want a stream error event, got %v", err)
				}
			}
			if d := s.UsageTotal().CompletionTokens - before.CompletionTokens; d != tt.wantUsage {
				t.Errorf("UsageTotal completion grew by %d, want %d", d, tt.wantUsage)
			}
		})
	}

	// A cut Responses stream ends with an error too.
	s.Push(fakeupstream.Behavior{CutAfterEvents: 4})
	rs := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "fake-mini", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	})
	n := 0
	for rs.Next() {
		n++
	}
	if n != 4 || rs.Err() == nil {
		t.Errorf("responses cut: %d events, err %v", n, rs.Err())
	}

	// A Responses stream error is an `event: error` with type "error".
	s.Push(fakeupstream.Behavior{StreamErrorAfterEvents: 3, ErrorCode: "overloaded", ErrorMessage: "busy"})
	rs = client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "fake-mini", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	})
	var last responses.ResponseStreamEventUnion
	n = 0
	for rs.Next() {
		last = rs.Current()
		n++
	}
	if rs.Err() != nil || n != 4 || last.Type != "error" || last.Code != "overloaded" || last.Message != "busy" || last.SequenceNumber != 3 {
		t.Errorf("responses error: %d events, last %s, err %v", n, last.RawJSON(), rs.Err())
	}
}

func TestDelaysHoldDrop(t *testing.T) {
	s, client := start(t, fakeupstream.Options{Latency: 20 * time.Millisecond})
	ctx := context.Background()

	t.Run("latency", func(t *testing.T) {
		t0 := time.Now()
		if _, err := client.Chat.Completions.New(ctx, userMsg("x")); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d < 20*time.Millisecond {
			t.Errorf("answered in %v, before the latency", d)
		}
	})
	t.Run("first byte delay times out", func(t *testing.T) {
		s.Push(fakeupstream.Behavior{FirstByteDelay: 2 * time.Second})
		t0 := time.Now()
		_, err := client.Chat.Completions.New(ctx, userMsg("x"), option.WithRequestTimeout(100*time.Millisecond))
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want deadline exceeded", err)
		}
		if d := time.Since(t0); d > time.Second {
			t.Errorf("took %v", d)
		}
	})
	t.Run("hold", func(t *testing.T) {
		hold := make(chan struct{})
		s.Push(fakeupstream.Behavior{Hold: hold}, fakeupstream.Behavior{Hold: hold})
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := client.Chat.Completions.New(ctx, userMsg("held"))
				errs <- err
			}()
		}
		select {
		case err := <-errs:
			t.Fatalf("held call answered: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		close(hold)
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("released call: %v", err)
			}
		}
	})
	t.Run("hold released by cancel", func(t *testing.T) {
		s.Push(fakeupstream.Behavior{Hold: make(chan struct{})})
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := client.Chat.Completions.New(cctx, userMsg("x")); err == nil {
			t.Error("cancelled held call succeeded")
		}
		// The server side let go: the next call is answered normally.
		if _, err := client.Chat.Completions.New(ctx, userMsg("x")); err != nil {
			t.Errorf("next call: %v", err)
		}
	})
	t.Run("drop", func(t *testing.T) {
		s.Push(fakeupstream.Behavior{DropConnection: true})
		_, err := client.Chat.Completions.New(ctx, userMsg("x"))
		var apiErr *openai.Error
		if err == nil || errors.As(err, &apiErr) {
			t.Errorf("err = %v, want a connection error", err)
		}
	})
}

func TestRecordAndReset(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	_, err := client.Chat.Completions.New(context.Background(), userMsg("record me"), option.WithHeader("X-Test", "yes"))
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || s.Count() != 1 {
		t.Fatalf("requests = %d count %d", len(reqs), s.Count())
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/v1/chat/completions" || r.Header.Get("X-Test") != "yes" ||
		r.Header.Get("Authorization") != "Bearer "+testKey || r.Time.IsZero() {
		t.Errorf("record = %+v", r)
	}
	if gjson.GetBytes(r.Body, "messages.0.content").String() != "record me" {
		t.Errorf("body = %s", r.Body)
	}
	r.Body[0] = 'X' // a copy: the server's record stays intact
	if s.Requests()[0].Body[0] != '{' {
		t.Error("Requests returned shared bodies")
	}
	s.Push(fakeupstream.Behavior{Status: 500})
	s.Reset()
	if s.Count() != 0 || len(s.Requests()) != 0 || s.Pending() != 0 || s.UsageTotal() != (fakeupstream.Usage{}) {
		t.Error("Reset left state behind")
	}
}

func TestNoRecord(t *testing.T) {
	s, client := start(t, fakeupstream.Options{NoRecord: true})
	if _, err := client.Chat.Completions.New(context.Background(), userMsg("x")); err != nil {
		t.Fatal(err)
	}
	if s.Count() != 1 || len(s.Requests()) != 0 {
		t.Errorf("count %d records %d", s.Count(), len(s.Requests()))
	}
}

func TestDefaultAndHook(t *testing.T) {
	s, client := start(t, fakeupstream.Options{})
	ctx := context.Background()
	s.SetDefault(fakeupstream.Behavior{Content: "default answer"})
	s.Push(fakeupstream.Behavior{Content: "queued"})
	for _, want := range []string{"queued", "default answer", "default answer"} {
		res, err := client.Chat.Completions.New(ctx, userMsg("x"))
		if err != nil || res.Choices[0].Message.Content != want {
			t.Fatalf("got %v %v, want %q", res, err, want)
		}
	}
	s.SetHandlerHook(func(r fakeupstream.Recorded) *fakeupstream.Behavior {
		if r.Header.Get("X-Fail") != "" {
			return &fakeupstream.Behavior{Status: 502}
		}
		return nil
	})
	s.Push(fakeupstream.Behavior{Content: "queued 2"})
	if _, err := client.Chat.Completions.New(ctx, userMsg("x"), option.WithHeader("X-Fail", "1")); !isStatus(err, 502) {
		t.Errorf("hooked call: %v", err)
	}
	if s.Pending() != 1 {
		t.Errorf("hook consumed the queue")
	}
	res, err := client.Chat.Completions.New(ctx, userMsg("x"))
	if err != nil || res.Choices[0].Message.Content != "queued 2" {
		t.Errorf("after hook: %v %v", res, err)
	}
	s.SetHandlerHook(nil)
}

func TestSelfFlag(t *testing.T) {
	_, client := start(t, fakeupstream.Options{})
	ctx := context.Background()
	sys := "Serve only inventory questions. If the request does not, begin with " + fakeupstream.OffPurposeMark
	tests := []struct {
		name, system, user string
		flagged            bool
	}{
		{name: "trigger", system: sys, user: "Tell me an OFF-TOPIC joke", flagged: true},
		{name: "no trigger", system: sys, user: "How many boxes?"},
		{name: "no instruction", system: "be nice", user: "off-topic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{
				openai.SystemMessage(tt.system), openai.UserMessage(tt.user),
			}}
			res, err := client.Chat.Completions.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.HasPrefix(res.Choices[0].Message.Content, fakeupstream.OffPurposeMark+" "); got != tt.flagged {
				t.Errorf("content %q, flagged %v", res.Choices[0].Message.Content, tt.flagged)
			}
			stream := client.Chat.Completions.NewStreaming(ctx, params)
			var pieces []string
			for stream.Next() {
				if c := stream.Current(); len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
					pieces = append(pieces, c.Choices[0].Delta.Content)
				}
			}
			if stream.Err() != nil {
				t.Fatal(stream.Err())
			}
			if tt.flagged && (len(pieces) < 2 || pieces[0] != "[[off-" || strings.Join(pieces, "") != res.Choices[0].Message.Content) {
				t.Errorf("streamed pieces %q", pieces)
			}
		})
	}
}

func TestHandlerEmbedding(t *testing.T) {
	s, err := fakeupstream.New(fakeupstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The handler answers when mounted on another server's mux.
	mux := http.NewServeMux()
	mux.Handle("/v1/", s.Handler())
	other := httptest.NewServer(mux)
	defer other.Close()
	res, err := http.Post(other.URL+"/v1/chat/completions", "application/json", bytes.NewReader([]byte(`{"model":"x","messages":[]}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil || len(out.Choices) != 1 || out.Choices[0].Message.Content != fakeupstream.DefaultContent {
		t.Errorf("embedded answer %+v, %v", out, err)
	}
}
