// Package guard holds the guard's logic (DESIGN.md §7): whether a call's
// source is expected, the anomaly checks (calls per hour, tokens per call)
// and their log line, the self-flag instruction injected into requests and
// the stripping of the off-purpose marker from answers (also when a stream
// splits it; helpers edit chat and Responses bodies, chunks and events in
// place), the call journal line, the parsing of admin block requests
// and the message of a blocked call, and the background delivery of
// threshold payloads to watchers' webhooks.
//
// Counting, blocks storage, cross-replica deduplication of threshold
// crossings, flag counting and the event log's storage belong to package
// limits; metrics and HTTP handlers belong to package proxy, which learns
// results through return values and callbacks. guard imports config, the
// standard library and gjson/sjson only: no fiber, Redis or Prometheus, and
// never proxy. Everything here runs on every call, so it is allocation-light.
package guard
