// Package fakeupstream is a fake OpenAI-compatible upstream served over a real
// socket. It stands for the outside world in the gateway's tests and serves
// the gateway's -demo mode.
//
// It answers /v1/chat/completions, /v1/completions, /v1/embeddings,
// /v1/models, /v1/responses (with GET /v1/responses/{id} and its input_items)
// and /v1/images/generations with the JSON shapes and SSE framing of OpenAI,
// deterministically. Each request consumes the next queued [Behavior] (or the
// default one), which decides its content, usage, status and faults: delays,
// held calls, dropped connections and streams cut mid-way.
//
// Token counts are deterministic: prompt tokens are [PromptTokens] of the
// request body as received, completion tokens the number of streamed pieces
// (see [Pieces]). [Server.UsageTotal] sums the usage actually reported to
// clients.
//
// The package imports only the standard library and gjson; nothing in the
// gateway's own packages.
package fakeupstream
