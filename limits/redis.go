package limits

import (
	"context"
	"crypto/tls"
	_ "embed"
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"taskgate/config"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed common.lua
	commonLua string
	//go:embed reserve.lua
	reserveLua string
	//go:embed settle.lua
	settleLua string
	//go:embed apply.lua
	applyLua string

	reserveScript = newLuaScript(commonLua + reserveLua)
	settleScript  = newLuaScript(commonLua + settleLua)
	applyScript   = newLuaScript(commonLua + applyLua)
)

// RedisOptions configures a RedisStore.
type RedisOptions struct {
	// URL is redis://[user:pass@]host:port/db, rediss://… (TLS),
	// redis-sentinel://[user:pass@]h1:26379,h2:26379/master?db=0 or
	// redis-cluster://[user:pass@]h1:6379,h2:6379.
	URL string
	// Prefix begins every key, e.g. "taskgate:".
	Prefix string
	// Timeout bounds each command's read and write (default 250ms).
	Timeout time.Duration
}

// RedisStore is a Store in Redis (plain, Sentinel or Cluster). Every key of
// one task carries the task as a hash tag, so one call's keys share a
// Cluster slot; the blocks hash is the exception (see doc.go). Concurrent
// reserve and settle scripts are coalesced into pipelines (scriptBatcher).
type RedisStore struct {
	c       redis.UniversalClient
	prefix  string
	blocksK string // prefix + "blocks"
	cluster bool
	trips   atomic.Int64
	// reserves, settles and checks coalesce concurrent scripts (and the
	// leased calls' block reads) into pipelines.
	reserves, settles, checks *scriptBatcher
	// mirror answers leased calls' checks without a round trip (nil with
	// Redis Cluster).
	mirror *blocksMirror
}

// reserveBatches and settleBatches are how many reserve and settle round
// trips may be in flight at once; calls that find that many wait and go
// out together in the next. A batch holds at most maxBatch scripts, so
// that one pipeline stays well within the read timeout (a script runs in
// tens of microseconds).
const (
	reserveBatches = 2
	settleBatches  = 2
	maxBatch       = 64
)

var _ Store = (*RedisStore)(nil)

// NewRedisStore connects lazily to the Redis named by o.URL; it fails only
// on a URL it cannot read.
func NewRedisStore(o RedisOptions) (*RedisStore, error) {
	if o.Timeout <= 0 {
		o.Timeout = 250 * time.Millisecond
	}
	c, cluster, err := newRedisClient(o)
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	s := &RedisStore{c: c, prefix: o.Prefix, blocksK: o.Prefix + "blocks", cluster: cluster, settles: newScriptBatcher(c, settleBatches, maxBatch)}
	s.reserves = newScriptBatcher(c, reserveBatches, maxBatch)
	s.checks = newScriptBatcher(c, reserveBatches, maxBatch)
	c.AddHook(tripHook{&s.trips})
	if !cluster {
		s.mirror = newBlocksMirror(s)
	}
	return s, nil
}

