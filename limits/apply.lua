-- apply.lua: add usage counted elsewhere (while the store was unreachable)
-- into one task's windows, append that task's events, and release the holds
-- whose settlement could not reach the store. Atomic, so a failed attempt
-- can be retried without counting twice (a hold is released once: after
-- that it is gone).
--
-- KEYS[1]  <base>events    KEYS[2] <base>calls (events of kind "call")
-- ARGV[1]  n counters, ARGV[2] e events, ARGV[3] event log cap,
-- ARGV[4]  h holds,    ARGV[5] base (<prefix>{<task>}:)
-- then n × (window key, amount, TTL ms), e event JSONs and h hold ids. The
-- amount is settled usage: it is added to u (settled) and t (settled +
-- reserved).
local n, e, h, base = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4]), ARGV[5]
for i = 1, n do
  local a = 5 + 3 * (i - 1)
  redis.call('HINCRBY', ARGV[a + 1], 'u', ARGV[a + 2])
  redis.call('HINCRBY', ARGV[a + 1], 't', ARGV[a + 2])
  redis.call('PEXPIRE', ARGV[a + 1], ARGV[a + 3])
end
if e > 0 then
  for j = 1, e do
    local ev = ARGV[5 + 3 * n + j]
    if string.find(ev, '"kind":"call"', 1, true) then
      redis.call('LPUSH', KEYS[2], ev)
    else
      redis.call('LPUSH', KEYS[1], ev)
    end
  end
  redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
end
for k = 1, h do
  local id = ARGV[5 + 3 * n + e + k]
  if release(base, id) then redis.call('ZREM', base .. 'leases', id) end
end
return n
