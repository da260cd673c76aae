package guard

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"taskgate/config"
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

// detailOf is the call event's detail as a map: the record's fields but
// those the event carries itself (task, user, source, request_id), as
// Log names them.
func detailOf(r *CallRecord) map[string]any {
	return map[string]any{
		"key": r.Key, "endpoint": r.Endpoint, "model": r.Model, "status": r.Status, "code": r.Code,
		"input_tokens": r.InputTokens, "output_tokens": r.OutputTokens, "cost_micros": r.CostMicros,
		"cost": config.FormatMicros(r.CostMicros), "latency_ms": r.latencyMS(), "trimmed": r.Trimmed,
		"flagged": r.Flagged, "failed_over": r.FailedOver, "stream": r.Stream, "anomalies": r.anomalies(),
	}
}

// decoded is v marshalled and read back into untyped JSON values.
func decoded(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCallRecordDetail(t *testing.T) {
	r := sampleRecord()
	var ev struct{ Detail map[string]any }
	if err := json.Unmarshal(LineEvent(nil, r.AppendLine(nil, time.Now())), &ev); err != nil {
		t.Fatal(err)
	}
	got := ev.Detail
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

// journalRecords are records whose lines must come out of AppendLine
// exactly as slog writes them.
func journalRecords() []CallRecord {
	odd := "a\"b\\c\nd\te\rf\bg\fh\x00i<j>&k\u2028l\xffm 日本 🎉"
	return []CallRecord{
		sampleRecord(),
		{},
		{RequestID: odd, Key: odd, Task: odd, User: odd, Source: odd, Endpoint: odd, Model: odd, Code: odd, Anomalies: []string{odd, ""}},
		{Status: 502, Code: "upstream_error", InputTokens: -1, OutputTokens: 1 << 62, CostMicros: -1234567, Latency: 3 * time.Nanosecond},
		{Latency: 999 * time.Microsecond, CostMicros: 1_000_000_000_001, Trimmed: 1 << 30},
		{Latency: 36 * time.Hour, Anomalies: []string{}},
	}
}

func TestAppendLineMatchesSlog(t *testing.T) {
	at := time.Date(2026, 11, 30, 7, 5, 5, 123456789, time.UTC)
	for i, r := range journalRecords() {
		var buf bytes.Buffer
		l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Time(slog.TimeKey, at)
			}
			return a
		}}))
		r.Log(l)
		if got := r.AppendLine(nil, at); !bytes.Equal(got, buf.Bytes()) {
			t.Errorf("record %d:\nAppendLine %s\nslog       %s", i, got, buf.Bytes())
		}
	}
}

// TestLineEvent: the event taken from each record's line is the record's
// call event: the line's time, kind "call", the record's request_id, task,
// user and source, and its detail fields, whatever its strings hold (some
// look like the marks of the line's parts); LineEventAt with the marks
// AppendLineMarks returns (after other bytes) gives the same bytes.
func TestLineEvent(t *testing.T) {
	records := append(journalRecords(),
		CallRecord{RequestID: `x","key":"y`, Task: `,"key":`, User: `\",\"key\":`, Source: "}\n", Key: "k"},
		CallRecord{RequestID: `,"level":`, Task: `,"request_id":"z"`, Model: `,"level":,"key":`})
	at := time.Date(2026, 11, 30, 18, 1, 2, 345600000, time.UTC)
	for i, r := range records {
		line := r.AppendLine(nil, at)
		var got map[string]any
		if err := json.Unmarshal(LineEvent([]byte("x")[1:], line), &got); err != nil {
			t.Fatalf("record %d: event of %s: %v", i, line, err)
		}
		want := decoded(t, map[string]any{
			"time": "2026-11-30T18:01:02.3456Z", "kind": "call", "request_id": r.RequestID,
			"task": r.Task, "user": r.User, "source": r.Source, "detail": detailOf(&r),
		})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("record %d:\n got %v\nwant %v", i, got, want)
		}
		prefixed, marks := r.AppendLineMarks([]byte("earlier line\n"), at)
		if !bytes.Equal(prefixed[len("earlier line\n"):], line) {
			t.Fatalf("record %d: AppendLineMarks wrote %s, AppendLine %s", i, prefixed, line)
		}
		if fromMarks, want := LineEventAt(nil, line, marks), LineEvent(nil, line); !bytes.Equal(fromMarks, want) {
			t.Errorf("record %d: LineEventAt\n%s\nLineEvent\n%s", i, fromMarks, want)
		}
	}
	for _, bad := range []string{"", "{}\n", `{"key":"x"}`, `{"time":"t","key":"x","request_id":"r","level":1}` + "\n"} {
		if got := LineEvent(nil, []byte(bad)); len(got) != 0 {
			t.Errorf("LineEvent(%q) = %s, want nothing", bad, got)
		}
	}
}

func BenchmarkJournal(b *testing.B) {
	r := sampleRecord()
	at := time.Now()
	b.Run("slog", func(b *testing.B) {
		l := slog.New(slog.NewJSONHandler(discard{}, nil))
		b.ReportAllocs()
		for range b.N {
			r.Log(l)
			_, _ = json.Marshal(detailOf(&r))
		}
	})
	b.Run("append", func(b *testing.B) {
		var buf, detail []byte
		b.ReportAllocs()
		for range b.N {
			var m LineMarks
			buf, m = r.AppendLineMarks(buf[:0], at)
			_ = LineEventAt(detail[:0], buf, m)
		}
	})
}
