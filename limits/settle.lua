-- settle.lua: replace a hold's reservation by the call's actual usage, claim
-- the threshold crossings it causes and count a flag. Atomic. (The events
-- and call journal entries of a settlement are pushed onto their logs by
-- plain LPUSH and LTRIM commands sent in the same round trip: in a script,
-- each entry cost Redis several microseconds more, as a Lua string.)
--
-- KEYS[1]  <base>holds
-- ARGV[1]  base          <prefix>{<task>}:
-- ARGV[2]  user          '' for none
-- ARGV[3]  hold id
-- ARGV[4]  reserved tokens   ARGV[5] reserved money
-- ARGV[6]  actual tokens     ARGV[7] actual money
-- ARGV[8]  w: windows        ARGV[9] t: thresholds
-- ARGV[10] flag key suffix ('' : no flag)             ARGV[11] flag key TTL ms
-- ARGV[12] reserved requests ARGV[13] actual requests (1 and 1 for a call)
-- ARGV[14] '1': the hold is a lease (its amounts leave each window's l too)
-- then w × (window index, stamp, TTL ms, limit) and t thresholds.
--
-- A window's key is a hash {u: settled, t: settled + reserved}. A hold
-- already released (its lease ran out and it was reaped) is not subtracted
-- again: only the actual usage is added. Values the commands return are
-- used instead of reading again (before and after come from HINCRBY of u),
-- t is not touched when the actual usage equals the reservation (a call's request),
-- and a TTL is set only on a key this call creates.
-- Returns {found, flags, (window position, threshold position, used)...}.
local base, user, id = ARGV[1], ARGV[2], ARGV[3]
local found = 0
if id ~= '' and redis.call('HDEL', KEYS[1], id) == 1 then
  found = 1
  redis.call('ZREM', base .. 'leases', id)
end
local res = {ARGV[12], ARGV[4], ARGV[5]}
local act = {ARGV[13], ARGV[6], ARGV[7]}
local nw, nt = tonumber(ARGV[8]), tonumber(ARGV[9])
local th0 = 14 + 4 * nw
local lease = ARGV[14] == '1'
local out = {found, 0}
for i = 1, nw do
  local a = 14 + 4 * (i - 1)
  local idx = tonumber(ARGV[a + 1])
  local ttl = ARGV[a + 3]
  local limit = tonumber(ARGV[a + 4])
  local u = unitOf(idx)
  local k = wkey(base, user, idx, ARGV[a + 2])
  -- u (settled) gains the actual usage; t (settled + reserved) gains the
  -- actual usage less the reservation (when the hold was still open).
  local ra = 0
  if found == 1 then ra = tonumber(res[u]) end
  local aa = tonumber(act[u])
  if lease and ra ~= 0 and redis.call('EXISTS', k) == 1 then
    redis.call('HINCRBY', k, 'l', -ra)
  end
  local before, after = 0, 0
  if aa ~= 0 then
    after = redis.call('HINCRBY', k, 'u', act[u])
    before = after - aa
    if before == 0 and redis.call('PTTL', k) == -1 then
      -- This call made the key (its window's key was gone): it holds only
      -- this usage, and gets its TTL.
      redis.call('HSET', k, 't', act[u])
      redis.call('PEXPIRE', k, ttl)
      ra, aa = 0, 0
    end
  end
  if aa ~= ra then
    -- Below zero with no TTL: the window's key was gone and this made it;
    -- leave it gone (the reservation went with it).
    if redis.call('HINCRBY', k, 't', aa - ra) < 0 and redis.call('PTTL', k) == -1 then
      redis.call('DEL', k)
    end
  end
  if after ~= before then
    if limit > 0 then
      for j = 1, nt do
        local t = tonumber(ARGV[th0 + j]) * limit
        if before < t and after >= t then
          if redis.call('SET', k .. ':th:' .. ARGV[th0 + j], '1', 'NX', 'PX', ttl) then
            out[#out + 1], out[#out + 2], out[#out + 3] = i, j, after
          end
        end
      end
    end
  end
end
if ARGV[10] ~= '' then
  local fk = base .. ARGV[10]
  out[2] = redis.call('INCR', fk)
  if out[2] == 1 then redis.call('PEXPIRE', fk, ARGV[11]) end
end
return out
