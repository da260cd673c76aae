package guard

import (
	"context"
	"log/slog"
	"sort"
)

// Anomaly kinds, as used in the taskgate_anomalies_total "kind" label, the
// log line and the event log (DESIGN.md §7, §8).
const (
	KindSource        = "source"          // a source not in the task's sources
	KindCallsPerHour  = "calls_per_hour"  // a user past max_calls_per_hour
	KindTokensPerCall = "tokens_per_call" // a call past max_tokens_per_call
)

// SourceExpected reports whether source is an expected caller of a task
// whose config lists sources. nil sources means no check (always true). An
// entry allows itself and every source beneath it, separated by ".":
// "billing" allows "billing", "billing.export" and "billing.export.csv",
// not "billingx". An empty source is unexpected whenever sources is non-nil.
func SourceExpected(sources []string, source string) bool {
	if sources == nil {
		return true
	}
	if source == "" {
		return false
	}
	for _, s := range sources {
		if s == "" || len(source) < len(s) || source[:len(s)] != s {
			continue
		}
		if len(source) == len(s) || source[len(s)] == '.' {
			return true
		}
	}
	return false
}

// CallsPerHourExceeded reports whether a call breaches max_calls_per_hour:
// callsLastHour counts the user's calls within the last sixty minutes,
// this one included, so the (max+1)th call and each after it breach.
// max <= 0 turns the check off.
func CallsPerHourExceeded(max int, callsLastHour int64) bool {
	return max > 0 && callsLastHour > int64(max)
}

// TokensPerCallExceeded reports whether a call's actual input + output
// tokens pass max_tokens_per_call (strictly more than max). max <= 0 turns
// the check off.
func TokensPerCallExceeded(max int, tokens int64) bool {
	return max > 0 && tokens > int64(max)
}

// LogAnomaly writes one warn line, msg "anomaly", with attributes kind, task,
// user, source, request_id and a "detail" group holding detail's entries in
// key order.
func LogAnomaly(l *slog.Logger, kind, task, user, source, requestID string, detail map[string]any) {
	if l == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("kind", kind),
		slog.String("task", task),
		slog.String("user", user),
		slog.String("source", source),
		slog.String("request_id", requestID),
	}
	if len(detail) > 0 {
		keys := make([]string, 0, len(detail))
		for k := range detail {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		group := make([]any, 0, len(keys))
		for _, k := range keys {
			group = append(group, slog.Any(k, detail[k]))
		}
		attrs = append(attrs, slog.Group("detail", group...))
	}
	l.LogAttrs(context.Background(), slog.LevelWarn, "anomaly", attrs...)
}