// newRedisClient builds the client the URL's scheme calls for, with short
// timeouts and no automatic retries (a retried script could count twice).
func newRedisClient(o RedisOptions) (redis.UniversalClient, bool, error) {
	u, err := url.Parse(o.URL)
	scheme := ""
	if err == nil {
		scheme = u.Scheme
	} else if i := strings.Index(o.URL, "://"); i > 0 {
		scheme = o.URL[:i]
	}
	dial := 4 * o.Timeout
	if dial < time.Second {
		dial = time.Second
	}
	// Calls wait on the store while upstream calls and streams are in
	// flight, so the pool is sized for concurrency, not for CPUs.
	pool := 64 * runtime.GOMAXPROCS(0)
	// RESP2: taskgate needs no push notifications (its one subscription,
	// the blocks mirror's, has a connection of its own), and with RESP3
	// go-redis looks for them before every reply.
	const resp = 2
	switch scheme {
	case "redis", "rediss", "unix":
		opt, err := redis.ParseURL(o.URL)
		if err != nil {
			return nil, false, fmt.Errorf("parse %s URL: %w", scheme, err)
		}
		opt.ReadTimeout, opt.WriteTimeout, opt.DialTimeout = o.Timeout, o.Timeout, dial
		opt.Protocol = resp
		opt.MaxRetries = -1
		opt.DialerRetries, opt.DialerRetryTimeout = 1, 10*time.Millisecond
		opt.ContextTimeoutEnabled = true
		if opt.PoolSize == 0 {
			opt.PoolSize = pool
		}
		if opt.MinIdleConns == 0 {
			opt.MinIdleConns = 4
		}
		opt.PoolTimeout = dial
		return redis.NewClient(opt), false, nil
	case "redis-sentinel", "redis-cluster":
		// One parser for the multi-host forms: the one config validated with.
		t, err := config.ParseRedisURL(o.URL)
		if err != nil {
			return nil, false, fmt.Errorf("store URL: %w", err)
		}
		var tlsConf *tls.Config
		if t.TLS {
			tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if t.Mode == config.RedisSentinel {
			return redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName:       t.MasterName,
				SentinelAddrs:    t.Addrs,
				Username:         t.Username,
				Password:         t.Password,
				SentinelUsername: t.SentinelUsername,
				SentinelPassword: t.SentinelPassword,
				DB:               t.DB,
				DialTimeout:      dial,
				ReadTimeout:      o.Timeout,
				WriteTimeout:     o.Timeout,
				PoolTimeout:      dial,
				PoolSize:         pool,
				MaxRetries:       -1,
				DialerRetries:    1,
				TLSConfig:        tlsConf,
				Protocol:         resp,

				ContextTimeoutEnabled: true,
			}), false, nil
		}
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:         t.Addrs,
			Username:      t.Username,
			Password:      t.Password,
			DialTimeout:   dial,
			ReadTimeout:   o.Timeout,
			WriteTimeout:  o.Timeout,
			PoolTimeout:   dial,
			PoolSize:      pool,
			MaxRetries:    -1,
			DialerRetries: 1,
			TLSConfig:     tlsConf,
			Protocol:      resp,

			ContextTimeoutEnabled: true,
		}), true, nil
	}
	return nil, false, fmt.Errorf("store URL %q: scheme must be redis, rediss, redis-sentinel or redis-cluster", redactURL(o.URL))
}

// redactURL hides a password in a URL shown in an error.
func redactURL(raw string) string {
	i := strings.Index(raw, "://")
	at := strings.LastIndexByte(raw, '@')
	if i < 0 || at < i {
		return raw
	}
	return raw[:i+3] + "xxx@" + raw[at+1:]
}

// tripHook counts commands and pipelines sent.
type tripHook struct{ n *atomic.Int64 }

func (h tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// RoundTrips is the number of commands, pipelines and scripts sent so far
// (a script retried as EVAL after NOSCRIPT counts twice; a pipeline of
// coalesced scripts counts once).
func (s *RedisStore) RoundTrips() int64 { return s.trips.Load() }

// Client is the underlying go-redis client (for tests and diagnostics).
func (s *RedisStore) Client() redis.UniversalClient { return s.c }

// Ping reports whether Redis answers.
func (s *RedisStore) Ping(ctx context.Context) error {
	if err := s.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w", err)
	}
	return nil
}

// Close stops the blocks mirror and closes the client's connections.
func (s *RedisStore) Close() error {
	if s.mirror != nil {
		s.mirror.close()
	}
	return s.c.Close()
}

func (s *RedisStore) base(task string) string { return s.prefix + "{" + task + "}:" }

func (s *RedisStore) blocksKey() string { return s.blocksK }

