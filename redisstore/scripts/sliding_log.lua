-- sliding_log.lua: the sliding window log (internal/algo/log.go).
-- State: one string, the logged requests' instants in µs, oldest first, each
-- a little-endian double (struct '<d', 8 bytes). Entries are told apart by
-- their place, so requests logged in the same microsecond stay distinct. The
-- string never holds more than rate entries: only the newest rate entries can
-- decide a request. One GET and at most one SET per decision, where a sorted
-- set needed five commands; the price is that a write copies the window's
-- entries (8 bytes each), which stays below a sorted set's cost up to a few
-- thousand entries in the window (docs/redis.md).
-- x7 is 1 when refused requests are logged too; for op r, x8 is
-- the instant the refunded entries were stamped.
local unpack8 = struct.unpack

local s = redis.call('GET', key)
local size, last = 0, 0
if s then
  size = #s / 8
  last = unpack8('<d', s, #s - 7)
end

-- first is the index (from 0) of the oldest entry at or after cut (size if
-- none): a binary search, as entries are in order.
local function first(cut)
  local lo, hi = 0, size
  while lo < hi do
    local m = floor((lo + hi) / 2)
    if unpack8('<d', s, m * 8 + 1) < cut then lo = m + 1 else hi = m end
  end
  return lo
end

if op == 'r' or op == 'c' then
  -- Remove n entries stamped at, newest first.
  local at = x8
  local hi = first(at + 1)
  local lo = first(at)
  if hi - lo > n then lo = hi - n end
  if lo < hi then
    local rest = string.sub(s, 1, lo * 8) .. string.sub(s, hi * 8 + 1)
    if rest == '' then
      redis.call('DEL', key)
    else
      redis.call('SET', key, rest, 'PX', ttl(unpack8('<d', rest, #rest - 7) + period + 1, now, least))
    end
  end
  return ''
end

-- A clock that went back counts as standing at the newest entry.
local t = now
if last > t then t = last end
local i = first(t - period) -- the window is [t - period, t): entries i..size-1
local c = size - i
local allowed = 0
if c + n <= rate then allowed = 1 end

-- The common case first, inline: n > 0 admitted and logged. The expired
-- entries go (an entry dropped at t is never needed again: later requests
-- are held to t), n entries stamped t join, and the window held at most
-- rate - n, so the log stays within rate.
if allowed == 1 and n > 0 then
  redis.call('SET', key, string.sub(s or '', i * 8 + 1) .. string.rep(struct.pack('<d', t), n),
    'PX', ttl(t + period + 1, now, least))
  return struct.pack('<dddddd', 1, rate - c - n, 0, t + period + 1 - now, 0, t)
end

-- w holds the window from entry wi on: the log as it stands, or as it is
-- after logging a refused request.
local w, wi = s, i
if n > 0 and x7 == 1 then
  -- A refused request logged as a penalty: the oldest past rate entries go.
  w = string.sub(s or '', i * 8 + 1) .. string.rep(struct.pack('<d', t), n)
  if #w > rate * 8 then w = string.sub(w, #w - rate * 8 + 1) end
  redis.call('SET', key, w, 'PX', ttl(t + period + 1, now, least))
  c, wi, last = #w / 8, 0, t
end

local retry, reset = 0, 0
if allowed == 0 then
  -- The request fits once all but rate-n of the counted entries have left
  -- the window: an entry stamped e leaves at e+period+1.
  local k = wi + c - (rate - n) - 1
  retry = unpack8('<d', w, k * 8 + 1) + period + 1 - now
end
if c > 0 then
  reset = last + period + 1 - now
end
local rem = rate - c
if rem < 0 then rem = 0 end
return struct.pack('<dddddd', allowed, rem, retry, reset, 0, t)
