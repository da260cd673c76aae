package proxy

import (
	"testing"

	dto "github.com/prometheus/client_model/go"

	"taskgate/limits"
)

// TestSetRatiosFollowsTheTasksWindows checks the per-task cache of usage
// ratio gauges: each window's gauge gets its ratio, for several tasks, and
// a task whose windows change (a config reload) gets the new windows'
// gauges while the old ones keep their last value.
func TestSetRatiosFollowsTheTasksWindows(t *testing.T) {
	m := NewMetrics()
	cc := newChildCache(m)
	value := func(task, unit, period string) float64 {
		var out dto.Metric
		if err := m.LimitUsageRatio.WithLabelValues(task, unit, period).Write(&out); err != nil {
			t.Fatal(err)
		}
		return out.GetGauge().GetValue()
	}
	steps := []struct {
		task   string
		ratios []limits.Ratio
	}{
		{"a", []limits.Ratio{{Unit: "requests", Period: "minute", Ratio: 0.1}, {Unit: "tokens", Period: "day", Ratio: 0.2}}},
		{"b", []limits.Ratio{{Unit: "money", Period: "month", Ratio: 0.9}}},
		{"a", []limits.Ratio{{Unit: "requests", Period: "minute", Ratio: 0.3}, {Unit: "tokens", Period: "day", Ratio: 0.4}}},
		{"a", []limits.Ratio{{Unit: "tokens", Period: "day", Ratio: 0.5}, {Unit: "money", Period: "day", Ratio: 0.6}}},
		{"a", []limits.Ratio{{Unit: "tokens", Period: "day", Ratio: 0.7}, {Unit: "money", Period: "day", Ratio: 0.8}}},
	}
	for _, s := range steps {
		cc.setRatios(s.task, s.ratios)
		for _, r := range s.ratios {
			if got := value(s.task, r.Unit, r.Period); got != r.Ratio {
				t.Errorf("after %v: %s %s/%s = %v, want %v", s.ratios, s.task, r.Unit, r.Period, got, r.Ratio)
			}
		}
	}
	if got := value("a", "requests", "minute"); got != 0.3 {
		t.Errorf("a window no longer limited keeps its last ratio: got %v, want 0.3", got)
	}
	if got := value("b", "money", "month"); got != 0.9 {
		t.Errorf("b money/month = %v, want 0.9", got)
	}
	cc.setRatios("a", nil) // nothing to set
}