func (s *RedisStore) reserve(ctx context.Context, op *reserveOp) (reserveReply, error) {
	base := s.base(op.task)
	blocksInScript := !s.cluster && !op.peek
	if !blocksInScript && !op.peek && op.user != "" {
		// The blocks hash lives in a slot of its own: read it first.
		vals, err := s.c.HMGet(ctx, s.blocksKey(), blockField(op.group, op.user), blockField("*", op.user)).Result()
		if err != nil {
			return reserveReply{}, fmt.Errorf("read blocks: %w", err)
		}
		for _, v := range vals {
			if str, ok := v.(string); ok {
				if b, ok := parseBlockValue(str); ok && (b.exp == 0 || b.exp > op.now) {
					return reserveReply{status: statusBlocked, block: b.json}, nil
				}
			}
		}
	}
	c := newScriptCmd(reserveScript, 23+2*len(op.limits))
	c.key(base + "ov")
	if blocksInScript {
		c.key(s.blocksKey())
	}
	mode := "r"
	switch {
	case op.peek:
		mode = "p"
	case op.lease:
		mode = "l"
	}
	c.str(base)
	c.str(op.user)
	c.bool(op.userLimits)
	c.num(op.now)
	c.num(op.leaseUntil)
	c.str(op.holdID)
	c.num(op.tokens)
	c.num(op.money)
	c.str(blockField(op.group, op.user))
	c.bool(op.cph)
	c.str(mode)
	for _, st := range op.stamps {
		c.str(st)
	}
	for _, t := range op.ttls {
		c.num(t)
	}
	c.num(op.requests)
	c.num(int64(len(op.limits)))
	for _, l := range op.limits {
		c.num(int64(l.idx + 1))
		c.num(l.value)
	}
	reply, err := s.reserves.run(ctx, c)
	if err != nil {
		return reserveReply{}, fmt.Errorf("reserve script: %w", err)
	}
	res, ok := reply.([]any)
	if !ok {
		return reserveReply{}, fmt.Errorf("reserve script: reply is a %T, not an array", reply)
	}
	return parseReserveReply(res)
}

func parseReserveReply(res []any) (reserveReply, error) {
	var rep reserveReply
	if len(res) < 2 {
		return rep, fmt.Errorf("reserve script: short reply (%d values)", len(res))
	}
	st, _ := res[0].(int64)
	rep.status = int(st)
	if rep.status == statusBlocked {
		js, _ := res[1].(string)
		rep.block = []byte(js)
		return rep, nil
	}
	rep.calls, _ = res[1].(int64)
	rest := res[2:]
	if len(rest)%6 != 0 {
		return rep, fmt.Errorf("reserve script: reply of %d values", len(res))
	}
	rep.windows = make([]winState, 0, len(rest)/6)
	for i := 0; i < len(rest); i += 6 {
		idx, _ := rest[i].(int64)
		if idx < 1 || idx > nWindows {
			return rep, fmt.Errorf("reserve script: window index %d", idx)
		}
		w := winState{idx: int(idx) - 1}
		w.limit, _ = rest[i+1].(int64)
		w.used, _ = rest[i+2].(int64)
		w.reserved, _ = rest[i+3].(int64)
		o, _ := rest[i+4].(int64)
		w.override = o == 1
		w.leased, _ = rest[i+5].(int64)
		rep.windows = append(rep.windows, w)
	}
	return rep, nil
}

func (s *RedisStore) settle(ctx context.Context, op *settleOp) (settleReply, error) {
	base := s.base(op.task)
	c := newScriptCmd(settleScript, 15+4*len(op.wins)+len(op.thresholds))
	c.key(base + "holds")
	c.str(base)
	c.str(op.user)
	c.str(op.holdID)
	c.num(op.resTokens)
	c.num(op.resMoney)
	c.num(op.actTokens)
	c.num(op.actMoney)
	c.num(int64(len(op.wins)))
	c.num(int64(len(op.thresholds)))
	c.str(op.flagKey)
	c.num(op.flagTTL)
	c.num(op.resRequests)
	c.num(op.actRequests)
	c.bool(op.lease)
	for _, w := range op.wins {
		c.num(int64(w.idx + 1))
		c.str(w.stamp)
		c.num(w.ttl)
		c.num(w.limit)
	}
	for _, t := range op.thresholds {
		c.str(formatThreshold(t))
	}
	c.pushLog(base+logSignals, op.events)
	c.pushLog(base+logCalls, op.calls)
	reply, err := s.settles.run(ctx, c)
	if err != nil {
		return settleReply{}, fmt.Errorf("settle script: %w", err)
	}
	res, ok := reply.([]any)
	if !ok {
		return settleReply{}, fmt.Errorf("settle script: reply is a %T, not an array", reply)
	}
	var rep settleReply
	if len(res) < 2 || (len(res)-2)%3 != 0 {
		return rep, fmt.Errorf("settle script: reply of %d values", len(res))
	}
	f, _ := res[0].(int64)
	rep.found = f == 1
	rep.flags, _ = res[1].(int64)
	for i := 2; i < len(res); i += 3 {
		w, _ := res[i].(int64)
		t, _ := res[i+1].(int64)
		u, _ := res[i+2].(int64)
		if w < 1 || int(w) > len(op.wins) || t < 1 || int(t) > len(op.thresholds) {
			return rep, fmt.Errorf("settle script: crossing %d/%d out of range", w, t)
		}
		rep.crossings = append(rep.crossings, crossingRaw{win: int(w) - 1, threshold: int(t) - 1, used: u})
	}
	return rep, nil
}

