package guard

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"
)

func sampleRecord() CallRecord {
	return CallRecord{
		RequestID: "req-42", Key: "inventory-app", Task: "warehouse.inventory_photo", User: "u-17",
		Source: "inventory-app.scanner", Endpoint: "openai-mini", Model: "gpt-4o-mini",
		Status: 200, InputTokens: 1500, OutputTokens: 300, CostMicros: 405,
		Latency: 1234567 * time.Microsecond, Trimmed: 3, Flagged: true, FailedOver: true, Stream: true,
		Anomalies: []string{KindSource, KindTokensPerCall},
	}
}

func TestCallRecordLog(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&buf, nil))
	r := sampleRecord()
	r.Log(l)
	(&CallRecord{RequestID: "req-43", Status: 429, Code: "limit_exceeded"}).Log(l)
	(&CallRecord{}).Log(nil) // no logger: no panic

	lines := jsonLines(t, &buf)
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2 (one per call): %s", len(lines), buf.String())
	}
	for _, m := range lines {
		if _, ok := m["time"]; !ok {
			t.Error("no time attribute")
		}
		delete(m, "time")
	}
	want := map[string]any{
		"level": "INFO", "msg": "call",
		"request_id": "req-42", "key": "inventory-app", "task": "warehouse.inventory_photo", "user": "u-17",
		"source": "inventory-app.scanner", "endpoint": "openai-mini", "model": "gpt-4o-mini",
		"status": 200.0, "code": "", "input_tokens": 1500.0, "output_tokens": 300.0,
		"cost_micros": 405.0, "cost": "0.000405", "latency_ms": 1234.567, "trimmed": 3.0,
		"flagged": true, "failed_over": true, "stream": true,
		"anomalies": []any{"source", "tokens_per_call"},
	}
	if !reflect.DeepEqual(lines[0], want) {
		t.Errorf("line:\n got %v\nwant %v", lines[0], want)
	}
	if got := lines[1]["anomalies"]; !reflect.DeepEqual(got, []any{}) {
		t.Errorf("anomalies of a clean call = %#v, want []", got)
	}
	if lines[1]["code"] != "limit_exceeded" || lines[1]["status"] != 429.0 {
		t.Errorf("second line = %v", lines[1])
	}
}

// TestCallRecordNoSecret guards against a secret-bearing field being added.
func TestCallRecordNoSecret(t *testing.T) {
	typ := reflect.TypeFor[CallRecord]()
	for i := range typ.NumField() {
		name := strings.ToLower(typ.Field(i).Name)
		for _, bad := range []string{"secret", "token", "password", "apikey", "authorization"} {
			if strings.Contains(name, bad) && !strings.HasSuffix(name, "tokens") {
				t.Errorf("CallRecord has field %s that looks like a secret", typ.Field(i).Name)
			}
		}
	}
}

func TestCallRecordDetail(t *testing.T) {
	r := sampleRecord()
	d := r.Detail()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"key": "inventory-app", "endpoint": "openai-mini", "model": "gpt-4o-mini",
		"status": 200.0, "code": "", "input_tokens": 1500.0, "output_tokens": 300.0,
		"cost_micros": 405.0, "cost": "0.000405", "latency_ms": 1234.567, "trimmed": 3.0,
		"flagged": true, "failed_over": true, "stream": true,
		"anomalies": []any{"source", "tokens_per_call"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("detail:\n got %v\nwant %v", got, want)
	}
	for _, k := range []string{"task", "user", "source", "request_id"} {
		if _, ok := d[k]; ok {
			t.Errorf("detail repeats the event's own field %q", k)
		}
	}
}

func BenchmarkCallRecordLog(b *testing.B) {
	l := slog.New(slog.NewJSONHandler(discard{}, nil))
	r := sampleRecord()
	b.ReportAllocs()
	for b.Loop() {
		r.Log(l)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
