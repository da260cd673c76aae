package limits

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"taskgate/config"
	"taskgate/internal/redistest"
)

func newRedis(t testing.TB, url string, timeout time.Duration) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(RedisOptions{URL: url, Prefix: redistest.Prefix(t), Timeout: timeout})
	if err != nil {
		t.Fatalf("NewRedisStore: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestRoundTrips(t *testing.T) {
	s := newRedis(t, redistest.URL(t), time.Second)
	l := New(Options{Store: s})
	task := newTask("rt", lim(tS, req, pDay, 100), lim(tS, tok, pMonth, 100000), lim(uS, mo, pHour, 100000))
	task.MaxCallsPerHour = 10
	task.AutoBlockThreshold = 5
	call := Call{Task: task, User: "u", Estimate: Usage{InputTokens: 10, Money: 10}}
	out := Outcome{Actual: Usage{InputTokens: 10, Money: 9}, Flagged: true, Events: []Event{{Kind: "flag"}}}
	mustSettle(t, l, mustReserve(t, l, call).Hold, out) // loads the scripts
	for i := 0; i < 3; i++ {
		n0 := s.RoundTrips()
		d := mustReserve(t, l, call)
		if got := s.RoundTrips() - n0; got != 1 {
			t.Fatalf("Reserve took %d round trips, want 1", got)
		}
		n0 = s.RoundTrips()
		mustSettle(t, l, d.Hold, out)
		if got := s.RoundTrips() - n0; got != 1 {
			t.Fatalf("Settle took %d round trips, want 1", got)
		}
	}
}

func TestRedisKeyLayout(t *testing.T) {
	s := newRedis(t, redistest.URL(t), time.Second)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l := New(Options{Store: s, Now: func() time.Time { return now }})
	task := newTask("warehouse.inventory_photo", lim(tS, tok, pDay, 1000), lim(uS, tok, pDay, 1000), lim(uS, req, pMin, 5))
	d := mustReserve(t, l, Call{Task: task, User: "alice", Estimate: Usage{InputTokens: 7}})
	c := s.Client()
	base := s.prefix + "{warehouse.inventory_photo}:"
	for _, k := range []struct {
		key    string
		maxTTL time.Duration
	}{
		{base + "t:tokens:day:2026-11-30", 12*time.Hour + keyGrace + keyJitter},
		{base + "u:alice:tokens:day:2026-11-30", 12*time.Hour + keyGrace + keyJitter},
		{base + "u:alice:requests:minute:2026-11-30T12:00Z", time.Minute + keyGrace + keyJitter},
	} {
		ttl, err := c.PTTL(bg, k.key).Result()
		if err != nil || ttl <= 0 || ttl > k.maxTTL {
			t.Errorf("%s: TTL %v, %v (want in (0, %v])", k.key, ttl, err, k.maxTTL)
		}
		if tot, _ := c.HGet(bg, k.key, "t").Int64(); tot == 0 {
			t.Errorf("%s: nothing reserved", k.key)
		}
	}
	if n, _ := c.HLen(bg, base+"holds").Result(); n != 1 {
		t.Errorf("holds: %d, want 1", n)
	}
	mustSettle(t, l, d.Hold, Outcome{Actual: Usage{InputTokens: 5}})
	if n, _ := c.Exists(bg, base+"holds", base+"leases").Result(); n != 0 {
		t.Errorf("hold left after settle")
	}
	if h, _ := c.HGetAll(bg, base+"t:tokens:day:2026-11-30").Result(); h["u"] != "5" || h["t"] != "5" || len(h) != 2 {
		t.Errorf("window after settle %v, want u 5 t 5", h)
	}
	// Every key of the task shares one hash slot.
	keys, _ := c.Keys(bg, s.prefix+"*").Result()
	for _, k := range keys {
		if !strings.HasPrefix(k, base) {
			t.Errorf("key %s outside the task's hash tag", k)
		}
	}
}

func TestRedisURLs(t *testing.T) {
	for _, c := range []struct {
		url     string
		cluster bool
		addrs   []string
		err     string
	}{
		{url: "redis://localhost:6379/0"},
		{url: "rediss://user:pw@redis.example:6380/1"},
		{url: "redis-sentinel://h1:26379,h2:26379/mymaster?db=2", addrs: []string{"h1:26379", "h2:26379"}},
		{url: "redis-cluster://u:p%40ss@h1:6379,h2:6379", cluster: true, addrs: []string{"h1:6379", "h2:6379"}},
		{url: "redis-sentinel://h1:26379", err: "names the master"},
		{url: "redis-sentinel://h1:26379/m?db=x", err: "not a database number"},
		{url: "redis-cluster://", err: "empty host"},
		{url: "memcached://secret@h:1", err: "scheme must be"},
		{url: "redis://h:notaport", err: "parse redis URL"},
	} {
		t.Run(c.url, func(t *testing.T) {
			cl, cluster, err := newRedisClient(RedisOptions{URL: c.url, Timeout: time.Second})
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Fatalf("error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if cluster != c.cluster {
				t.Errorf("cluster %v, want %v", cluster, c.cluster)
			}
			if _, ok := cl.(*redis.ClusterClient); ok != c.cluster {
				t.Errorf("client %T", cl)
			}
			if c.addrs != nil {
				m, _ := config.ParseRedisURL(c.url)
				if strings.Join(m.Addrs, ",") != strings.Join(c.addrs, ",") {
					t.Errorf("addrs %v, want %v", m.Addrs, c.addrs)
				}
				if c.cluster && (m.Username != "u" || m.Password != "p@ss") {
					t.Errorf("user %q pass %q", m.Username, m.Password)
				}
			}
		})
	}
}

func TestFailClosed(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedis(t, srv.URL(), 100*time.Millisecond)
	l := New(Options{Store: s, OnError: config.FailClosed})
	task := newTask("fc", lim(tS, req, pDay, 10))
	mustReserve(t, l, Call{Task: task})
	srv.Stop()
	_, err := l.Reserve(bg, Call{Task: task})
	if !errors.Is(err, ErrStoreUnavailable) {
		t.Fatalf("Reserve with Redis down: %v, want ErrStoreUnavailable", err)
	}
	if l.Degraded() {
		t.Fatal("fail_closed limiter degraded")
	}
	if err := l.Ping(bg); err == nil {
		t.Fatal("Ping succeeded with Redis down")
	}
}

func TestFailOpenReconciles(t *testing.T) {
	srv := redistest.Start(t)
	s := newRedis(t, srv.URL(), 100*time.Millisecond)
	l := New(Options{Store: s, OnError: config.FailOpen})
	defer l.Close()
	task := newTask("fo", lim(tS, req, pDay, 1000), lim(tS, tok, pDay, 100000), lim(uS, tok, pDay, 100000))
	call := Call{Task: task, User: "u", Estimate: Usage{InputTokens: 10}}

	before := mustReserve(t, l, call) // held in Redis; settled while it is down
	srv.Stop()
	for i := 0; i < 3; i++ {
		d := mustReserve(t, l, call)
		if d.Hold == nil || !l.Degraded() {
			t.Fatalf("call %d with Redis down: hold %v degraded %v", i, d.Hold != nil, l.Degraded())
		}
		mustSettle(t, l, d.Hold, Outcome{Actual: Usage{InputTokens: 5}, Events: []Event{{Kind: "call"}}})
	}
	open := mustReserve(t, l, call) // made while down, settled after recovery
	mustSettle(t, l, before.Hold, Outcome{Actual: Usage{InputTokens: 100}})

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "recovery", func() bool { return !l.Degraded() })
	mustSettle(t, l, open.Hold, Outcome{Actual: Usage{InputTokens: 7}})
	// The restarted server kept nothing, so Redis holds exactly what was
	// counted while it was down (and settled after).
	waitFor(t, "reconciliation", func() bool {
		us, err := l.Usage(bg, task, "u")
		return err == nil && len(us) == 3 && us[0].Used == 5 && us[1].Used == 3*5+100+7 && us[2].Used == 3*5+100+7
	})
	evs, err := l.Events(bg, EventFilter{Tasks: []string{"fo"}})
	if err != nil || len(evs) != 3 {
		t.Fatalf("events after recovery: %d, %v", len(evs), err)
	}
	if d := mustReserve(t, l, call); d.Hold == nil || l.Degraded() {
		t.Fatal("not serving from Redis after recovery")
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedisWindowGone settles holds whose window keys vanished meanwhile
// (eviction, a manual DEL): only the actual usage is counted, nothing is
// left reserved or below zero, and a key made by the settle has a TTL.
func TestRedisWindowGone(t *testing.T) {
	s := newRedis(t, redistest.URL(t), time.Second)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l := New(Options{Store: s, Now: func() time.Time { return now }})
	task := newTask("gone", lim(tS, tok, pDay, 1000), lim(tS, req, pDay, 100))
	c := s.Client()
	base := s.prefix + "{gone}:"
	tokKey, reqKey := base+"t:tokens:day:2026-11-30", base+"t:requests:day:2026-11-30"
	for _, tc := range []struct {
		name      string
		out       Outcome
		tok       map[string]string // the tokens window after the settle (nil: no key)
		wantCross int
	}{
		{"used", Outcome{Actual: Usage{InputTokens: 7}}, map[string]string{"u": "7", "t": "7"}, 0},
		{"failed", Outcome{Failed: true}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := mustReserve(t, l, Call{Task: task, Estimate: Usage{InputTokens: 10}})
			if err := c.Del(bg, tokKey, reqKey).Err(); err != nil {
				t.Fatal(err)
			}
			mustSettle(t, l, d.Hold, tc.out)
			h, _ := c.HGetAll(bg, tokKey).Result()
			if fmt.Sprint(h) != fmt.Sprint(tc.tok) && !(len(h) == 0 && tc.tok == nil) {
				t.Errorf("tokens window %v, want %v", h, tc.tok)
			}
			if r, _ := c.HGetAll(bg, reqKey).Result(); r["u"] != "1" || r["t"] != "1" {
				t.Errorf("requests window %v, want u 1 t 1", r)
			}
			for _, k := range []string{tokKey, reqKey} {
				if ttl, _ := c.PTTL(bg, k).Result(); ttl == -1 {
					t.Errorf("%s has no TTL", k)
				}
			}
			if err := c.Del(bg, tokKey, reqKey).Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRedisCallsPerHourKey checks the sliding hour's key: one member per
// call plus the TTL marker, which is not counted, and a TTL of more than
// an hour after the newest call.
func TestRedisCallsPerHourKey(t *testing.T) {
	s := newRedis(t, redistest.URL(t), time.Second)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l := New(Options{Store: s})
	task := newTask("cphkey")
	task.MaxCallsPerHour = 10
	k := s.prefix + "{cphkey}:cph:u"
	for i, at := range []time.Duration{0, 30 * time.Minute, 59 * time.Minute, 61 * time.Minute, 125 * time.Minute} {
		d := mustReserve(t, l, Call{Task: task, User: "u", Now: t0.Add(at)})
		want := []int64{1, 2, 3, 3, 1}[i]
		if d.CallsLastHour != want {
			t.Errorf("call at %v: %d calls in the hour, want %d", at, d.CallsLastHour, want)
		}
		n, _ := s.Client().ZCard(bg, k).Result()
		if n != want+1 {
			t.Errorf("call at %v: %d members, want %d and the marker", at, n, want)
		}
		if ttl, _ := s.Client().PTTL(bg, k).Result(); ttl < time.Hour+time.Minute {
			t.Errorf("call at %v: TTL %v", at, ttl)
		}
	}
}
