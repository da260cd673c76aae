package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"taskgate/internal/fakeupstream"
	"taskgate/internal/redistest"
	"taskgate/limits"
)

const guardConfig = baseConfig + `
  - key: app.guarded
    endpoints: [primary]
    purpose: Answer questions about our product.
    typical_tokens: [50, 20]
    sources: [billing, tests]
    max_calls_per_hour: 2
    max_tokens_per_call: 30
    limits:
      task: {requests: {day: 1000}}
  - key: app.private
    endpoints: [primary]
    private: true
    block_group: shared
  - key: app.selfflag
    endpoints: [primary]
    purpose: Answer questions about our product.
    self_flag: true
    auto_block_threshold: 2
  - key: app.watched
    endpoints: [primary]
    typical_tokens: [10, 10]
    limits:
      task: {requests: {day: 10}}
    thresholds: [0.5, 1.0]
    watchers:
      - webhook: {{HOOK}}
`

func guardEnv(t *testing.T, hook string, o envOptions) *env {
	if hook == "" {
		hook = "http://127.0.0.1:1/none"
	}
	return newEnv(t, strings.ReplaceAll(guardConfig, "{{HOOK}}", hook), o)
}

type eventsJSON struct {
	Events []struct {
		Time      string         `json:"time"`
		Kind      string         `json:"kind"`
		Task      string         `json:"task"`
		User      string         `json:"user"`
		Source    string         `json:"source"`
		RequestID string         `json:"request_id"`
		Detail    map[string]any `json:"detail"`
	} `json:"events"`
}

// metric returns the /metrics line value for a series, or "".
func (e *env) metric(series string) string {
	resp, err := http.Get(e.adminURL + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, series+" ") {
			return strings.TrimPrefix(line, series+" ")
		}
	}
	return ""
}

func TestBlockThenCall(t *testing.T) {
	url := redistest.URL(t)
	prefix := redistest.Prefix(t)
	e := guardEnv(t, "", envOptions{redisURL: url, prefix: prefix})
	e2 := guardEnv(t, "", envOptions{redisURL: url, prefix: prefix}) // a second replica
	if st := e.admin("POST", "/admin/blocks", `{"user":"mallory","group":"app.guarded","reason":"abuse of the bot"}`, nil); st != 201 {
		t.Fatalf("POST block: %d", st)
	}
	for _, g := range []*env{e, e2} {
		client := g.sdk(testKey)
		_, err := client.Chat.Completions.New(context.Background(), chatParams("app.guarded", "hi"), option.WithHeader("X-Taskgate-User", "mallory"), option.WithHeader("X-Taskgate-Source", "billing"))
		var apierr *openai.Error
		if !errors.As(err, &apierr) || apierr.StatusCode != 403 || apierr.Code != "blocked" {
			t.Fatalf("blocked user served: %v", err)
		}
		if !strings.Contains(apierr.Message, "abuse of the bot") {
			t.Errorf("reason not shown: %s", apierr.Message)
		}
		if apierr.Response.Header.Get("x-should-retry") != "false" {
			t.Error("missing x-should-retry: false")
		}
	}
	if e.up.Count()+e2.up.Count() != 0 {
		t.Error("a blocked call reached the upstream")
	}
	var u usageJSON
	e.admin("GET", "/admin/usage?task=app.guarded", "", &u)
	if used, _, _ := u.window("task", "requests", "day"); used != "0" {
		t.Errorf("blocked calls counted: %s", used)
	}
	// Another user is served; deleting the block lets mallory in.
	ok := e.post("/v1/chat/completions", testKey, `{"model":"app.guarded","user":"bob","messages":[{"role":"user","content":"x"}]}`)
	ok.Body.Close()
	if ok.StatusCode != 200 {
		t.Fatalf("bob: %d", ok.StatusCode)
	}
	var list struct {
		Blocks []map[string]any `json:"blocks"`
	}
	e2.admin("GET", "/admin/blocks", "", &list)
	if len(list.Blocks) != 1 || list.Blocks[0]["user"] != "mallory" {
		t.Fatalf("blocks: %+v", list.Blocks)
	}
	if st := e2.admin("DELETE", "/admin/blocks?user=mallory&group=app.guarded", "", nil); st != 204 {
		t.Fatalf("DELETE block: %d", st)
	}
	again := e.post("/v1/chat/completions", testKey, `{"model":"app.guarded","user":"mallory","messages":[{"role":"user","content":"x"}]}`)
	again.Body.Close()
	if again.StatusCode != 200 {
		t.Fatalf("after unblock: %d", again.StatusCode)
	}
	var evs eventsJSON
	e.admin("GET", "/admin/events?kind=block", "", &evs)
	if len(evs.Events) == 0 || evs.Events[0].User != "mallory" {
		t.Errorf("no block event: %+v", evs.Events)
	}
}

