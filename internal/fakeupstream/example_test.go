package fakeupstream_test

import (
	"context"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"taskgate/internal/fakeupstream"
)

// A test programs the next answers, calls through an SDK, then inspects what
// the upstream saw and reported.
func Example() {
	s, err := fakeupstream.New(fakeupstream.Options{APIKey: "sk-up"})
	if err != nil {
		panic(err)
	}
	defer s.Close()
	s.Push(
		fakeupstream.Behavior{Status: 429, RetryAfter: "0"},
		fakeupstream.Behavior{Content: "Twelve boxes.", Usage: &fakeupstream.Usage{PromptTokens: 10, CompletionTokens: 3}},
	)
	client := openai.NewClient(option.WithBaseURL(s.URL()+"/"), option.WithAPIKey("sk-up"))
	res, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "fake-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("How many boxes?")},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Choices[0].Message.Content)
	fmt.Println(s.Count(), "requests;", s.UsageTotal().TotalTokens, "tokens reported")
	// Output:
	// Twelve boxes.
	// 2 requests; 13 tokens reported
}
