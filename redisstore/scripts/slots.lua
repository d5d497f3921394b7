-- slots.lua: concurrency slots (ratekeeper.ConcurrencyStore). KEYS[1] is a
-- sorted set of one key's slots: member the slot ID, score the instant (µs)
-- at which its lease expires. A lease with expiry e is held while now < e.
-- A cancelled ID's score is -e: until e, no acquire takes that ID, and a
-- release leaves it in place.
--   ARGV[1] op: a (acquire), f (refresh), r (release) or c (cancel: the
--   release of an acquire whose reply was lost, which may run before it)
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
-- held is the ID's score: positive a lease, negative a cancel, or nil.
local function score() return tonumber(redis.call('ZSCORE', key, id)) end
if op == 'r' then
  local held = score()
  if held and held > 0 then redis.call('ZREM', key, id) end
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
if op == 'c' then
  local held = score()
  if held and held > 0 then
    redis.call('ZREM', key, id)
  elseif not held then
    redis.call('ZADD', key, string.format('%d', -exp), id)
    keep()
  end
  return {1, 0, now}
end
if op == 'f' then
  local held = score()
  if not held or held <= now then
    if held and held > 0 then redis.call('ZREM', key, id) end
    return {0, 0, now}
  end
  redis.call('ZADD', key, string.format('%d', exp), id)
  keep()
  return {1, 0, now}
end
-- Expired leases are in (0, now], expired cancels in [-now, 0).
redis.call('ZREMRANGEBYSCORE', key, string.format('%d', -now), string.format('%d', now))
local held = score()
local n = redis.call('ZCOUNT', key, '(0', '+inf')
if held and held < 0 then
  return {0, n, now}
end
if n < max or held then
  n = n + redis.call('ZADD', key, string.format('%d', exp), id)
  keep()
  return {1, n, now}
end
return {0, n, now}
