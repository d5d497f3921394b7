-- sliding_log.lua: the sliding window log (internal/algo/log.go).
-- State: a sorted set of the admitted requests, scored by their instant in
-- µs. Members are a sequence number in fixed-width hex, one more than the
-- newest member's, so that entries stamped in the same microsecond stay
-- distinct and member order is entry order. The set never holds more than
-- rate entries: only the newest rate entries can decide a request.
-- ARGV[7] is 1 when refused requests are logged too; for op r, ARGV[8] is
-- the instant the refunded entries were stamped.
local log_rejected = ARGV[7] == '1'

local function newest()
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[1] then
    return tonumber(top[2]), tonumber(top[1], 16)
  end
  return 0, -1
end

local function save_ttl(last)
  redis.call('PEXPIRE', key, ttl(last + period + 1, now, least))
end

if op == 'r' or op == 'c' then
  local at = tonumber(ARGV[8])
  local gone = redis.call('ZRANGEBYSCORE', key, at, at)
  if #gone > 0 then
    local drop = {}
    for i = #gone, math.max(1, #gone - n + 1), -1 do
      drop[#drop + 1] = gone[i]
    end
    redis.call('ZREM', key, unpack(drop))
    local last = newest()
    if redis.call('EXISTS', key) == 1 then
      save_ttl(last)
    end
  end
  return 0
end

local last, seq = newest()
local t = math.max(now, last)

-- push logs n entries stamped t, dropping the expired and, when refused
-- requests are logged too, the oldest past rate entries. (An admitted
-- request never needs the trim: the window held at most rate - n entries,
-- and the expired ones are gone.)
local function push(trim)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. fmt(t - period))
  local args = {}
  for i = 1, n do
    args[#args + 1] = fmt(t)
    args[#args + 1] = string.format('%016x', seq + i)
  end
  redis.call('ZADD', key, unpack(args))
  if trim then
    redis.call('ZREMRANGEBYRANK', key, 0, -(rate + 1))
  end
  save_ttl(t)
  last = t
end

local c = redis.call('ZCOUNT', key, t - period, '+inf')
local allowed = 0
if c + n <= rate then allowed = 1 end

if n > 0 and log_rejected then
  push(true)
  c = redis.call('ZCOUNT', key, t - period, '+inf')
elseif allowed == 1 and n > 0 then
  push(false)
  c = c + n
end

-- The decision on the log as it now stands, c entries in the window.
local retry, reset = 0, 0
if allowed == 0 then
  -- The request fits once all but rate-n of the counted entries have left
  -- the window: an entry stamped e leaves at e+period+1.
  local k = c - (rate - n) - 1
  local e = redis.call('ZRANGEBYSCORE', key, t - period, '+inf', 'WITHSCORES', 'LIMIT', k, 1)
  retry = tonumber(e[2]) + period + 1 - now
end
if c > 0 then
  reset = last + period + 1 - now
end
return {allowed, clamp(rate - c, 0, rate), retry, reset, 0, t}
