package limits

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"sync"

	"github.com/redis/go-redis/v9"
)

// luaScript is a Lua script, sent as EVALSHA, or as EVAL (which loads it)
// when the server does not have it.
type luaScript struct {
	src, hash string
}

func newLuaScript(src string) *luaScript {
	h := sha1.Sum([]byte(src))
	return &luaScript{src: src, hash: hex.EncodeToString(h[:])}
}

// scriptCmd builds one script command: EVALSHA, the hash, the key count,
// the keys, then the script's arguments. Strings and numbers are kept in s
// and n and handed to go-redis as pointers (which it writes as their
// values), so that an argument costs no allocation of its own; past the
// arrays' room they are boxed as usual.
type scriptCmd struct {
	script *luaScript
	list   []any
	s      [16]string
	n      [40]int64
	ns, nn int
	// then are plain commands sent right after the script in its round
	// trip (pushLog); their replies are not read, and a script the server
	// lacks goes again as EVAL without them.
	then []*scriptCmd
}

// newScriptCmd starts a command for script; room is a capacity hint for
// keys and arguments.
func newScriptCmd(script *luaScript, room int) *scriptCmd {
	c := &scriptCmd{script: script}
	c.list = make([]any, 3, 3+room)
	c.list[2] = 0
	return c
}

// newPlainCmd starts a plain command (no script), name first; its
// arguments are added with str and num, and it goes through a batcher
// like a script.
func newPlainCmd(name string, room int) *scriptCmd {
	c := &scriptCmd{}
	c.list = make([]any, 1, 1+room)
	c.list[0] = name
	return c
}

// key adds a key; keys come before any argument.
func (c *scriptCmd) key(k string) {
	c.str(k)
	c.list[2] = len(c.list) - 3
}

// str adds a string argument.
func (c *scriptCmd) str(v string) {
	if c.ns == len(c.s) {
		c.list = append(c.list, v)
		return
	}
	c.s[c.ns] = v
	c.list = append(c.list, &c.s[c.ns])
	c.ns++
}

// num adds a number argument.
func (c *scriptCmd) num(v int64) {
	if c.nn == len(c.n) {
		c.list = append(c.list, v)
		return
	}
	c.n[c.nn] = v
	c.list = append(c.list, &c.n[c.nn])
	c.nn++
}

// bool adds "1" or "0".
func (c *scriptCmd) bool(v bool) {
	if v {
		c.list = append(c.list, "1")
	} else {
		c.list = append(c.list, "0")
	}
}

// bytes adds a byte string argument.
func (c *scriptCmd) bytes(b []byte) { c.list = append(c.list, b) }

// pushLog has entries pushed onto the capped log at key (newest first,
// trimmed to eventCap) after the script, in its round trip: LPUSH and
// LTRIM, plain commands, since in a script each entry became a Lua string
// first (several microseconds of Redis's time each). The push is not part
// of the script's atomic step and its failure does not fail the script.
func (c *scriptCmd) pushLog(key string, entries [][]byte) {
	if len(entries) == 0 {
		return
	}
	push := newPlainCmd("lpush", 1+len(entries))
	push.str(key)
	for _, e := range entries {
		push.bytes(e)
	}
	trim := newPlainCmd("ltrim", 3)
	trim.str(key)
	trim.num(0)
	trim.num(eventCap - 1)
	c.then = append(c.then, push, trim)
}

// cmd is the go-redis command: EVALSHA, or EVAL with the script's source;
// for a plain command, the command itself.
func (c *scriptCmd) cmd(ctx context.Context, eval bool) *redis.Cmd {
	if c.script == nil {
		return redis.NewCmd(ctx, c.list...)
	}
	if eval {
		c.list[0], c.list[1] = "eval", &c.script.src
	} else {
		c.list[0], c.list[1] = "evalsha", &c.script.hash
	}
	cmd := redis.NewCmd(ctx, c.list...)
	if c.list[2] != 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// isNoScript reports whether err is Redis's NOSCRIPT: the server does not
// have the script (a restart, SCRIPT FLUSH).
func isNoScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// runScript runs one script command, and the plain commands after it in
// the same round trip: EVALSHA, then EVAL after NOSCRIPT.
func runScript(ctx context.Context, c redis.UniversalClient, sc *scriptCmd) (any, error) {
	cmd := sc.cmd(ctx, false)
	if len(sc.then) == 0 {
		_ = c.Process(ctx, cmd)
	} else {
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			_ = p.Process(ctx, cmd)
			for _, t := range sc.then {
				_ = p.Process(ctx, t.cmd(ctx, false))
			}
			return nil
		})
	}
	if isNoScript(cmd.Err()) {
		cmd = sc.cmd(ctx, true)
		_ = c.Process(ctx, cmd)
	}
	return cmd.Result()
}

