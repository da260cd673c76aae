package limits

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"taskgate/internal/redistest"
)

// mirrorStores opens n stores (replicas) on one Redis and prefix, each
// with its blocks mirror started and ready.
func mirrorStores(t *testing.T, url, prefix string, n int) []*RedisStore {
	t.Helper()
	ss := make([]*RedisStore, n)
	for i := range ss {
		s, err := NewRedisStore(RedisOptions{URL: url, Prefix: prefix, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		ss[i] = s
		waitMirror(t, s, true)
	}
	return ss
}

// waitMirror starts s's mirror (a check does) and waits until its
// readiness is ready.
func waitMirror(t *testing.T, s *RedisStore, ready bool) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the mirror's readiness to become %v", ready), func() bool {
		_, _ = s.check(bg, checkOp{task: "t", now: time.Now().UnixMilli()})
		return s.mirror.ready.Load() == ready
	})
}

// storeAsACLUser opens a store on a Redis of its own as a user made with
// rules (after "on", a password and "~*").
func storeAsACLUser(t *testing.T, rules ...any) *RedisStore {
	t.Helper()
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	args := append([]any{"acl", "setuser", "tg", "on", ">pw", "~*"}, rules...)
	if err := admin.Do(bg, args...).Err(); err != nil {
		t.Fatal(err)
	}
	s, err := NewRedisStore(RedisOptions{URL: "redis://tg:pw@" + srv.Addr + "/0", Prefix: "tg:", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// checkNow checks op on s and reports whether it took a round trip.
func checkNow(t *testing.T, s *RedisStore, op checkOp) (checkReply, bool) {
	t.Helper()
	op.now = time.Now().UnixMilli()
	n0 := s.RoundTrips()
	rep, err := s.check(bg, op)
	if err != nil {
		t.Fatal(err)
	}
	return rep, s.RoundTrips() != n0
}

// TestMirrorHasEveryChangeWhenItReturns: a block, an unblock or an override
// made on any replica is in every replica's mirror when the call that made
// it returns, and checks read the mirror, not Redis.
func TestMirrorHasEveryChangeWhenItReturns(t *testing.T) {
	ss := mirrorStores(t, redistest.URL(t), redistest.Prefix(t), 3)
	op := checkOp{task: "mirror.task", user: "ann", group: "mirror.group"}
	future := time.Now().Add(time.Hour)
	past := time.Now().Add(-time.Minute)
	steps := []struct {
		name    string
		by      int
		do      func(s *RedisStore) error
		blocked bool
		version int64
	}{
		{"nothing yet", 0, func(*RedisStore) error { return nil }, false, 0},
		{"block in the task's group", 1, func(s *RedisStore) error {
			return s.putBlock(bg, Block{User: "ann", Group: "mirror.group", Reason: "r"}, "", nil)
		}, true, 0},
		{"unblock", 2, func(s *RedisStore) error { _, err := s.deleteBlock(bg, "ann", "mirror.group"); return err }, false, 0},
		{"block everywhere until later", 0, func(s *RedisStore) error {
			return s.putBlock(bg, Block{User: "ann", Group: "*", Reason: "r", Expires: &future}, "mirror.task", []byte(`{}`))
		}, true, 0},
		{"the same block, expired", 2, func(s *RedisStore) error {
			return s.putBlock(bg, Block{User: "ann", Group: "*", Reason: "r", Expires: &past}, "", nil)
		}, false, 0},
		{"another user's block", 1, func(s *RedisStore) error {
			return s.putBlock(bg, Block{User: "bob", Group: "*", Reason: "r"}, "", nil)
		}, false, 0},
		{"overrides set", 1, func(s *RedisStore) error {
			return s.setOverrides(bg, "mirror.task", map[int]int64{idIndex["u:requests:hour"]: 5})
		}, false, 1},
		{"overrides cleared", 0, func(s *RedisStore) error { return s.clearOverrides(bg, "mirror.task") }, false, 2},
		{"another task's overrides", 2, func(s *RedisStore) error { return s.clearOverrides(bg, "other.task") }, false, 2},
	}
	for _, st := range steps {
		if err := st.do(ss[st.by]); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		for i, s := range ss {
			rep, trip := checkNow(t, s, op)
			if trip {
				t.Errorf("%s: replica %d's check took a round trip", st.name, i)
			}
			if (rep.block != nil) != st.blocked || rep.version != st.version {
				t.Errorf("%s: replica %d sees blocked %v, version %d; want %v, %d", st.name, i, rep.block != nil, rep.version, st.blocked, st.version)
			}
		}
	}
}

// TestMirrorFallsBackWhileItsSubscriptionIsDown: with its subscription cut,
// a replica reads the blocks hash per check; subscribed again, it loads
// the hash anew (with what changed meanwhile) and answers from it.
func TestMirrorFallsBackWhileItsSubscriptionIsDown(t *testing.T) {
	srv := redistest.Start(t)
	ss := mirrorStores(t, srv.URL(), "tg:", 2)
	a, b := ss[0], ss[1]
	op := checkOp{task: "mirror.task", user: "ann", group: "mirror.task"}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.Do(bg, "client", "kill", "type", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitMirror(t, b, false)
	if err := a.putBlock(bg, Block{User: "ann", Group: "*", Reason: "r"}, "", nil); err != nil {
		t.Fatal(err)
	}
	if rep, trip := checkNow(t, b, op); rep.block == nil || !trip {
		t.Fatalf("without its subscription: blocked %v, read Redis %v; want true, true", rep.block != nil, trip)
	}
	waitMirror(t, b, true)
	if rep, trip := checkNow(t, b, op); rep.block == nil || trip {
		t.Fatalf("subscribed again: blocked %v, read Redis %v; want true, false", rep.block != nil, trip)
	}
	if _, err := a.deleteBlock(bg, "ann", "*"); err != nil {
		t.Fatal(err)
	}
	if rep, trip := checkNow(t, b, op); rep.block != nil || trip {
		t.Fatalf("after the unblock: blocked %v, read Redis %v; want false, false", rep.block != nil, trip)
	}
}

// TestMirrorChangeWaitsForEveryReplica: a change returns once every
// subscriber acknowledged it; one that never does delays it by
// mirrorAckWait, and the change still holds.
func TestMirrorChangeWaitsForEveryReplica(t *testing.T) {
	url, prefix := redistest.URL(t), redistest.Prefix(t)
	ss := mirrorStores(t, url, prefix, 2)
	old := mirrorAckWait
	mirrorAckWait = 300 * time.Millisecond
	t.Cleanup(func() { mirrorAckWait = old })

	silent := ss[0].c.Subscribe(bg, ss[0].mirror.channel)
	defer silent.Close()
	if _, err := silent.ReceiveTimeout(bg, 5*time.Second); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	start := time.Now()
	if err := ss[0].putBlock(bg, Block{User: "ann", Group: "*", Reason: "r"}, "", nil); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < mirrorAckWait {
		t.Errorf("a change reaching a replica that never acknowledges returned after %v, before the %v wait", took, mirrorAckWait)
	}
	if rep, trip := checkNow(t, ss[1], checkOp{task: "x", user: "ann", group: "x"}); rep.block == nil || trip {
		t.Fatalf("blocked %v, read Redis %v; want true, false", rep.block != nil, trip)
	}
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	msg, err := silent.ReceiveMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := blockField("*", "ann"); len(msg.Payload) < len(want) || msg.Payload[len(msg.Payload)-len(want):] != want {
		t.Fatalf("announced %q, want it to name the field %q", msg.Payload, want)
	}
}

// TestMirrorStopsWithTheStore: Close ends the subscription at once.
func TestMirrorStopsWithTheStore(t *testing.T) {
	s := mirrorStores(t, redistest.URL(t), redistest.Prefix(t), 1)[0]
	done := make(chan struct{})
	go func() {
		_ = s.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(mirrorBeat / 2):
		t.Fatal("Close waited for the subscription's next beat")
	}
	if s.mirror.ready.Load() {
		t.Fatal("a closed store's mirror is still ready")
	}
}

// TestMirrorOffWhenTheUserMayNotUseTheChannel: a Redis user without channel
// permissions (Redis 7's default for new ACL users) still blocks and
// unblocks, every check reads the hash, and the mirror stops trying.
func TestMirrorOffWhenTheUserMayNotUseTheChannel(t *testing.T) {
	s := storeAsACLUser(t, "+@all", "-@pubsub", "resetchannels")
	op := checkOp{task: "t", user: "ann", group: "t"}
	// The change's announcement is refused: the change is made without it.
	if err := s.putBlock(bg, Block{User: "ann", Group: "*", Reason: "r"}, "", nil); err != nil {
		t.Fatal(err)
	}
	if !s.mirror.disabled.Load() {
		t.Fatal("the mirror goes on after its announcement was refused")
	}
	if rep, trip := checkNow(t, s, op); rep.block == nil || !trip {
		t.Fatalf("blocked %v, read Redis %v; want true, true", rep.block != nil, trip)
	}
	if ok, err := s.deleteBlock(bg, "ann", "*"); err != nil || !ok {
		t.Fatalf("delete block: %v %v", ok, err)
	}
	if rep, _ := checkNow(t, s, op); rep.block != nil {
		t.Fatal("still blocked after the unblock")
	}
	if s.MirrorReady() {
		t.Fatal("a mirror without its channel is ready")
	}
}

// TestMirrorGivesUpWhenSubscribingIsRefused: the same, found by the
// subscription before any change.
func TestMirrorGivesUpWhenSubscribingIsRefused(t *testing.T) {
	s := storeAsACLUser(t, "+@all", "resetchannels")
	checkNow(t, s, checkOp{task: "t"}) // starts the mirror
	waitFor(t, "the mirror to give up", func() bool { return s.mirror.disabled.Load() })
	if err := s.putBlock(bg, Block{User: "ann", Group: "*", Reason: "r"}, "", nil); err != nil {
		t.Fatal(err)
	}
	if rep, trip := checkNow(t, s, checkOp{task: "t", user: "ann", group: "t"}); rep.block == nil || !trip {
		t.Fatalf("blocked %v, read Redis %v; want true, true", rep.block != nil, trip)
	}
}
