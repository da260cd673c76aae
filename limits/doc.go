// Package limits counts requests, tokens and money per task and per user in
// calendar windows (minute, hour, day, month, in the configured time zone),
// refuses a call that would pass a limit, and keeps the blocks, limit
// overrides and event logs that every replica shares.
//
// A call is reserved before it is forwarded (Limiter.Reserve: one atomic
// store round trip that checks the user's blocks and every window and, only
// if all fit, reserves the estimate in all of them under a hold with a
// lease) and settled afterwards (Limiter.Settle: one round trip that replaces
// the estimate by the actual usage, claims threshold crossings once across
// replicas, counts off-purpose flags and appends events). A hold never
// settled is released when its lease runs out: expired holds of a task are
// reaped inside that task's later reserve calls and by Usage.
//
// Leases (lease.go): with a store across the network, a (task, user) that
// a replica serves many calls a second for is served from a lease instead:
// one reserve script takes a share of every window's headroom (at most
// 1/32 of it, so only far from every limit) for about a quarter second of
// calls; the calls that fit are admitted locally, each after one plain read
// (HMGET of the blocks hash: the user's blocks and the task's overrides
// version, so blocks and overrides still apply to the very next call on
// every replica); and when the lease ends one settle script replaces what
// it reserved by what its calls used and appends their events. Each window
// hash also counts what leases hold (l), so that a call refused only for
// what other replicas' leases hold waits for them to end (at most about
// 0.6 s) and "exactly N of M" holds. A lease is an ordinary hold: a replica
// that dies holding one strands nothing once it runs out. Options.NoLeases
// (config store.leases: false) turns leases off.
//
// Two stores implement Store and pass one conformance suite: the in-process
// memory store (one replica) and RedisStore (plain Redis, Sentinel or
// Cluster). Redis keys, for prefix P and task T (the task is a hash tag, so
// every key of one call shares a Cluster slot):
//
//	P{T}:t:<unit>:<period>:<start>          task window: hash {u: settled, t: settled + reserved, l: held by leases}
//	P{T}:u:<user>:<unit>:<period>:<start>   user window: the same
//	P{T}:t:<unit>:<period>:<start>:th:<t>   threshold t of that window claimed (SET NX)
//	P{T}:ov                                 limit overrides: hash window id → value
//	P{T}:holds                              open holds: hash hold id → JSON [key, amount, …]
//	P{T}:leases                             open holds by lease end: zset (unix ms)
//	P{T}:cph:<user>                         calls in the last hour: zset (unix ms), and "~" (TTL last set)
//	P{T}:flags:<user>:<day>                 off-purpose flags of a day: counter
//	P{T}:events                             signal log (anomaly, flag, block, threshold): list, newest first, the newest 1000 read
//	P{T}:calls                              call journal: list, newest first, the newest 1000 read
//	Pblocks                                 blocks: hash "<group>\0<user>" → "<expiry ms>|<json>",
//	                                        and "\0ov:<task>" → changes to the task's overrides
//
// <unit> is requests, tokens or money (micro-dollars); <period> is minute,
// hour, day or month; <start> is the window's start in the Limiter's
// location: 2026-11-30T14:05+0100 (minute, hour; with the offset, so a
// repeated hour at a daylight-saving change is a window of its own),
// 2026-11-30 (day), 2026-11 (month). Window ids (override fields) are
// "t:tokens:day", "u:money:month" and so on. Window keys expire a minute
// (plus up to 30s jitter) after their window ends, so there is no reset
// logic. Times (now, lease ends) come from the gateway's clock and TTLs are
// relative, never Redis TIME.
//
// Redis work per call is kept small, since Redis shares the machine: a
// window's total (t) is both the check and the reservation (one HINCRBY a
// window; a refusal takes its increments back), settling a window adds to
// u and, only when the actual usage differs from the reservation, to t;
// TTLs are set when a key is created (the sliding hour's key once an hour,
// by its "~" marker), and the event log is trimmed once it is 64 past its
// cap. Concurrent scripts share round trips: a reserve or settle that finds
// two of its kind in flight waits, and the ones that waited meanwhile go
// out together as one pipeline of EVALSHAs (each still atomic); one alone
// goes out at once, so a lone call costs one round trip as before.
//
// Blocks: the blocks hash is one key outside every task's slot. On plain
// Redis and Sentinel the reserve script reads it atomically with the
// windows. With Redis Cluster it cannot (the script's keys must share a
// slot), so a Cluster reserve reads the two block fields first and then runs
// the script: two round trips instead of one.
//
// Only windows that have a limit (config or override) are counted: a limit
// set by an override starts counting when it is set.
//
// Under on_error: fail_open, a Reserve whose store fails is served from an
// in-process memory store (Degraded reports true), and the usage settled
// meanwhile is remembered and added into the store, with the events, once
// it answers again (a background loop pings it with backoff); the same
// script releases the store's holds whose settlement did not reach it. Blocks and
// overrides are not enforced while degraded. Under fail_closed, Reserve
// returns ErrStoreUnavailable.
//
// This package imports config and tasks; it must not import guard, proxy,
// fiber or prometheus.
package limits