// scriptBatcher sends script commands to Redis, coalescing concurrent ones:
// a command that finds fewer than max batches in flight goes out at once,
// alone (a plain EVALSHA: one round trip, no added delay); commands that
// arrive while max batches are in flight wait, and when a batch returns,
// the commands that waited meanwhile go out together in one pipeline of
// EVALSHAs (at most maxBatch of them; the rest in the batches after).
// Every script is still atomic on its own; only the round trip (pool
// checkout, write and read) is shared. The first waiter of a batch sends
// it and hands the others their replies.
type scriptBatcher struct {
	c        redis.UniversalClient
	max      int // batches in flight at most
	maxBatch int // commands in one batch at most

	mu       sync.Mutex
	inFlight int
	queue    []*scriptRun
}

// scriptRun is one command waiting in a batcher, and its reply once done
// is closed.
type scriptRun struct {
	ctx context.Context
	sc  *scriptCmd

	res  any
	err  error
	done chan struct{}
	// lead is the batch this run was handed to send (itself first).
	lead []*scriptRun
}

func newScriptBatcher(c redis.UniversalClient, max, maxBatch int) *scriptBatcher {
	return &scriptBatcher{c: c, max: max, maxBatch: maxBatch}
}

// run runs sc and returns its reply. Once run returns, sc is no longer
// referenced.
func (b *scriptBatcher) run(ctx context.Context, sc *scriptCmd) (any, error) {
	b.mu.Lock()
	if b.inFlight < b.max {
		b.inFlight++
		b.mu.Unlock()
		res, err := runScript(ctx, b.c, sc)
		b.next()
		return res, err
	}
	r := &scriptRun{ctx: ctx, sc: sc, done: make(chan struct{})}
	b.queue = append(b.queue, r)
	b.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		b.mu.Lock()
		for i, q := range b.queue {
			if q == r { // not sent yet: give up
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				b.mu.Unlock()
				return nil, ctx.Err()
			}
		}
		b.mu.Unlock()
		<-r.done // sent: its reply is coming (bounded by the client's timeouts)
	}
	if r.lead != nil {
		b.send(r.lead)
		b.next()
	}
	return r.res, r.err
}

// next is called when a batch returns: the commands queued meanwhile
// become the next batch, sent by the first of them; with none queued, one
// fewer batch is in flight.
func (b *scriptBatcher) next() {
	b.mu.Lock()
	if len(b.queue) == 0 {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	batch := b.queue
	if len(batch) > b.maxBatch {
		// The rest go in later batches. b.queue keeps the backing array
		// past batch, so removals and appends never touch batch.
		batch, b.queue = batch[:b.maxBatch:b.maxBatch], batch[b.maxBatch:]
	} else {
		b.queue = nil
	}
	b.mu.Unlock()
	batch[0].lead = batch
	close(batch[0].done)
}

// send runs a batch (its first run is the caller's own) and wakes the
// others. The pipeline is not cancelled with the sender's context, since
// the other runs depend on it; the client's read and write timeouts bound
// it.
func (b *scriptBatcher) send(batch []*scriptRun) {
	lead := batch[0]
	if len(batch) == 1 {
		lead.res, lead.err = runScript(lead.ctx, b.c, lead.sc)
		return
	}
	ctx := context.WithoutCancel(lead.ctx)
	cmds := make([]*redis.Cmd, len(batch))
	_, _ = b.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range batch {
			cmds[i] = r.sc.cmd(ctx, false)
			_ = p.Process(ctx, cmds[i])
			for _, t := range r.sc.then {
				_ = p.Process(ctx, t.cmd(ctx, false))
			}
		}
		return nil
	})
	// Scripts the server does not have go again as EVAL, which loads them.
	var retry []int
	for i, c := range cmds {
		if isNoScript(c.Err()) {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		_, _ = b.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range retry {
				cmds[i] = batch[i].sc.cmd(ctx, true)
				_ = p.Process(ctx, cmds[i])
			}
			return nil
		})
	}
	for i, r := range batch {
		r.res, r.err = cmds[i].Result()
		if i > 0 {
			close(r.done)
		}
	}
}
