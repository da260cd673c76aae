// Package tasks is the registry compiled from one config: who may call
// (client keys, compared in constant time), which tasks exist, each task's
// endpoints in order, and the needs a call has and which endpoints meet them.
// It imports config only; nothing of HTTP, Redis or Prometheus.
package tasks
