package limits

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// blocksMirror keeps this replica's copy of the blocks hash (users' blocks
// and tasks' overrides versions) current through a subscription, so that a
// call served from a lease learns whether its user is blocked and whether
// its task's overrides changed without a round trip.
//
// Every change to the hash is written in one transaction with a message
// naming the changed field (changeBlocks). Each subscribed replica re-reads
// that field, applies it and acknowledges, and the change returns only once
// as many replicas have acknowledged as the message reached (PUBLISH's
// count), so a block or an override still applies to the very next call on
// every replica. A replica's mirror answers only while its subscription is
// up and loaded (ready); otherwise checks read the hash, one round trip as
// before. Redis Cluster has no mirror (a transaction cannot hold the
// publish there).
type blocksMirror struct {
	s       *RedisStore
	channel string // where changes are announced
	acks    string // prefix of the lists that collect a change's acknowledgements
	id      string // this replica's part of change tokens
	seq     atomic.Uint64

	startOnce sync.Once
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	ps        atomic.Pointer[redis.PubSub] // the current subscription

	ready    atomic.Bool // fields is the hash as Redis has it, and kept so
	disabled atomic.Bool // Redis denied the channel (ACL): no mirror, ever
	mu       sync.RWMutex
	fields   map[string]string
}

// Mirror timing: how long a quiet subscription waits before it pings, how
// long a change waits for acknowledgements, how long an acknowledgement
// list lives, and the backoff between subscription attempts.
var (
	mirrorBeat    = time.Second
	mirrorAckWait = 2 * time.Second
)

const (
	mirrorAckTTL     = 30 * time.Second
	mirrorRetryFirst = 50 * time.Millisecond
	mirrorRetryMax   = 2 * time.Second
)

// newBlocksMirror makes the mirror of s's blocks hash; it starts with the
// first check.
func newBlocksMirror(s *RedisStore) *blocksMirror {
	var b [8]byte
	_, _ = rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	return &blocksMirror{
		s: s, channel: s.blocksK + ":changes", acks: s.blocksK + ":acks:", id: hex.EncodeToString(b[:]),
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
}

// check answers op from the mirror; ok is false while the mirror is not
// ready (it is started on the first call).
func (m *blocksMirror) check(op *checkOp) (rep checkReply, ok bool) {
	if !m.ready.Load() {
		if !m.disabled.Load() {
			m.startOnce.Do(func() { go m.run() })
		}
		return rep, false
	}
	fields := op.checkFields()
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.ready.Load() || m.disabled.Load() {
		return rep, false
	}
	if v, ok := m.fields[fields[0]]; ok {
		rep.version, _ = strconv.ParseInt(v, 10, 64)
	}
	for _, f := range fields[1:] {
		if v, ok := m.fields[f]; ok {
			if b, ok := parseBlockValue(v); ok && (b.exp == 0 || b.exp > op.now) {
				rep.block = b.json
				break
			}
		}
	}
	return rep, true
}

// close stops the mirror's subscription.
func (m *blocksMirror) close() {
	m.cancel()
	if ps := m.ps.Load(); ps != nil {
		_ = ps.Close() // ends a wait for the next message at once
	}
	m.startOnce.Do(func() { close(m.done) }) // never started: nothing to wait for
	<-m.done
}

// run follows the changes until the mirror is closed, subscribing again
// (and loading the hash anew) whenever the subscription fails.
func (m *blocksMirror) run() {
	defer close(m.done)
	wait := mirrorRetryFirst
	for m.ctx.Err() == nil && !m.disabled.Load() {
		loaded := m.follow()
		m.ready.Store(false)
		if loaded {
			wait = mirrorRetryFirst
		}
		select {
		case <-m.ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, mirrorRetryMax)
	}
}

// follow subscribes, loads the hash once the subscription is confirmed and
// applies each change announced after it, until an error. A subscription
// quiet for mirrorBeat is pinged; one that does not answer within the next
// mirrorBeat is given up. It reports whether the hash was loaded.
func (m *blocksMirror) follow() (loaded bool) {
	ps := m.s.c.Subscribe(m.ctx, m.channel)
	defer func() { _ = ps.Close() }()
	m.ps.Store(ps)
	if m.ctx.Err() != nil {
		return false
	}
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(m.ctx, mirrorBeat)
		if m.ctx.Err() != nil {
			return loaded
		}
		if err != nil {
			var ne net.Error
			if !pinged && errors.As(err, &ne) && ne.Timeout() {
				if err := ps.Ping(m.ctx); err != nil {
					return loaded
				}
				pinged = true
				continue
			}
			if isNoPerm(err) {
				m.disable("subscribe", err)
			}
			return loaded
		}
		pinged = false
		switch msg := msg.(type) {
		case *redis.Subscription:
			if msg.Kind != "subscribe" || m.disabled.Load() {
				return loaded
			}
			if err := m.load(); err != nil {
				return loaded
			}
			loaded = true
			m.ready.Store(true)
		case *redis.Message:
			if err := m.apply(msg.Payload); err != nil {
				return loaded
			}
		}
	}
}

