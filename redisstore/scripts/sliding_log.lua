-- sliding_log.lua: the sliding window log (internal/algo/log.go).
-- State: a sorted set of the logged requests, scored by their instant in
-- µs. Members are a sequence number in fixed-width hex, one more than the
-- newest member's, so that entries stamped in the same microsecond stay
-- distinct and member order is entry order. The set never holds more than
-- rate entries: only the newest rate entries can decide a request.
-- ARGV[7] is 1 when refused requests are logged too; for op r, ARGV[8] is
-- the instant the refunded entries were stamped.

-- The newest entry, whose stamp later requests are held to.
local last, seq = 0, -1
local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if top[1] then
  last, seq = tonumber(top[2]), tonumber(top[1], 16)
end

if op == 'r' or op == 'c' then
  -- Remove n entries stamped at, newest first.
  local at = tonumber(ARGV[8])
  local gone = redis.call('ZRANGEBYSCORE', key, at, at)
  if #gone > 0 then
    local drop = {}
    for i = #gone, math.max(1, #gone - n + 1), -1 do
      drop[#drop + 1] = gone[i]
    end
    redis.call('ZREM', key, unpack(drop))
    top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if top[1] then
      redis.call('PEXPIRE', key, ttl(tonumber(top[2]) + period + 1))
    end
  end
  return 0
end

-- A clock that went back counts as standing at the newest entry.
local t = now
if last > t then t = last end
local from = t - period -- the window is [from, t)
local c = redis.call('ZCOUNT', key, from, '+inf')
local allowed = 0
if c + n <= rate then allowed = 1 end
local penalty = n > 0 and ARGV[7] == '1'

if n > 0 and (allowed == 1 or penalty) then
  -- Log n entries stamped t, dropping the expired ones (an entry dropped at
  -- t is never needed again: later requests are held to t). When refused
  -- requests are logged too, the oldest past rate entries go; an admitted
  -- request never needs that, as the window held at most rate - n.
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. fmt('%d', from))
  local args = {}
  for i = 1, n do
    args[#args + 1] = fmt('%d', t)
    args[#args + 1] = fmt('%016x', seq + i)
  end
  redis.call('ZADD', key, unpack(args))
  if penalty then
    redis.call('ZREMRANGEBYRANK', key, 0, -(rate + 1))
    c = redis.call('ZCOUNT', key, from, '+inf')
  else
    c = c + n
  end
  redis.call('PEXPIRE', key, ttl(t + period + 1))
  last = t
end

-- The decision on the log as it now stands, c entries in the window.
local retry, reset = 0, 0
if allowed == 0 then
  -- The request fits once all but rate-n of the counted entries have left
  -- the window: an entry stamped e leaves at e+period+1.
  local e = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', c - (rate - n) - 1, 1)
  retry = tonumber(e[2]) + period + 1 - now
end
if c > 0 then
  reset = last + period + 1 - now
end
local rem = rate - c
if rem < 0 then rem = 0 end
return {allowed, rem, retry, reset, 0, t}