func TestPrivateTaskHidesReasonAndExpiryLifts(t *testing.T) {
	e := guardEnv(t, "", envOptions{})
	exp := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	if st := e.admin("POST", "/admin/blocks", `{"user":"eve","group":"*","reason":"secret reason","expires":"`+exp+`"}`, nil); st != 201 {
		t.Fatalf("POST block: %d", st)
	}
	resp := e.post("/v1/chat/completions", testKey, `{"model":"app.private","user":"eve","messages":[{"role":"user","content":"x"}]}`)
	er := readErr(t, resp)
	if resp.StatusCode != 403 || code(er) != "blocked" {
		t.Fatalf("status %d code %s", resp.StatusCode, code(er))
	}
	if strings.Contains(er.Error.Message, "secret reason") {
		t.Errorf("private task shows the reason: %s", er.Error.Message)
	}
	waitFor(t, "the block to expire", func() bool {
		r := e.post("/v1/chat/completions", testKey, `{"model":"app.private","user":"eve","messages":[{"role":"user","content":"x"}]}`)
		r.Body.Close()
		return r.StatusCode == 200
	})
}

func TestAnomaliesSignalledNeverBlock(t *testing.T) {
	e := guardEnv(t, "", envOptions{redisURL: redistest.URL(t)})
	e.up.SetDefault(fakeupstream.Behavior{Usage: &fakeupstream.Usage{PromptTokens: 20, CompletionTokens: 20}})
	call := func(source string) int {
		r := e.post("/v1/chat/completions", testKey, `{"model":"app.guarded","user":"carol","messages":[{"role":"user","content":"x"}]}`, "X-Taskgate-Source", source)
		r.Body.Close()
		return r.StatusCode
	}
	// An expected source beneath an entry, then an unexpected one.
	if call("billing.export") != 200 || call("scripts.cron") != 200 {
		t.Fatal("anomalous call not served")
	}
	// Third call this hour for carol: past max_calls_per_hour 2.
	if call("tests") != 200 {
		t.Fatal("calls-per-hour anomaly blocked the call")
	}
	e.settleAll()
	for kind, want := range map[string]string{"source": "1", "calls_per_hour": "1", "tokens_per_call": "3"} {
		if got := e.metric(`taskgate_anomalies_total{kind="` + kind + `",task="app.guarded"}`); got != want {
			t.Errorf("anomalies %s = %q, want %s", kind, got, want)
		}
	}
	var evs eventsJSON
	e.admin("GET", "/admin/events?task=app.guarded&kind=anomaly", "", &evs)
	kinds := map[string]int{}
	for _, ev := range evs.Events {
		kinds[ev.Detail["kind"].(string)]++
		if ev.User != "carol" || ev.RequestID == "" {
			t.Errorf("anomaly event lacks user or request id: %+v", ev)
		}
	}
	if kinds["source"] != 1 || kinds["calls_per_hour"] != 1 || kinds["tokens_per_call"] != 3 {
		t.Errorf("anomaly events: %v", kinds)
	}
	// Events are newest first.
	for i := 1; i < len(evs.Events); i++ {
		if evs.Events[i-1].Time < evs.Events[i].Time {
			t.Errorf("events not newest first: %s before %s", evs.Events[i-1].Time, evs.Events[i].Time)
		}
	}
}

