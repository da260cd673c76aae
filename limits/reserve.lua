-- reserve.lua: check a call against every window of its task (and user) and,
-- only if all fit, reserve its estimate in all of them. Atomic: one script.
--
-- KEYS[1]  <base>ov      the task's limit overrides (field: window id)
-- KEYS[2]  <prefix>blocks (optional; absent: blocks were checked by the caller)
-- ARGV[1]  base          <prefix>{<task>}:
-- ARGV[2]  user          '' for none
-- ARGV[3]  user limits   '1' when the task has user_limits (user overrides apply)
-- ARGV[4]  now           unix ms (the gateway's clock, never Redis TIME)
-- ARGV[5]  lease end     unix ms
-- ARGV[6]  hold id
-- ARGV[7]  tokens        estimate (input + output)
-- ARGV[8]  money         estimate, micro-dollars
-- ARGV[9]  block field   '<group>\0<user>'
-- ARGV[10] '1': keep the sliding-hour call count of (task, user)
-- ARGV[11] mode          'r' reserve, 'l' reserve a lease (also counted in each window's l),
--                        'p' peek (reap and report; no block check, no reservation)
-- ARGV[12..15] window start stamps: minute, hour, day, month
-- ARGV[16..19] key TTLs in ms:      minute, hour, day, month
-- ARGV[20] requests      1 for a call; a lease reserves more
-- ARGV[21] n, then n pairs (window index 1..24, config limit)
--
-- A window's key is a hash {u: settled, t: settled + reserved, l: reserved
-- by leases (part of t)}.
--
-- Returns {1, block-json} when the user is blocked; otherwise
-- {status, calls, idx, limit, used, reserved, override, leased, ...} for
-- every window that has a limit, in canonical order, as they were before
-- this call; status 0 = reserved, 2 = refused (nothing written). When
-- reserving, used is settled + reserved and reserved is 0 (only their sum is
-- needed): each window then costs one HINCRBY of t, whose result is the
-- check, and a refusal takes those increments back. leased is read only on
-- a refusal (0 otherwise).
local base, user = ARGV[1], ARGV[2]
local now = tonumber(ARGV[4])
local peek = ARGV[11] == 'p'
local leasing = ARGV[11] == 'l'

reap(base, now, 50)

if not peek and KEYS[2] and user ~= '' then
  local b = redis.call('HMGET', KEYS[2], ARGV[9], '*\0' .. user)
  for i = 1, 2 do
    local v = b[i]
    if v then
      local sep = string.find(v, '|', 1, true)
      if sep then
        local exp = tonumber(string.sub(v, 1, sep - 1)) or 0
        if exp == 0 or exp > now then
          return {1, string.sub(v, sep + 1)}
        end
      end
    end
  end
end

local lim, src = {}, {}
local n = tonumber(ARGV[21])
for i = 1, n do
  local idx = tonumber(ARGV[20 + 2 * i])
  lim[idx] = tonumber(ARGV[21 + 2 * i])
  src[idx] = 0
end
local userOn = ARGV[3] == '1'
local ov = redis.call('HGETALL', KEYS[1])
local IDX = #ov > 0 and indexes() or nil
for i = 1, #ov, 2 do
  local idx = IDX[ov[i]]
  if idx and (idx <= 12 or userOn) then
    lim[idx] = tonumber(ov[i + 1])
    src[idx] = 1
  end
end

local amt = {ARGV[20], ARGV[7], ARGV[8]}
local out = {0, 0}
local fail = false
local done = {} -- keys incremented, with their amounts: taken back on a refusal
local keys = {} -- every reported window's key, in order
for idx = 1, 24 do
  local l = lim[idx]
  if l and (idx <= 12 or user ~= '') then
    local u, p = unitOf(idx), periodOf(idx)
    local k = wkey(base, user, idx, ARGV[11 + p])
    local a = tonumber(amt[u])
    local used, res
    if peek then
      local v = redis.call('HMGET', k, 'u', 't')
      used = tonumber(v[1]) or 0
      res = (tonumber(v[2]) or 0) - used
    elseif fail or a == 0 or l <= 0 then
      used, res = tonumber(redis.call('HGET', k, 't')) or 0, 0
      if l <= 0 or used + a > l then fail = true end
    else
      local after = redis.call('HINCRBY', k, 't', amt[u])
      used, res = after - a, 0
      if used == 0 then
        -- The key is new (or held nothing): it gets its TTL, which runs to
        -- the window's end plus grace, so later calls need not set it.
        redis.call('PEXPIRE', k, ARGV[15 + p])
      end
      done[#done + 1] = {k, amt[u]}
      if after > l then fail = true end
    end
    local o = #out
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = idx, l, used, res, src[idx], 0
    keys[#keys + 1] = k
  end
end
if peek then return out end
if fail then
  for _, d in ipairs(done) do
    redis.call('HINCRBY', d[1], 't', '-' .. d[2])
  end
  -- What leases hold: the caller may wait for them to end.
  for j, k in ipairs(keys) do
    out[2 + 6 * j] = tonumber(redis.call('HGET', k, 'l')) or 0
  end
  out[1] = 2
  return out
end
if leasing then
  for _, d in ipairs(done) do
    redis.call('HINCRBY', d[1], 'l', d[2])
  end
end

local rec = {}
for _, d in ipairs(done) do
  rec[#rec + 1] = d[1]
  rec[#rec + 1] = d[2]
end
if #rec > 0 then
  redis.call('HSET', base .. 'holds', ARGV[6], cjson.encode(rec))
  redis.call('ZADD', base .. 'leases', ARGV[5], ARGV[6])
end

-- The sliding hour: one member per call (score: its time) and the marker
-- member '~', whose score is when the key's TTL was last set. The marker
-- leaves with the calls of more than an hour ago, and the TTL (2h5m) is set
-- again whenever it comes back, so the key outlives its newest call by more
-- than an hour with one PEXPIRE an hour instead of one a call.
if ARGV[10] == '1' and user ~= '' then
  local k = base .. 'cph:' .. user
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now - 3600000)
  if redis.call('ZADD', k, 'NX', now, ARGV[6], now, '~') == 2 then
    redis.call('PEXPIRE', k, 7500000)
  end
  out[2] = redis.call('ZCARD', k) - 1
end
return out
