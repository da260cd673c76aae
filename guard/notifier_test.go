package guard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var windowEnd = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func TestThresholdJSON(t *testing.T) {
	cases := []struct {
		name string
		in   Threshold
		want map[string]any
	}{
		{
			"task window, requests",
			Threshold{Task: "warehouse.inventory_photo", Scope: "task", User: "ignored", Unit: "requests", Period: "day",
				Threshold: 0.8, Used: 4000, Limit: 5000, WindowEnd: windowEnd},
			map[string]any{"event": "threshold", "task": "warehouse.inventory_photo", "scope": "task", "user": nil,
				"unit": "requests", "period": "day", "threshold": 0.8, "used": 4000.0, "limit": 5000.0,
				"window_end": "2026-12-01T00:00:00Z"},
		},
		{
			"user window, tokens",
			Threshold{Task: "t", Scope: "user", User: "u-17", Unit: "tokens", Period: "hour",
				Threshold: 1, Used: 200001, Limit: 200000, WindowEnd: windowEnd.In(time.FixedZone("CET", 3600))},
			map[string]any{"event": "threshold", "task": "t", "scope": "user", "user": "u-17",
				"unit": "tokens", "period": "hour", "threshold": 1.0, "used": 200001.0, "limit": 200000.0,
				"window_end": "2026-12-01T01:00:00+01:00"},
		},
		{
			"money as dollar strings",
			Threshold{Task: "t", Scope: "task", Unit: "money", Period: "month",
				Threshold: 0.8, Used: 123, Limit: 300_000_000, WindowEnd: windowEnd},
			map[string]any{"event": "threshold", "task": "t", "scope": "task", "user": nil,
				"unit": "money", "period": "month", "threshold": 0.8, "used": "0.000123", "limit": "300.000000",
				"window_end": "2026-12-01T00:00:00Z"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.in)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("payload:\n got %v\nwant %v", got, c.want)
			}
			var back Threshold
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			want := c.in
			if want.Scope == "task" {
				want.User = ""
			}
			if !back.WindowEnd.Equal(want.WindowEnd) {
				t.Errorf("window_end round trip: %v, want %v", back.WindowEnd, want.WindowEnd)
			}
			back.WindowEnd, want.WindowEnd = time.Time{}, time.Time{}
			if back != want {
				t.Errorf("round trip: %+v, want %+v", back, want)
			}
		})
	}
}

func TestThresholdJSONStrings(t *testing.T) {
	for _, s := range []string{"plain", `quo"te\back`, "ctl\x00\x1f\n\t", "Zähl 箱 \u2028", "bad\xff\xfeutf8", "<html>&"} {
		th := Threshold{Task: s, Scope: "user", User: s, Unit: "tokens", Period: "day", Threshold: 0.8, WindowEnd: windowEnd}
		b, err := th.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q: invalid JSON %s: %v", s, b, err)
		}
		var want string // what encoding/json makes of s
		if std, err := json.Marshal(s); err != nil || json.Unmarshal(std, &want) != nil {
			t.Fatal("encoding/json failed")
		}
		if got["task"] != want || got["user"] != want {
			t.Errorf("%q: task %q, user %q; want %q", s, got["task"], got["user"], want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1)} {
		if _, err := (Threshold{Threshold: f}).MarshalJSON(); err == nil {
			t.Errorf("threshold %v encoded without error", f)
		}
	}
}

func TestThresholdUnmarshalErrors(t *testing.T) {
	for _, s := range []string{
		`{"event":"other","window_end":"2026-12-01T00:00:00Z","used":1,"limit":2}`,
		`{"event":"threshold","window_end":"soon","used":1,"limit":2}`,
		`{"event":"threshold","unit":"money","window_end":"2026-12-01T00:00:00Z","used":1,"limit":"2.00"}`,
		`{"event":"threshold","unit":"tokens","window_end":"2026-12-01T00:00:00Z","used":"1","limit":2}`,
	} {
		var th Threshold
		if err := json.Unmarshal([]byte(s), &th); err == nil {
			t.Errorf("decoded %s without error", s)
		}
	}
}

func TestThresholdDetail(t *testing.T) {
	d := Threshold{Task: "t", Scope: "user", User: "u", Unit: "money", Period: "day", Threshold: 1,
		Used: 20_000_001, Limit: 20_000_000, WindowEnd: windowEnd}.Detail()
	want := map[string]any{"scope": "user", "unit": "money", "period": "day", "threshold": 1.0,
		"used": "20.000001", "limit": "20.000000", "window_end": "2026-12-01T00:00:00Z"}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("detail = %v, want %v", d, want)
	}
	d = Threshold{Unit: "tokens", Used: 5, Limit: 6, WindowEnd: windowEnd}.Detail()
	if d["used"] != int64(5) || d["limit"] != int64(6) {
		t.Errorf("token detail used/limit = %#v/%#v, want int64", d["used"], d["limit"])
	}
}