// load reads the whole hash.
func (m *blocksMirror) load() error {
	all, err := m.s.c.HGetAll(m.ctx, m.s.blocksKey()).Result()
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.fields = all
	m.mu.Unlock()
	return nil
}

// apply reads the field a change names, keeps its value and acknowledges
// the change. A field it cannot read ends the subscription (the hash is
// loaded anew on the next).
func (m *blocksMirror) apply(payload string) error {
	token, field, ok := strings.Cut(payload, "\n")
	if !ok {
		return nil // not a change of ours: nothing to apply or acknowledge
	}
	v, err := m.s.c.HGet(m.ctx, m.s.blocksKey(), field).Result()
	switch {
	case errors.Is(err, redis.Nil):
		m.mu.Lock()
		delete(m.fields, field)
		m.mu.Unlock()
	case err != nil:
		return err
	default:
		m.mu.Lock()
		m.fields[field] = v
		m.mu.Unlock()
	}
	key := m.acks + token
	_, _ = m.s.c.Pipelined(m.ctx, func(p redis.Pipeliner) error {
		p.RPush(m.ctx, key, "1")
		p.PExpire(m.ctx, key, mirrorAckTTL)
		return nil
	})
	return nil
}

// change writes a change of field (write's commands) and announces it in
// one transaction, then waits until every replica it reached applied it.
func (m *blocksMirror) change(ctx context.Context, field string, write func(p redis.Pipeliner)) error {
	token := m.id + ":" + strconv.FormatUint(m.seq.Add(1), 10)
	var pub *redis.IntCmd
	if _, err := m.s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		write(p)
		pub = p.Publish(ctx, m.channel, token+"\n"+field)
		return nil
	}); err != nil {
		if pub == nil || pub.Err() == nil || !isNoPerm(pub.Err()) {
			return err
		}
		// This Redis user may not use the channel, so no replica sharing
		// its credentials can keep a mirror: write without announcing.
		m.disable("publish", pub.Err())
		return m.s.writeBlocks(ctx, write)
	}
	m.awaitAcks(ctx, token, pub.Val())
	return nil
}

// awaitAcks waits, up to mirrorAckWait, for n acknowledgements of token. A
// replica that does not answer in time is left behind with a warning: its
// subscription is then broken, and it serves at most what its current
// leases hold before it must reach Redis again.
func (m *blocksMirror) awaitAcks(ctx context.Context, token string, n int64) {
	if n <= 0 {
		return
	}
	key := m.acks + token
	wctx, cancel := context.WithTimeout(ctx, mirrorAckWait)
	defer cancel()
	var got int64
	for got < n {
		// BLPOP waits whole seconds; the deadline cuts the last one short.
		_, err := m.s.c.BLPop(wctx, time.Second, key).Result()
		if err == nil {
			got++
		} else if !errors.Is(err, redis.Nil) {
			break
		}
	}
	_ = m.s.c.Del(context.WithoutCancel(ctx), key).Err()
	if got < n {
		slog.Warn("limits: a change of blocks or overrides was not confirmed by every replica",
			"replicas", n, "confirmed", got, "waited", mirrorAckWait.String())
	}
}

// disable stops the mirror for good: Redis denied its channel to this
// replica's user (an ACL without channel permissions). Checks then read
// the blocks hash, as with Redis Cluster.
func (m *blocksMirror) disable(what string, err error) {
	if m.disabled.Swap(true) {
		return
	}
	m.ready.Store(false)
	if ps := m.ps.Load(); ps != nil {
		_ = ps.Close() // a subscription of its own may still be up: end it
	}
	slog.Warn("limits: Redis denies the blocks channel to this user, so leased calls read blocks from Redis (grant the user the channel "+m.channel+" to avoid the round trip; every replica must use the same Redis user)",
		"command", what, "error", err.Error())
}

// isNoPerm reports whether err is Redis refusing a command or channel to
// the connection's ACL user.
func isNoPerm(err error) bool { return strings.HasPrefix(err.Error(), "NOPERM") }

// changeBlocks runs write, which changes field of the blocks hash, so that
// every replica's mirror has the change when it returns (see blocksMirror);
// without a mirror it just runs write.
func (s *RedisStore) changeBlocks(ctx context.Context, field string, write func(p redis.Pipeliner)) error {
	if s.mirror == nil || s.mirror.disabled.Load() {
		return s.writeBlocks(ctx, write)
	}
	return s.mirror.change(ctx, field, write)
}

// writeBlocks runs write's commands in one pipeline.
func (s *RedisStore) writeBlocks(ctx context.Context, write func(p redis.Pipeliner)) error {
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		write(p)
		return nil
	})
	return err
}

// MirrorReady reports whether calls served from leases check blocks and
// overrides in this replica's mirror (true) or read them from Redis
// (false: not started, not subscribed, loading, or Redis Cluster). For
// tests and diagnostics.
func (s *RedisStore) MirrorReady() bool { return s.mirror != nil && s.mirror.ready.Load() }
