package proxy

import (
	"github.com/tidwall/gjson"

	"taskgate/tasks"
	"taskgate/trim"
)

// route describes one client API path that reaches an upstream.
type route struct {
	name string // for logs: chat, completions, embeddings, responses, images
	path string // the API path below the base URL, e.g. "/chat/completions"
	// fieldNeeds returns the needs one top-level field of the body asks
	// for, read in the pass that reads the top level (nil: none). The chat
	// route's messages are read by routeChecks instead, in its own pass.
	fieldNeeds func(key string, v gjson.Result) tasks.Needs
	// needs are what every call of the route needs.
	needs tasks.Needs
	// count returns the input tokens of a body that is not trimmed (nil for chat).
	count func(tokenizer string, body []byte) (int, error)
	// maxOutput is the body's field(s) stating the output maximum, in order.
	maxOutput []string
	// noOutput: the call produces no output tokens (embeddings, images).
	noOutput bool
	// streams: the route can stream with "stream": true.
	streams bool
	// usageIn and usageOut are the fields of a plain answer's usage object
	// that count input and output tokens.
	usageIn, usageOut string
	// includeUsage: ask upstream streams for stream_options.include_usage.
	includeUsage bool
}

var (
	routeChat = &route{
		name: "chat", path: "/chat/completions",
		fieldNeeds: chatFieldNeeds,
		maxOutput:  []string{"max_completion_tokens", "max_tokens"},
		streams:    true, includeUsage: true,
		usageIn: "prompt_tokens", usageOut: "completion_tokens",
	}
	routeCompletions = &route{
		name: "completions", path: "/completions",
		count:     trim.CountCompletionsPrompt,
		maxOutput: []string{"max_tokens"},
		streams:   true, includeUsage: true,
		usageIn: "prompt_tokens", usageOut: "completion_tokens",
	}
	routeEmbeddings = &route{
		name: "embeddings", path: "/embeddings",
		count:    trim.CountEmbeddingsInput,
		noOutput: true,
		usageIn:  "prompt_tokens", usageOut: "completion_tokens_none",
	}
	routeResponses = &route{
		name: "responses", path: "/responses",
		fieldNeeds: tasks.ResponsesFieldNeeds,
		count:      trim.CountResponsesInput,
		maxOutput:  []string{"max_output_tokens"},
		streams:    true,
		usageIn:    "input_tokens", usageOut: "output_tokens",
	}
	routeImages = &route{
		name: "images", path: "/images/generations",
		needs:    tasks.ImageOutput,
		noOutput: true,
	}
)

// chatFieldNeeds is tasks.ChatFieldNeeds but for messages, whose content
// parts routeChecks reads as it checks them.
func chatFieldNeeds(key string, v gjson.Result) tasks.Needs {
	if key == "messages" {
		return 0
	}
	return tasks.ChatFieldNeeds(key, v)
}

// routes lists every route that reaches an upstream, with its client path.
var routes = []struct {
	path string
	rt   *route
}{
	{"/v1/chat/completions", routeChat},
	{"/v1/completions", routeCompletions},
	{"/v1/embeddings", routeEmbeddings},
	{"/v1/responses", routeResponses},
	{"/v1/images/generations", routeImages},
}

// Routes lists the client paths that reach an upstream (POST), for tests
// that must prove every one passes through limits.
func Routes() []string {
	out := make([]string, len(routes))
	for i, r := range routes {
		out[i] = r.path
	}
	return out
}
