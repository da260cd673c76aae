-- common.lua: helpers prepended to every taskgate limits script.
--
-- Window ids, in canonical order (scope, unit, period); an id's position
-- (1..24) is its index. Task windows are 1..12, user windows 13..24; within a
-- scope, unit = requests|tokens|money and period = minute|hour|day|month.
local IDS = {
  't:requests:minute', 't:requests:hour', 't:requests:day', 't:requests:month',
  't:tokens:minute', 't:tokens:hour', 't:tokens:day', 't:tokens:month',
  't:money:minute', 't:money:hour', 't:money:day', 't:money:month',
  'u:requests:minute', 'u:requests:hour', 'u:requests:day', 'u:requests:month',
  'u:tokens:minute', 'u:tokens:hour', 'u:tokens:day', 'u:tokens:month',
  'u:money:minute', 'u:money:hour', 'u:money:day', 'u:money:month',
}
-- indexes maps each id back to its index; built only when needed (a task
-- with overrides), since every script run would otherwise pay for it.
local function indexes()
  local idx = {}
  for i, id in ipairs(IDS) do idx[id] = i end
  return idx
end

-- wkey is the counter hash of window idx for the period starting at stamp:
-- <base>t:tokens:day:2026-11-30 or <base>u:<user>:tokens:day:2026-11-30.
local function wkey(base, user, idx, stamp)
  local id = IDS[idx]
  if idx <= 12 then
    return base .. id .. ':' .. stamp
  end
  return base .. 'u:' .. user .. string.sub(id, 2) .. ':' .. stamp
end

-- unitOf and periodOf map an index to 1..3 (requests, tokens, money) and
-- 1..4 (minute, hour, day, month).
local function unitOf(idx) return math.floor((idx - 1) / 4) % 3 + 1 end
local function periodOf(idx) return (idx - 1) % 4 + 1 end

-- release takes a hold's amounts off its windows' totals (t: settled +
-- reserved; and l, what leases hold, for a replica's lease, hold id
-- '<replica>:L<n>'), where the windows still exist, and forgets the hold.
-- It reports whether there was such a hold. The caller removes the id from
-- <base>leases.
local function release(base, id)
  local holds = base .. 'holds'
  local rec = redis.call('HGET', holds, id)
  if not rec then return false end
  local h = cjson.decode(rec)
  local leased = string.find(id, ':L', 1, true)
  for i = 1, #h, 2 do
    if redis.call('EXISTS', h[i]) == 1 then
      redis.call('HINCRBY', h[i], 't', '-' .. h[i + 1])
      if leased then redis.call('HINCRBY', h[i], 'l', '-' .. h[i + 1]) end
    end
  end
  redis.call('HDEL', holds, id)
  return true
end

-- reap releases up to max holds of one task whose lease ended at or before
-- now.
local function reap(base, now, max)
  local leases = base .. 'leases'
  local ids = redis.call('ZRANGEBYSCORE', leases, '-inf', now, 'LIMIT', 0, max)
  if #ids == 0 then return 0 end
  for _, id in ipairs(ids) do release(base, id) end
  redis.call('ZREM', leases, unpack(ids))
  return #ids
end
