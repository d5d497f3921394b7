-- slots.lua: concurrency slots (ratekeeper.ConcurrencyStore). KEYS[1] is a
-- sorted set of one key's slots: member the slot ID, score the instant (µs)
-- at which its lease expires. A lease with expiry e is held while now < e.
--   ARGV[1] op: a (acquire), f (refresh) or r (release)
--   ARGV[2] the slot ID
--   ARGV[3] max, the slots the key may hold
--   ARGV[4] the lease's TTL in µs
--   ARGV[5] now in µs, or '' to read the server's TIME
--   ARGV[6] the least the key lives, in ms (WithMinTTL)
-- Returns {allowed (0/1), slots held after the call, now}; a refresh
-- answers allowed 1 when the slot was still held.
local key, op, id = KEYS[1], ARGV[1], ARGV[2]
local now = tonumber(ARGV[5])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
if op == 'r' then
  redis.call('ZREM', key, id)
  return {1, 0, now}
end
local max, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
local exp = now + ttl
-- The key lives as long as its longest lease: the sets of a dead
-- instance's keys go by themselves.
local function keep()
  local ms = math.max(math.ceil(ttl / 1000), tonumber(ARGV[6]) or 0)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
if op == 'f' then
  local s = redis.call('ZSCORE', key, id)
  if not s or tonumber(s) <= now then
    if s then redis.call('ZREM', key, id) end
    return {0, 0, now}
  end
  redis.call('ZADD', key, string.format('%d', exp), id)
  keep()
  return {1, 0, now}
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
local n = redis.call('ZCARD', key)
if n < max or redis.call('ZSCORE', key, id) then
  n = n + redis.call('ZADD', key, string.format('%d', exp), id)
  keep()
  return {1, n, now}
end
return {0, n, now}
