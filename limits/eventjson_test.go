package limits

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"
)

// TestAppendEvent checks that appendEvent writes exactly what
// encoding/json writes for the same event, and fails where it fails.
func TestAppendEvent(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 14, 5, 7, 123456789, time.UTC)
	kolkata := time.FixedZone("IST", 5*3600+1800)
	exp := t0.Add(time.Hour)
	type custom struct {
		A int `json:"a"`
	}
	for _, c := range []struct {
		name    string
		ev      Event
		wantErr bool
	}{
		{name: "zero", ev: Event{}},
		{name: "nil detail", ev: Event{Time: t0, Kind: "call", Task: "t", User: "u", Source: "s", RequestID: "r"}},
		{name: "empty detail", ev: Event{Time: t0, Detail: map[string]any{}}},
		{name: "call event", ev: Event{Time: t0, Kind: "call", Task: "bench.chat", User: "alice", Source: "app.web", RequestID: "req-1",
			Detail: map[string]any{"key": "bench", "endpoint": "mini", "model": "gpt-4o-mini", "status": 200, "code": "",
				"input_tokens": int64(12), "output_tokens": int64(-9), "cost_micros": int64(33), "cost": "0.000033",
				"latency_ms": 0.412, "trimmed": 0, "flagged": true, "failed_over": false, "stream": false,
				"anomalies": []string{"source", "tokens_per_call"}, "none": []string(nil), "empty": []string{}}}},
		{name: "escapes", ev: Event{Time: t0, Kind: "a\"b\\c\n\r\t\b\f\x01\x1f<>&", User: "é🙂\u2028\u2029\xff\xfex", Source: "\x7f",
			Detail: map[string]any{"<k>": "v&", "ü": "\xc3"}}},
		{name: "floats", ev: Event{Time: t0, Detail: map[string]any{"a": 0.0, "b": -0.0, "c": 1e-7, "d": 1e21, "e": 123456789.125,
			"f": 1e20, "g": 0.000001, "h": -2.5e-9, "i": math.MaxFloat64, "j": math.SmallestNonzeroFloat64, "k": float32(0.1)}}},
		{name: "other kinds", ev: Event{Time: t0, Detail: map[string]any{"nil": nil, "i32": int32(-5), "u64": uint64(math.MaxUint64),
			"u": uint(7), "i8": int8(3), "t": t0, "tp": &exp, "tnil": (*time.Time)(nil), "m": map[string]int{"b": 1, "a": 2},
			"s": custom{A: 1}, "raw": json.RawMessage(`{"x": 1}`), "list": []any{1, "x", nil}, "num": json.Number("12.50")}}},
		{name: "offset time", ev: Event{Time: t0.In(kolkata), Kind: "k"}},
		{name: "whole seconds", ev: Event{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}},
		{name: "many keys", ev: Event{Time: t0, Detail: func() map[string]any {
			m := map[string]any{}
			for i := 0; i < 40; i++ {
				m[string(rune('A'+i))+"k"] = i
			}
			return m
		}()}},
		{name: "year 10000", ev: Event{Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, wantErr: true},
		{name: "negative year", ev: Event{Time: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}, wantErr: true},
		{name: "NaN", ev: Event{Time: t0, Detail: map[string]any{"x": math.NaN()}}, wantErr: true},
		{name: "Inf", ev: Event{Time: t0, Detail: map[string]any{"x": math.Inf(-1)}}, wantErr: true},
		{name: "channel", ev: Event{Time: t0, Detail: map[string]any{"x": make(chan int)}}, wantErr: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, wantErr := json.Marshal(c.ev)
			got, err := appendEvent([]byte("prefix"), &c.ev)
			if (err != nil) != c.wantErr || (wantErr != nil) != c.wantErr {
				t.Fatalf("error %v (encoding/json: %v), want error %v", err, wantErr, c.wantErr)
			}
			if c.wantErr {
				return
			}
			if !bytes.HasPrefix(got, []byte("prefix")) || !bytes.Equal(got[len("prefix"):], want) {
				t.Fatalf("got  %s\nwant %s", got[min(len(got), len("prefix")):], want)
			}
		})
	}
}

func BenchmarkAppendEvent(b *testing.B) {
	ev := gatewayOutcome(1).Events[0]
	b.Run("appendEvent", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for i := 0; i < b.N; i++ {
			buf, _ = appendEvent(buf[:0], &ev)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			_, _ = json.Marshal(ev)
		}
	})
}

// TestAppendEventEncoded checks that a pre-encoded event is written as it
// is, in place of its fields' encoding.
func TestAppendEventEncoded(t *testing.T) {
	enc := []byte(`{"time":"2026-11-30T14:05:07.123456789Z","kind":"call","request_id":"r","task":"t","user":"u","source":"","detail":{"a":1}}`)
	ev := Event{Time: time.Date(2026, 11, 30, 14, 5, 7, 123456789, time.UTC), Kind: "call", Task: "t", User: "u", RequestID: "r",
		Detail: map[string]any{"ignored": true}, Encoded: enc}
	got, err := appendEvent([]byte("x"), &ev)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[1:], enc) {
		t.Errorf("got  %s\nwant %s", got[1:], enc)
	}
}
