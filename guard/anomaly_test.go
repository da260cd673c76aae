package guard

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"testing"
)

func TestSourceExpected(t *testing.T) {
	billing := []string{"billing", "inventory-app"}
	cases := []struct {
		name    string
		sources []string
		source  string
		want    bool
	}{
		{"nil list allows all", nil, "anything", true},
		{"nil list allows empty", nil, "", true},
		{"empty list allows none", []string{}, "billing", false},
		{"exact", billing, "billing", true},
		{"child", billing, "billing.export", true},
		{"grandchild", billing, "billing.export.csv", true},
		{"longer name is not a child", billing, "billingx", false},
		{"longer name with dot later", billing, "billingx.export", false},
		{"parent of an entry", []string{"billing.export"}, "billing", false},
		{"sibling of an entry", []string{"billing.export"}, "billing.import", false},
		{"child of a dotted entry", []string{"billing.export"}, "billing.export.csv", true},
		{"other entry", billing, "inventory-app", true},
		{"unknown", billing, "crm", false},
		{"empty source", billing, "", false},
		{"prefix shorter than entry", billing, "bill", false},
		{"trailing dot", billing, "billing.", true},
		{"case matters", billing, "Billing", false},
		{"empty entry allows nothing extra", []string{""}, "x", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := SourceExpected(c.sources, c.source); got != c.want {
				t.Errorf("SourceExpected(%q, %q) = %v, want %v", c.sources, c.source, got, c.want)
			}
		})
	}
}

func TestCallsPerHourExceeded(t *testing.T) {
	cases := []struct {
		max   int
		calls int64
		want  bool
	}{
		{0, 1000, false},
		{-1, 1000, false},
		{60, 1, false},
		{60, 60, false},
		{60, 61, true},
		{60, 62, true},
		{1, 1, false},
		{1, 2, true},
	}
	for _, c := range cases {
		if got := CallsPerHourExceeded(c.max, c.calls); got != c.want {
			t.Errorf("CallsPerHourExceeded(%d, %d) = %v, want %v", c.max, c.calls, got, c.want)
		}
	}
}

func TestTokensPerCallExceeded(t *testing.T) {
	cases := []struct {
		max    int
		tokens int64
		want   bool
	}{
		{0, 1 << 40, false},
		{8000, 7999, false},
		{8000, 8000, false},
		{8000, 8001, true},
		{-5, 10, false},
	}
	for _, c := range cases {
		if got := TokensPerCallExceeded(c.max, c.tokens); got != c.want {
			t.Errorf("TokensPerCallExceeded(%d, %d) = %v, want %v", c.max, c.tokens, got, c.want)
		}
	}
}

// jsonLines decodes every line a JSON handler wrote.
func jsonLines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line %s: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestLogAnomaly(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, nil))
	LogAnomaly(l, KindCallsPerHour, "warehouse.inventory_photo", "u-17", "inventory-app", "req-1",
		map[string]any{"calls_last_hour": 61, "max": 60})
	LogAnomaly(l, KindSource, "t", "", "crm", "req-2", nil)
	LogAnomaly(nil, KindSource, "t", "", "", "", nil) // no logger: no panic

	lines := jsonLines(t, &buf)
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2: %s", len(lines), buf.String())
	}
	for _, m := range lines {
		delete(m, "time")
	}
	want := []map[string]any{
		{"level": "WARN", "msg": "anomaly", "kind": "calls_per_hour", "task": "warehouse.inventory_photo",
			"user": "u-17", "source": "inventory-app", "request_id": "req-1",
			"detail": map[string]any{"calls_last_hour": 61.0, "max": 60.0}},
		{"level": "WARN", "msg": "anomaly", "kind": "source", "task": "t", "user": "", "source": "crm", "request_id": "req-2"},
	}
	if !reflect.DeepEqual(lines, want) {
		t.Errorf("lines:\n got %v\nwant %v", lines, want)
	}
}

func BenchmarkSourceExpected(b *testing.B) {
	sources := []string{"inventory-app", "billing", "crm.sync"}
	b.ReportAllocs()
	for b.Loop() {
		if !SourceExpected(sources, "billing.export.csv") {
			b.Fatal("unexpected")
		}
	}
}
