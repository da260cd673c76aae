package proxy_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"taskgate/proxy"
)

// TestDashboardAndAlertsUseRegisteredMetrics checks that every taskgate_
// metric the Grafana dashboard and the chart's alert rules use is one the
// gateway registers.
func TestDashboardAndAlertsUseRegisteredMetrics(t *testing.T) {
	registered := map[string]bool{}
	for _, n := range proxy.NewMetrics().Names() {
		registered[n] = true
	}
	for _, want := range []string{"taskgate_requests_total", "taskgate_limit_usage_ratio", "taskgate_breaker_open", "taskgate_request_duration_seconds"} {
		if !registered[want] {
			t.Fatalf("Names() lacks %s: %v", want, registered)
		}
	}
	re := regexp.MustCompile(`taskgate_[a-z_]+`)
	for _, f := range []string{"../deploy/grafana/taskgate.json", "../deploy/helm/taskgate/templates/prometheusrule.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		names := re.FindAllString(string(b), -1)
		if len(names) == 0 {
			t.Fatalf("%s uses no taskgate metric", f)
		}
		for _, n := range names {
			base := n
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if strings.HasSuffix(n, suf) && registered[strings.TrimSuffix(n, suf)] {
					base = strings.TrimSuffix(n, suf)
				}
			}
			if !registered[base] {
				t.Errorf("%s uses %s, which the gateway does not register", f, n)
			}
		}
	}
}
