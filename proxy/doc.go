// Package proxy is the HTTP face of taskgate: the fiber apps for the client
// API and the admin listener, and the call path that ties the steps together
// (auth, identify, guard, needs, trim, reserve, forward, settle, signals).
// It forwards with a fasthttp client, relays SSE event by event, fails over
// across a task's endpoints behind per-endpoint circuit breakers, and owns the
// Prometheus metrics. Nothing imports proxy but cmd/gateway.
package proxy
