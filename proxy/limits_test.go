package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"taskgate/config"
	"taskgate/internal/fakeupstream"
	"taskgate/internal/redistest"
	"taskgate/limits"
)

const limitedConfig = baseConfig + `
  - key: app.limited
    endpoints: [primary]
    typical_tokens: [50, 20]
    limits:
      task: {requests: {day: 3}}
  - key: app.peruser
    endpoints: [primary]
    typical_tokens: [50, 20]
    limits:
      user: {requests: {hour: 2}}
  - key: app.money
    endpoints: [primary]
    limits:
      task: {money: {day: "0.001000"}}
  - key: app.concurrent
    endpoints: [primary]
    typical_tokens: [10, 10]
    limits:
      task: {requests: {day: 10}}
  - key: app.accounting
    endpoints: [primary]
    typical_tokens: [50, 20]
    limits:
      task: {requests: {day: 1000}, tokens: {day: 10000000}, money: {day: "100.00"}}
      user: {tokens: {day: 1000000}}
`

type usageJSON struct {
	Task    string `json:"task"`
	Windows []struct {
		Scope    string `json:"scope"`
		Unit     string `json:"unit"`
		Period   string `json:"period"`
		Used     any    `json:"used"`
		Reserved any    `json:"reserved"`
		Limit    any    `json:"limit"`
		Reset    string `json:"reset"`
	} `json:"windows"`
}

// window finds one window of a usage answer and renders used/reserved as text.
func (u usageJSON) window(scope, unit, period string) (used, reserved string, ok bool) {
	for _, w := range u.Windows {
		if w.Scope == scope && w.Unit == unit && w.Period == period {
			return amountText(w.Used), amountText(w.Reserved), true
		}
	}
	return "", "", false
}

// amountText renders a decoded JSON amount: integers in full (a float64
// from JSON would otherwise print as 1.365836e+06), money strings as they are.
func amountText(v any) string {
	if f, ok := v.(float64); ok {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

func (e *env) settleAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.srv.Wait(ctx); err != nil {
		e.t.Fatalf("settlements did not finish: %v", err)
	}
}

func TestFourthCallOnLimitOfThree(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			o := envOptions{}
			if store == "redis" {
				o.redisURL = redistest.URL(t)
			}
			e := newEnv(t, limitedConfig, o)
			client := e.sdk(testKey)
			for i := 0; i < 3; i++ {
				var resp *http.Response
				if _, err := client.Chat.Completions.New(context.Background(), chatParams("app.limited", "hi"), option.WithResponseInto(&resp)); err != nil {
					t.Fatalf("call %d: %v", i+1, err)
				}
				if got, want := resp.Header.Get("x-ratelimit-remaining-requests"), strconv.Itoa(2-i); got != want {
					t.Errorf("call %d: remaining %q, want %s", i+1, got, want)
				}
				if resp.Header.Get("x-ratelimit-limit-requests") != "3" || resp.Header.Get("x-ratelimit-reset-requests") == "" {
					t.Errorf("call %d: ratelimit headers %v", i+1, resp.Header)
				}
			}
			_, err := client.Chat.Completions.New(context.Background(), chatParams("app.limited", "hi"))
			var apierr *openai.Error
			if !errors.As(err, &apierr) {
				t.Fatalf("4th call: %v", err)
			}
			if apierr.StatusCode != 429 || apierr.Code != "limit_exceeded" {
				t.Fatalf("4th call: %d %s", apierr.StatusCode, apierr.Code)
			}
			h := apierr.Response.Header
			ra, _ := strconv.Atoi(h.Get("retry-after"))
			ms, _ := strconv.Atoi(h.Get("retry-after-ms"))
			if ra <= 0 || ms <= 0 || ra*1000 < ms {
				t.Errorf("retry-after %q, retry-after-ms %q", h.Get("retry-after"), h.Get("retry-after-ms"))
			}
			if ms > 60_000 && h.Get("x-should-retry") != "false" {
				t.Error("a day window refusal must carry x-should-retry: false")
			}
			if h.Get("x-ratelimit-remaining-requests") != "0" {
				t.Errorf("remaining on refusal: %q", h.Get("x-ratelimit-remaining-requests"))
			}
			for _, word := range []string{"task", "requests", "day", "3"} {
				if !strings.Contains(apierr.Message, word) {
					t.Errorf("message %q does not name %q", apierr.Message, word)
				}
			}
			if n := e.up.Count(); n != 3 {
				t.Errorf("upstream saw %d calls", n)
			}
		})
	}
}

