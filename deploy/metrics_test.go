package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// designMetrics are the metric names of DESIGN.md §8; the value says whether
// the metric is a histogram (and so is queried with _bucket, _sum, _count).
var designMetrics = map[string]bool{
	"taskgate_requests_total":            false,
	"taskgate_request_duration_seconds":  true,
	"taskgate_upstream_ttfb_seconds":     true,
	"taskgate_tokens_total":              false,
	"taskgate_cost_dollars_total":        false,
	"taskgate_limit_refusals_total":      false,
	"taskgate_limit_usage_ratio":         false,
	"taskgate_capability_refusals_total": false,
	"taskgate_anomalies_total":           false,
	"taskgate_trimmed_messages_total":    false,
	"taskgate_upstream_errors_total":     false,
	"taskgate_failovers_total":           false,
	"taskgate_store_errors_total":        false,
	"taskgate_store_duration_seconds":    true,
	"taskgate_config_reloads_total":      false,
	"taskgate_flags_total":               false,
	"taskgate_watcher_deliveries_total":  false,
	"taskgate_breaker_open":              false,
}

// taskLabelled are the §8 metrics that carry a task label.
var taskLabelled = []string{
	"taskgate_requests_total", "taskgate_request_duration_seconds", "taskgate_tokens_total",
	"taskgate_cost_dollars_total", "taskgate_limit_refusals_total", "taskgate_limit_usage_ratio",
	"taskgate_capability_refusals_total", "taskgate_anomalies_total", "taskgate_trimmed_messages_total",
	"taskgate_flags_total",
}

var metricRef = regexp.MustCompile(`taskgate_[a-z0-9_]+`)

// metricNames lists the distinct taskgate_* names a PromQL expression uses.
func metricNames(expr string) []string {
	var names []string
	for _, n := range metricRef.FindAllString(expr, -1) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// knownMetric reports whether a name queried in PromQL is a §8 metric: a
// plain name of a counter or gauge, or a histogram's _bucket, _sum or _count.
func knownMetric(name string) bool {
	if hist, ok := designMetrics[name]; ok {
		return !hist
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && designMetrics[base] {
			return true
		}
	}
	return false
}

// baseMetric strips a histogram suffix.
func baseMetric(name string) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && designMetrics[base] {
			return base
		}
	}
	return name
}

// TestKnownMetric checks the name rules the dashboard and alert tests use.
func TestKnownMetric(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"taskgate_requests_total", true},
		{"taskgate_request_duration_seconds_bucket", true},
		{"taskgate_request_duration_seconds_count", true},
		{"taskgate_request_duration_seconds", false}, // a histogram has no plain series
		{"taskgate_requests_total_bucket", false},
		{"taskgate_request_total", false},
		{"taskgate_breaker_state", false},
		{"taskgate_store_duration_seconds_sum", true},
	}
	for _, tt := range tests {
		if got := knownMetric(tt.name); got != tt.want {
			t.Errorf("knownMetric(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
	if got := strings.Join(metricNames(`sum(rate(taskgate_a_total[5m])) / sum(rate(taskgate_a_total[5m])) + taskgate_b`), ","); got != "taskgate_a_total,taskgate_b" {
		t.Errorf("metricNames = %q", got)
	}
}