func (s *RedisStore) overrides(ctx context.Context, task string) (map[int]int64, error) {
	m, err := s.c.HGetAll(ctx, s.base(task)+"ov").Result()
	if err != nil {
		return nil, fmt.Errorf("read overrides of %s: %w", task, err)
	}
	out := make(map[int]int64, len(m))
	for k, v := range m {
		idx, ok := idIndex[k]
		n, err := strconv.ParseInt(v, 10, 64)
		if ok && err == nil {
			out[idx] = n
		}
	}
	return out, nil
}

func (s *RedisStore) setOverrides(ctx context.Context, task string, vals map[int]int64) error {
	if len(vals) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(vals))
	for idx, v := range vals {
		args = append(args, winIDs[idx], v)
	}
	if err := s.c.HSet(ctx, s.base(task)+"ov", args...).Err(); err != nil {
		return fmt.Errorf("set overrides of %s: %w", task, err)
	}
	return s.bumpVersion(ctx, task)
}

func (s *RedisStore) clearOverrides(ctx context.Context, task string) error {
	if err := s.c.Del(ctx, s.base(task)+"ov").Err(); err != nil {
		return fmt.Errorf("clear overrides of %s: %w", task, err)
	}
	return s.bumpVersion(ctx, task)
}

// bumpVersion counts a change to a task's overrides, after the change is
// written (the two keys may live on different Cluster nodes), so that a
// replica that reads the new version reads the new overrides too and its
// leases granted under the old ones stop admitting calls.
func (s *RedisStore) bumpVersion(ctx context.Context, task string) error {
	f := versionField(task)
	if err := s.changeBlocks(ctx, f, func(p redis.Pipeliner) { p.HIncrBy(ctx, s.blocksKey(), f, 1) }); err != nil {
		return fmt.Errorf("count the change to the overrides of %s: %w", task, err)
	}
	return nil
}

// check answers from the blocks mirror when it is ready, or reads, in one
// command, the blocks of op's user and the version of its task's overrides.
func (s *RedisStore) check(ctx context.Context, op checkOp) (checkReply, error) {
	if s.mirror != nil {
		if rep, ok := s.mirror.check(&op); ok {
			return rep, nil
		}
	}
	fields := op.checkFields()
	n := len(fields)
	c := newPlainCmd("hmget", 1+n)
	c.str(s.blocksKey())
	for _, f := range fields {
		c.str(f)
	}
	reply, err := s.checks.run(ctx, c)
	if err != nil {
		return checkReply{}, fmt.Errorf("read blocks: %w", err)
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) != n {
		return checkReply{}, fmt.Errorf("read blocks: reply is a %T of %d", reply, len(vals))
	}
	var rep checkReply
	if v, ok := vals[0].(string); ok {
		rep.version, _ = strconv.ParseInt(v, 10, 64)
	}
	for _, v := range vals[1:] {
		if str, ok := v.(string); ok {
			if b, ok := parseBlockValue(str); ok && (b.exp == 0 || b.exp > op.now) {
				rep.block = b.json
				break
			}
		}
	}
	return rep, nil
}