func TestUserLimitsByEachWayOfNaming(t *testing.T) {
	e := newEnv(t, limitedConfig, envOptions{redisURL: redistest.URL(t)})
	client := e.sdk(testKey)
	ctx := context.Background()
	ways := []struct {
		name string
		call func(user string) error
	}{
		{"user field", func(u string) error {
			p := chatParams("app.peruser", "hi")
			p.User = openai.String(u)
			_, err := client.Chat.Completions.New(ctx, p)
			return err
		}},
		{"safety_identifier", func(u string) error {
			p := chatParams("app.peruser", "hi")
			p.SafetyIdentifier = openai.String(u)
			p.User = openai.String("ignored-" + u)
			_, err := client.Chat.Completions.New(ctx, p)
			return err
		}},
		{"X-Taskgate-User", func(u string) error {
			_, err := client.Chat.Completions.New(ctx, chatParams("app.peruser", "hi"), option.WithHeader("X-Taskgate-User", u))
			return err
		}},
	}
	for _, w := range ways {
		t.Run(w.name, func(t *testing.T) {
			a, b := "a-"+w.name, "b-"+w.name
			for i := 0; i < 2; i++ {
				if err := w.call(a); err != nil {
					t.Fatalf("user A call %d: %v", i+1, err)
				}
			}
			var apierr *openai.Error
			if err := w.call(a); !errors.As(err, &apierr) || apierr.StatusCode != 429 {
				t.Fatalf("user A 3rd call: %v", err)
			}
			if !strings.Contains(apierr.Message, "user") {
				t.Errorf("message does not name the user scope: %s", apierr.Message)
			}
			if err := w.call(b); err != nil {
				t.Fatalf("user B refused while A is exhausted: %v", err)
			}
		})
	}
}

func TestFixedUserKeyCannotEscape(t *testing.T) {
	cfg := limitedConfig + `
keys:
  - name: fixed
    secret: sk-fixed
    tasks: [app.peruser]
    user: fixed-person
`
	e := newEnv(t, cfg, envOptions{})
	client := e.sdk("sk-fixed")
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := client.Chat.Completions.New(ctx, chatParams("app.peruser", "hi")); err != nil {
			t.Fatal(err)
		}
	}
	p := chatParams("app.peruser", "hi")
	p.User = openai.String("someone-else")
	_, err := client.Chat.Completions.New(ctx, p, option.WithHeader("X-Taskgate-User", "another"))
	var apierr *openai.Error
	if !errors.As(err, &apierr) || apierr.StatusCode != 429 {
		t.Fatalf("fixed-user key escaped its user: %v", err)
	}
}

func TestConcurrentCallsExactlyN(t *testing.T) {
	url := redistest.URL(t)
	prefix := redistest.Prefix(t)
	// Two gateways (replicas) sharing one Redis, each its own client.
	e1 := newEnv(t, limitedConfig, envOptions{redisURL: url, prefix: prefix})
	e2 := newEnv(t, limitedConfig, envOptions{redisURL: url, prefix: prefix})
	const m = 60
	var ok, refused, other atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < m; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			e := e1
			if i%2 == 1 {
				e = e2
			}
			<-start
			resp := e.post("/v1/chat/completions", testKey, `{"model":"app.concurrent","messages":[{"role":"user","content":"x"}]}`)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				ok.Add(1)
			case 429:
				refused.Add(1)
			default:
				other.Add(1)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	if ok.Load() != 10 || refused.Load() != m-10 || other.Load() != 0 {
		t.Fatalf("ok %d, refused %d, other %d; want exactly 10 served", ok.Load(), refused.Load(), other.Load())
	}
	if got := e1.up.Count() + e2.up.Count(); got != 10 {
		t.Errorf("upstreams saw %d calls", got)
	}
}