func TestSelfFlagStripsMarkerAndAutoBlocks(t *testing.T) {
	e := guardEnv(t, "", envOptions{})
	client := e.sdk(testKey)
	ctx := context.Background()
	user := option.WithHeader("X-Taskgate-User", "frank")
	// Plain: the fake model flags requests containing the trigger word.
	c, err := client.Chat.Completions.New(ctx, chatParams("app.selfflag", "something off-topic please"), user)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Choices[0].Message.Content; strings.Contains(got, "[[") || got != fakeupstream.DefaultContent {
		t.Errorf("client saw %q", got)
	}
	body := string(e.up.Requests()[0].Body)
	if !strings.Contains(body, "Answer questions about our product.") || !strings.Contains(body, "[[off-purpose]]") {
		t.Errorf("instruction not added: %s", body)
	}
	// Streamed: the marker arrives split across events.
	s := client.Chat.Completions.NewStreaming(ctx, chatParams("app.selfflag", "another off-topic thing"), user)
	var text strings.Builder
	for s.Next() {
		if ch := s.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := text.String(); got != fakeupstream.DefaultContent {
		t.Errorf("streamed text %q", got)
	}
	e.settleAll()
	if got := e.metric(`taskgate_flags_total{task="app.selfflag"}`); got != "2" {
		t.Errorf("flags = %q", got)
	}
	// Two flags today reach auto_block_threshold 2: frank is blocked.
	_, err = client.Chat.Completions.New(ctx, chatParams("app.selfflag", "on topic"), user)
	var apierr *openai.Error
	if !errors.As(err, &apierr) || apierr.Code != "blocked" {
		t.Fatalf("after two flags: %v", err)
	}
	var evs eventsJSON
	e.admin("GET", "/admin/events?task=app.selfflag&kind=flag", "", &evs)
	if len(evs.Events) != 2 {
		t.Errorf("flag events: %d", len(evs.Events))
	}
	// An on-topic answer is untouched.
	if _, err := client.Chat.Completions.New(ctx, chatParams("app.selfflag", "on topic"), option.WithHeader("X-Taskgate-User", "grace")); err != nil {
		t.Fatal(err)
	}
}

func TestWatchersToldOncePerThreshold(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		got[p["scope"].(string)+"/"+p["unit"].(string)+"/"+p["period"].(string)+"/"+jsonNum(p["threshold"])]++
		mu.Unlock()
	}))
	defer hook.Close()
	url := redistest.URL(t)
	prefix := redistest.Prefix(t)
	e1 := guardEnv(t, hook.URL, envOptions{redisURL: url, prefix: prefix})
	e2 := guardEnv(t, hook.URL, envOptions{redisURL: url, prefix: prefix})
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			e := e1
			if i%2 == 0 {
				e = e2
			}
			r := e.post("/v1/chat/completions", testKey, `{"model":"app.watched","messages":[{"role":"user","content":"x"}]}`)
			r.Body.Close()
			if r.StatusCode == 200 {
				ok.Add(1)
			}
		}(i)
	}
	wg.Wait()
	e1.settleAll()
	e2.settleAll()
	if ok.Load() != 10 {
		t.Fatalf("served %d", ok.Load())
	}
	waitFor(t, "two threshold posts", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["task/requests/day/0.5"] == 1 && got["task/requests/day/1"] == 1
	})
	time.Sleep(200 * time.Millisecond) // would a duplicate arrive?
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got["task/requests/day/0.5"] != 1 || got["task/requests/day/1"] != 1 {
		t.Errorf("posts: %v", got)
	}
}

func jsonNum(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDeadWebhookDoesNotSlowCalls(t *testing.T) {
	hang := make(chan struct{})
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hang }))
	defer dead.Close()
	defer close(hang)
	e := guardEnv(t, dead.URL, envOptions{})
	// The watched task crosses 0.5 at its 5th call and 1.0 at its 10th.
	var slowest time.Duration
	for i := 0; i < 10; i++ {
		start := time.Now()
		r := e.post("/v1/chat/completions", testKey, `{"model":"app.watched","messages":[{"role":"user","content":"x"}]}`)
		r.Body.Close()
		if d := time.Since(start); d > slowest {
			slowest = d
		}
	}
	if slowest > time.Second {
		t.Errorf("a call took %v while the webhook hangs", slowest)
	}
}

// TestBlockReachesABusyUserOnAnotherReplicaAtOnce: a user busy enough to be
// served from leases on one replica, whose blocks that replica reads from
// its mirror, is blocked on the very next call after another replica's
// admin API blocked them, and served again on the next call after the
// unblock.
func TestBlockReachesABusyUserOnAnotherReplicaAtOnce(t *testing.T) {
	url, prefix := redistest.URL(t), redistest.Prefix(t)
	e := newEnv(t, limitedConfig, envOptions{redisURL: url, prefix: prefix})
	e2 := newEnv(t, limitedConfig, envOptions{redisURL: url, prefix: prefix})
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	client := e.sdk(testKey, option.WithHTTPClient(&http.Client{Transport: tr}))
	user := option.WithHeader("X-Taskgate-User", "hot")
	call := func() error {
		_, err := client.Chat.Completions.New(context.Background(), chatParams("app.accounting", "hi"), user)
		return err
	}
	busy := func() {
		t.Helper()
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 10; i++ {
					if err := call(); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
	}
	busy()
	rs := e.store.(*limits.RedisStore)
	waitFor(t, "the blocks mirror", func() bool { busy(); return rs.MirrorReady() })

	busy()
	if st := e2.admin("POST", "/admin/blocks", `{"user":"hot","group":"*","reason":"runaway loop"}`, nil); st != 201 {
		t.Fatalf("POST block: %d", st)
	}
	var apierr *openai.Error
	if err := call(); !errors.As(err, &apierr) || apierr.StatusCode != 403 || apierr.Code != "blocked" {
		t.Fatalf("the call after the block: %v", err)
	}
	if st := e2.admin("DELETE", "/admin/blocks?user=hot&group=*", "", nil); st != 204 {
		t.Fatalf("DELETE block: %d", st)
	}
	if err := call(); err != nil {
		t.Fatalf("the call after the unblock: %v", err)
	}
	e.settleAll()
	e2.settleAll()
}