func (s *RedisStore) putBlock(ctx context.Context, b Block, evTask string, ev []byte) error {
	js, exp, err := marshalBlock(b)
	if err != nil {
		return err
	}
	f := blockField(b.Group, b.User)
	err = s.changeBlocks(ctx, f, func(p redis.Pipeliner) {
		p.HSet(ctx, s.blocksKey(), f, encodeBlockValue(exp, js))
		if ev != nil {
			ek := s.base(evTask) + logSignals
			p.LPush(ctx, ek, ev)
			p.LTrim(ctx, ek, 0, eventCap-1)
		}
	})
	if err != nil {
		return fmt.Errorf("put block: %w", err)
	}
	return nil
}

func (s *RedisStore) deleteBlock(ctx context.Context, user, group string) (bool, error) {
	f := blockField(group, user)
	var del *redis.IntCmd
	if err := s.changeBlocks(ctx, f, func(p redis.Pipeliner) { del = p.HDel(ctx, s.blocksKey(), f) }); err != nil {
		return false, fmt.Errorf("delete block: %w", err)
	}
	return del.Val() == 1, nil
}

func (s *RedisStore) blocks(ctx context.Context) ([]storedBlock, error) {
	m, err := s.c.HGetAll(ctx, s.blocksKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("read blocks: %w", err)
	}
	out := make([]storedBlock, 0, len(m))
	for _, v := range m {
		if b, ok := parseBlockValue(v); ok {
			out = append(out, b)
		}
	}
	return out, nil
}

func parseBlockValue(v string) (storedBlock, bool) {
	exp, js, ok := strings.Cut(v, "|")
	if !ok {
		return storedBlock{}, false
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return storedBlock{}, false
	}
	return storedBlock{exp: n, json: []byte(js)}, true
}

func (s *RedisStore) addEvents(ctx context.Context, task, log string, evs [][]byte) error {
	if len(evs) == 0 {
		return nil
	}
	ek := s.base(task) + log
	vals := make([]any, len(evs))
	for i, e := range evs {
		vals[i] = e
	}
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, ek, vals...)
		p.LTrim(ctx, ek, 0, eventCap-1)
		return nil
	})
	if err != nil {
		return fmt.Errorf("append events of %s: %w", task, err)
	}
	return nil
}

func (s *RedisStore) events(ctx context.Context, task, log string) ([][]byte, error) {
	l, err := s.c.LRange(ctx, s.base(task)+log, 0, eventCap-1).Result()
	if err != nil {
		return nil, fmt.Errorf("read events of %s: %w", task, err)
	}
	out := make([][]byte, len(l))
	for i, e := range l {
		out[i] = []byte(e)
	}
	return out, nil
}

func (s *RedisStore) apply(ctx context.Context, task string, now int64, ds []delta, evs [][]byte, holds []string) error {
	base := s.base(task)
	type counter struct {
		key         string
		amount, ttl int64
	}
	cs := make([]counter, 0, len(ds))
	for _, d := range ds {
		ttl := d.expire.UnixMilli() - now
		if ttl <= 0 || d.amount == 0 {
			continue
		}
		cs = append(cs, counter{windowKey(base, d.user, d.idx, d.stamp), d.amount, ttl})
	}
	if len(cs) == 0 && len(evs) == 0 && len(holds) == 0 {
		return nil
	}
	c := newScriptCmd(applyScript, 7+3*len(cs)+len(evs)+len(holds))
	c.key(base + logSignals)
	c.key(base + logCalls)
	c.num(int64(len(cs)))
	c.num(int64(len(evs)))
	c.num(eventCap)
	c.num(int64(len(holds)))
	c.str(base)
	for _, x := range cs {
		c.str(x.key)
		c.num(x.amount)
		c.num(x.ttl)
	}
	for _, e := range evs {
		c.bytes(e)
	}
	for _, id := range holds {
		c.str(id)
	}
	if _, err := runScript(ctx, s.c, c); err != nil {
		return fmt.Errorf("apply counts of %s: %w", task, err)
	}
	return nil
}