func TestMoneyLimitNeverPassedUnderConcurrency(t *testing.T) {
	e := newEnv(t, limitedConfig, envOptions{redisURL: redistest.URL(t)})
	// Each call reports 5 in, 100 out: 5×0.15 + 100×0.60 = 60.75 → 61
	// micro-dollars; the estimate (counted prompt, max_tokens 100) is not
	// below that, so the limit of 1000 micro-dollars must hold.
	e.up.SetDefault(fakeupstream.Behavior{Usage: &fakeupstream.Usage{PromptTokens: 5, CompletionTokens: 100}})
	var wg sync.WaitGroup
	var served atomic.Int64
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := e.post("/v1/chat/completions", testKey, `{"model":"app.money","max_tokens":100,"messages":[{"role":"user","content":"x"}]}`)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				served.Add(1)
			}
		}()
	}
	wg.Wait()
	e.settleAll()
	var u usageJSON
	e.admin("GET", "/admin/usage?task=app.money", "", &u)
	used, reserved, _ := u.window("task", "money", "day")
	micros, err := config.ParseDollars(used)
	if err != nil {
		t.Fatalf("used %q: %v", used, err)
	}
	if micros > 1000 {
		t.Fatalf("money used %s passed the limit 0.001000", used)
	}
	if served.Load() == 0 {
		t.Fatal("no call served")
	}
	if want := served.Load() * 61; micros != want {
		t.Errorf("used %d micros, want %d for %d calls", micros, want, served.Load())
	}
	if reserved != "0.000000" {
		t.Errorf("reserved left: %s", reserved)
	}
}

func TestAccountingEqualsUpstreamUsage(t *testing.T) {
	e := newEnv(t, limitedConfig, envOptions{redisURL: redistest.URL(t)})
	ctx := context.Background()
	client := e.sdk(testKey)
	user := option.WithHeader("X-Taskgate-User", "acct")
	// Plain calls.
	for i := 0; i < 3; i++ {
		if _, err := client.Chat.Completions.New(ctx, chatParams("app.accounting", "plain call "+strconv.Itoa(i)), user); err != nil {
			t.Fatal(err)
		}
	}
	// Streamed calls, one with usage repeated in every chunk.
	e.up.Push(fakeupstream.Behavior{}, fakeupstream.Behavior{RepeatUsage: true})
	for i := 0; i < 2; i++ {
		s := client.Chat.Completions.NewStreaming(ctx, chatParams("app.accounting", "stream"), user)
		for s.Next() {
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A failed call (upstream 500): refunded.
	e.up.Push(fakeupstream.Behavior{Status: 500})
	if _, err := client.Chat.Completions.New(ctx, chatParams("app.accounting", "fail"), user); err == nil {
		t.Fatal("failed call succeeded")
	}
	// An embeddings call.
	if _, err := client.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "app.accounting", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("embed me")}}, user); err != nil {
		t.Fatal(err)
	}
	e.settleAll()
	total := e.up.UsageTotal()
	var u usageJSON
	if st := e.admin("GET", "/admin/usage?task=app.accounting&user=acct", "", &u); st != 200 {
		t.Fatalf("usage: %d", st)
	}
	used, reserved, _ := u.window("task", "tokens", "day")
	if want := strconv.FormatInt(total.PromptTokens+total.CompletionTokens, 10); used != want {
		t.Errorf("task tokens used %s, upstream reported %s", used, want)
	}
	if reserved != "0" {
		t.Errorf("task tokens reserved %s", reserved)
	}
	uused, _, _ := u.window("user", "tokens", "day")
	if uused != used {
		t.Errorf("user tokens %s != task tokens %s", uused, used)
	}
	reqs, _, _ := u.window("task", "requests", "day")
	if reqs != "7" {
		t.Errorf("requests %s, want 7 (the failed one counts)", reqs)
	}
	money, _, _ := u.window("task", "money", "day")
	// Each call's cost is rounded up on its own; sum per call.
	want := sumCosts(t, e)
	if got, _ := config.ParseDollars(money); got != want {
		t.Errorf("money %s, want %s", money, config.FormatMicros(want))
	}
}

