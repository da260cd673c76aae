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
-- ARGV[11] mode          'r' reserve, 'p' peek (reap and report; no block check, no reservation)
-- ARGV[12..15] window start stamps: minute, hour, day, month
-- ARGV[16..19] key TTLs in ms:      minute, hour, day, month
-- ARGV[20] n, then n pairs (window index 1..24, config limit)
--
-- Returns {1, block-json} when the user is blocked; otherwise
-- {status, calls, idx, limit, used, reserved, override, ...} for every window
-- that has a limit, in canonical order, with used and reserved as they were
-- before this call; status 0 = reserved, 2 = refused (nothing written).
local base, user = ARGV[1], ARGV[2]
local now = tonumber(ARGV[4])
local peek = ARGV[11] == 'p'

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
local n = tonumber(ARGV[20])
for i = 1, n do
  local idx = tonumber(ARGV[19 + 2 * i])
  lim[idx] = tonumber(ARGV[20 + 2 * i])
  src[idx] = 0
end
local userOn = ARGV[3] == '1'
local ov = redis.call('HGETALL', KEYS[1])
for i = 1, #ov, 2 do
  local idx = IDX[ov[i]]
  if idx and (idx <= 12 or userOn) then
    lim[idx] = tonumber(ov[i + 1])
    src[idx] = 1
  end
end

local amt = {'1', ARGV[7], ARGV[8]}
local out = {0, 0}
local wins = {}
local fail = false
for idx = 1, 24 do
  local l = lim[idx]
  if l and (idx <= 12 or user ~= '') then
    local u, p = unitOf(idx), periodOf(idx)
    local k = wkey(base, user, idx, ARGV[11 + p])
    local v = redis.call('HMGET', k, 'u', 'r')
    local used, res = tonumber(v[1]) or 0, tonumber(v[2]) or 0
    if l <= 0 or used + res + tonumber(amt[u]) > l then fail = true end
    local o = #out
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5] = idx, l, used, res, src[idx]
    wins[#wins + 1] = {k, u, p}
  end
end
if peek then return out end
if fail then
  out[1] = 2
  return out
end

local rec = {}
for _, w in ipairs(wins) do
  local a = amt[w[2]]
  if a ~= '0' then
    redis.call('HINCRBY', w[1], 'r', a)
    rec[#rec + 1] = w[1]
    rec[#rec + 1] = a
  end
  redis.call('PEXPIRE', w[1], ARGV[15 + w[3]])
end
if #rec > 0 then
  redis.call('HSET', base .. 'holds', ARGV[6], cjson.encode(rec))
  redis.call('ZADD', base .. 'leases', ARGV[5], ARGV[6])
end

if ARGV[10] == '1' and user ~= '' then
  local k = base .. 'cph:' .. user
  redis.call('ZADD', k, now, ARGV[6])
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now - 3600000)
  out[2] = redis.call('ZCARD', k)
  redis.call('PEXPIRE', k, 3660000)
end
return out