// results counts what a Notifier reports.
type results struct {
	mu sync.Mutex
	n  map[string]int
}

func newResults() *results { return &results{n: map[string]int{}} }

func (r *results) report(s string) {
	r.mu.Lock()
	r.n[s]++
	r.mu.Unlock()
}

func (r *results) count(s string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[s]
}

// waitFor polls cond until it holds or the test times out.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

var sample = Threshold{Task: "warehouse.inventory_photo", Scope: "user", User: "u-17", Unit: "tokens",
	Period: "day", Threshold: 0.8, Used: 160000, Limit: 200000, WindowEnd: windowEnd}

func TestNotifierDelivers(t *testing.T) {
	type got struct {
		method, ctype, agent string
		body                 []byte
	}
	reqs := make(chan got, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs <- got{r.Method, r.Header.Get("Content-Type"), r.Header.Get("User-Agent"), b}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	res := newResults()
	n := NewNotifier(NotifierOptions{OnResult: res.report})
	n.Notify([]string{srv.URL + "/hook/a", srv.URL + "/hook/b"}, sample)
	for range 2 {
		r := <-reqs
		if r.method != http.MethodPost || r.ctype != "application/json" || r.agent != "taskgate" {
			t.Errorf("request: %s, Content-Type %q, User-Agent %q", r.method, r.ctype, r.agent)
		}
		var th Threshold
		if err := json.Unmarshal(r.body, &th); err != nil {
			t.Fatalf("body %s: %v", r.body, err)
		}
		if !th.WindowEnd.Equal(sample.WindowEnd) {
			t.Errorf("window_end = %v", th.WindowEnd)
		}
		th.WindowEnd = sample.WindowEnd
		if th != sample {
			t.Errorf("payload %+v, want %+v", th, sample)
		}
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res.count(ResultDelivered) != 2 || len(res.n) != 1 {
		t.Errorf("results = %v, want 2 delivered", res.n)
	}
}

func TestNotifierRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	res := newResults()
	n := NewNotifier(NotifierOptions{OnResult: res.report, Backoff: time.Millisecond})
	n.Notify([]string{srv.URL}, sample)
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 {
		t.Errorf("webhook called %d times, want 3", calls.Load())
	}
	if res.count(ResultRetried) != 2 || res.count(ResultDelivered) != 1 || res.count(ResultFailed) != 0 {
		t.Errorf("results = %v, want 2 retried, 1 delivered", res.n)
	}
}

func TestNotifierGivesUp(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()

	res := newResults()
	n := NewNotifier(NotifierOptions{OnResult: res.report, Backoff: time.Millisecond, Attempts: 3})
	n.Notify([]string{srv.URL}, sample)
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 || res.count(ResultRetried) != 2 || res.count(ResultFailed) != 1 {
		t.Errorf("calls = %d, results = %v; want 3 calls, 2 retried, 1 failed", calls.Load(), res.n)
	}
}

func TestNotifierConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() + "/secret-token-path"
	ln.Close()

	res := newResults()
	n := NewNotifier(NotifierOptions{OnResult: res.report, Backoff: time.Millisecond, Attempts: 2})
	start := time.Now()
	n.Notify([]string{dead}, sample)
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Errorf("Notify took %v with a dead webhook", d)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res.count(ResultFailed) != 1 || res.count(ResultRetried) != 1 {
		t.Errorf("results = %v, want 1 retried, 1 failed", res.n)
	}
}

// hangingServer answers nothing until release is closed.
func hangingServer(t *testing.T) (srv *httptest.Server, arrived *atomic.Int32, release func()) {
	t.Helper()
	ch := make(chan struct{})
	arrived = new(atomic.Int32)
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		select {
		case <-ch:
		case <-r.Context().Done():
		}
	}))
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(func() { release(); srv.Close() })
	return srv, arrived, release
}