// sumCosts prices each call of the journal independently of the gateway:
// input × $0.15/M + output × $0.60/M (the primary endpoint), rounded up to the
// micro-dollar per call, and checks the journal's own cost agrees.
func sumCosts(t *testing.T, e *env) int64 {
	t.Helper()
	var evs struct {
		Events []limits.Event `json:"events"`
	}
	e.admin("GET", "/admin/events?task=app.accounting&kind=call&limit=100", "", &evs)
	var sum int64
	for _, ev := range evs.Events {
		in, _ := ev.Detail["input_tokens"].(float64)
		out, _ := ev.Detail["output_tokens"].(float64)
		hundredths := int64(in)*15 + int64(out)*60 // of a micro-dollar
		want := (hundredths + 99) / 100
		if got, _ := ev.Detail["cost_micros"].(float64); int64(got) != want {
			t.Errorf("call %s: journal cost %v, want %d for %v in + %v out", ev.RequestID, got, want, in, out)
		}
		sum += want
	}
	if len(evs.Events) != 7 {
		t.Errorf("call events: %d, want 7", len(evs.Events))
	}
	return sum
}

func TestRoundTripsPerCall(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, limitedConfig, envOptions{redisURL: srv.URL()})
	rs := e.store.(*limits.RedisStore)
	// Warm up (script load), then count one plain call.
	resp := e.post("/v1/chat/completions", testKey, `{"model":"app.accounting","messages":[{"role":"user","content":"x"}]}`)
	resp.Body.Close()
	e.settleAll()
	before := rs.RoundTrips()
	resp = e.post("/v1/chat/completions", testKey, `{"model":"app.accounting","messages":[{"role":"user","content":"x"}]}`, "X-Taskgate-User", "rt")
	resp.Body.Close()
	e.settleAll()
	if got := rs.RoundTrips() - before; got != 2 {
		t.Errorf("store round trips for one plain call: %d, want 2 (reserve, settle)", got)
	}
}

// TestBusyUserAccountingThroughLeases: many concurrent calls of one user,
// plain and streamed, through the SDK on a Redis store; the busy user is
// served from leases (fewer than two round trips a call) and the counts
// and the call journal in the store still equal what the upstream reported.
func TestBusyUserAccountingThroughLeases(t *testing.T) {
	srv := redistest.Start(t)
	e := newEnv(t, limitedConfig, envOptions{redisURL: srv.URL()})
	rs := e.store.(*limits.RedisStore)
	// A transport of its own, whose idle connections close before the
	// gateway shuts down (which waits for open connections).
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	client := e.sdk(testKey, option.WithHTTPClient(&http.Client{Transport: tr}))
	user := option.WithHeader("X-Taskgate-User", "busy")
	const workers, each = 16, 15
	scripts0 := scriptsRun(t, rs)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			ctx := context.Background()
			for i := 0; i < each; i++ {
				if (w+i)%3 == 0 {
					s := client.Chat.Completions.NewStreaming(ctx, chatParams("app.accounting", "stream "+strconv.Itoa(i)), user)
					for s.Next() {
					}
					if err := s.Err(); err != nil {
						t.Error(err)
					}
					continue
				}
				if _, err := client.Chat.Completions.New(ctx, chatParams("app.accounting", "plain "+strconv.Itoa(i)), user); err != nil {
					t.Error(err)
				}
			}
		}(w)
	}
	wg.Wait()
	e.settleAll()
	calls := int64(workers * each)
	var u usageJSON
	if st := e.admin("GET", "/admin/usage?task=app.accounting&user=busy", "", &u); st != 200 {
		t.Fatalf("usage: %d", st)
	}
	// Without leases each call runs two scripts (reserve, settle).
	if scripts := scriptsRun(t, rs) - scripts0; scripts > calls/2 {
		t.Errorf("%d scripts run for %d calls: too few calls were served from leases", scripts, calls)
	}
	total := e.up.UsageTotal()
	for _, w := range []struct{ scope, unit, want string }{
		{"task", "tokens", strconv.FormatInt(total.PromptTokens+total.CompletionTokens, 10)},
		{"user", "tokens", strconv.FormatInt(total.PromptTokens+total.CompletionTokens, 10)},
		{"task", "requests", strconv.FormatInt(calls, 10)},
	} {
		used, reserved, _ := u.window(w.scope, w.unit, "day")
		if used != w.want || (reserved != "0" && reserved != "0.000000") {
			t.Errorf("%s %s: used %s reserved %s, want %s and none reserved", w.scope, w.unit, used, reserved, w.want)
		}
	}
	var evs struct {
		Events []limits.Event `json:"events"`
	}
	e.admin("GET", "/admin/events?task=app.accounting&kind=call&limit=1000", "", &evs)
	if int64(len(evs.Events)) != calls {
		t.Errorf("%d call events in the store, want %d", len(evs.Events), calls)
	}
}