func TestNotifyDoesNotBlockOnHangingWebhook(t *testing.T) {
	srv, arrived, release := hangingServer(t)
	res := newResults()
	n := NewNotifier(NotifierOptions{OnResult: res.report, Workers: 2, QueueSize: 10000})
	hooks := []string{srv.URL}
	n.Notify(hooks, sample)
	waitFor(t, "the webhook to be hanging", func() bool { return arrived.Load() >= 1 })

	const calls = 1000
	took := make([]time.Duration, calls)
	for i := range took {
		s := time.Now()
		n.Notify(hooks, sample)
		took[i] = time.Since(s)
	}
	slices.Sort(took)
	median, worst := took[calls/2], took[calls-1]
	t.Logf("Notify while the webhook hangs: median %v, worst %v", median, worst)
	// A blocking Notify would take the webhook's timeout (5s); the worst
	// case allows for scheduling noise under -race on a busy machine.
	if median > 100*time.Microsecond {
		t.Errorf("Notify's median is %v while a webhook hangs; want microseconds", median)
	}
	if worst > 200*time.Millisecond {
		t.Errorf("a Notify took %v while a webhook hangs", worst)
	}
	release()
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := res.count(ResultDelivered); got != calls+1 {
		t.Errorf("delivered %d, want %d (results %v)", got, calls+1, res.n)
	}
}

func TestNotifierQueueFullDrops(t *testing.T) {
	srv, arrived, release := hangingServer(t)
	res := newResults()
	n := NewNotifier(NotifierOptions{OnResult: res.report, Workers: 1, QueueSize: 2})
	hooks := []string{srv.URL}
	n.Notify(hooks, sample) // taken by the only worker, which then hangs
	waitFor(t, "the worker to be busy", func() bool { return arrived.Load() == 1 })
	n.Notify(hooks, sample) // queued
	n.Notify(hooks, sample) // queued
	n.Notify(hooks, sample) // dropped
	n.Notify([]string{srv.URL, srv.URL}, sample)
	if got := res.count(ResultDropped); got != 3 {
		t.Errorf("dropped %d, want 3 (results %v)", got, res.n)
	}
	release()
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := res.count(ResultDelivered); got != 3 {
		t.Errorf("delivered %d, want 3 (results %v)", got, res.n)
	}
}

func TestNotifierPostTimeout(t *testing.T) {
	srv, arrived, _ := hangingServer(t)
	res := newResults()
	n := NewNotifier(NotifierOptions{OnResult: res.report, Timeout: 100 * time.Millisecond, Backoff: time.Millisecond, Attempts: 2})
	n.Notify([]string{srv.URL}, sample)
	start := time.Now()
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("two timed-out attempts took %v", d)
	}
	if arrived.Load() < 1 || res.count(ResultRetried) != 1 || res.count(ResultFailed) != 1 {
		t.Errorf("arrived = %d, results = %v; want 1 retried, 1 failed", arrived.Load(), res.n)
	}
}

func TestNotifierCloseGivesUpAtDeadline(t *testing.T) {
	srv, arrived, _ := hangingServer(t)
	res := newResults()
	n := NewNotifier(NotifierOptions{OnResult: res.report, Workers: 1})
	n.Notify([]string{srv.URL, srv.URL, srv.URL}, sample)
	waitFor(t, "the webhook to be hanging", func() bool { return arrived.Load() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := n.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v past its deadline", d)
	}
	if res.count(ResultFailed) != 3 {
		t.Errorf("results = %v, want 3 failed", res.n)
	}
	n.Notify([]string{srv.URL}, sample)
	if res.count(ResultDropped) != 1 {
		t.Errorf("Notify after Close: results = %v, want 1 dropped", res.n)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestNotifierCloseWaitsForRetries(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	res := newResults()
	n := NewNotifier(NotifierOptions{OnResult: res.report, Backoff: 100 * time.Millisecond})
	n.Notify([]string{srv.URL}, sample)
	waitFor(t, "the first attempt to fail", func() bool { return res.count(ResultRetried) == 1 })
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res.count(ResultDelivered) != 1 {
		t.Errorf("results = %v: Close did not wait for the retry", res.n)
	}
}

func TestNotifierBackoff(t *testing.T) {
	n := NewNotifier(NotifierOptions{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	defer n.Close(context.Background())
	cases := []struct {
		failures int
		lo, hi   time.Duration
	}{
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{3, 200 * time.Millisecond, 400 * time.Millisecond},
		{4, 400 * time.Millisecond, 800 * time.Millisecond},
		{5, 500 * time.Millisecond, time.Second},
		{60, 500 * time.Millisecond, time.Second},
	}
	for _, c := range cases {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := n.backoff(c.failures)
			if d < c.lo || d > c.hi {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", c.failures, d, c.lo, c.hi)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Errorf("backoff(%d) has no jitter", c.failures)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://hooks.example.com/services/T000/B000/XXXX?token=s3cret": "https://hooks.example.com/…",
		"::not a url": "(unparsable webhook URL)",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func BenchmarkNotify(b *testing.B) {
	n := NewNotifier(NotifierOptions{QueueSize: 1, Workers: 1, Client: &http.Client{}})
	defer n.Close(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		n.Notify([]string{"http://127.0.0.1:1/"}, sample) // mostly dropped: measures the caller's cost
	}
}