// scriptsRun is how many scripts (EVALSHA and EVAL) the Redis server has run.
func scriptsRun(t *testing.T, rs *limits.RedisStore) int64 {
	t.Helper()
	info, err := rs.Client().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				v, _, _ := strings.Cut(rest, ",")
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
	}
	return n
}

func TestOverridesThroughAdmin(t *testing.T) {
	e := newEnv(t, limitedConfig, envOptions{redisURL: redistest.URL(t)})
	if st := e.admin("PUT", "/admin/limits/app.limited", `{"task":{"requests":{"day":1}}}`, nil); st != 200 {
		t.Fatalf("PUT limits: %d", st)
	}
	var lim struct {
		Limits []struct {
			Scope, Unit, Period, Source string
			Limit                       any
		} `json:"limits"`
	}
	e.admin("GET", "/admin/limits/app.limited", "", &lim)
	if len(lim.Limits) != 1 || lim.Limits[0].Source != "override" || fmt.Sprint(lim.Limits[0].Limit) != "1" {
		t.Fatalf("effective limits: %+v", lim.Limits)
	}
	ok := e.post("/v1/chat/completions", testKey, `{"model":"app.limited","messages":[{"role":"user","content":"x"}]}`)
	ok.Body.Close()
	no := e.post("/v1/chat/completions", testKey, `{"model":"app.limited","messages":[{"role":"user","content":"x"}]}`)
	if no.StatusCode != 429 {
		t.Fatalf("second call under override of 1: %d", no.StatusCode)
	}
	no.Body.Close()
	if st := e.admin("DELETE", "/admin/limits/app.limited", "", nil); st != 204 {
		t.Fatalf("DELETE limits: %d", st)
	}
	again := e.post("/v1/chat/completions", testKey, `{"model":"app.limited","messages":[{"role":"user","content":"x"}]}`)
	again.Body.Close()
	if again.StatusCode != 200 {
		t.Fatalf("after clearing override: %d", again.StatusCode)
	}
	// A money limit given as a number is refused with the reason.
	if st := e.admin("PUT", "/admin/limits/app.limited", `{"task":{"money":{"day":20}}}`, nil); st != 400 {
		t.Errorf("money as number: %d", st)
	}
}

func TestUserLimitsOffRefusesUserOverride(t *testing.T) {
	cfg := limitedConfig + `
  - key: app.nouser
    endpoints: [primary]
    user_limits: false
`
	e := newEnv(t, cfg, envOptions{})
	var body apiErr
	if st := e.admin("PUT", "/admin/limits/app.nouser", `{"user":{"requests":{"day":1}}}`, &body); st != 409 || code(body) != "user_limits_off" {
		t.Fatalf("status %d code %s", st, code(body))
	}
}
