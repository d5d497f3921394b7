-- sliding_log.lua: the sliding window log (internal/algo/log.go).
-- State: one string, the logged requests' instants in µs, oldest first, each
-- a little-endian double (struct '<d', 8 bytes). Entries are told apart by
-- their place, so requests logged in the same microsecond stay distinct. The
-- string never holds more than rate entries: only the newest rate entries can
-- decide a request. One GET per decision, and when a request is logged an
-- APPEND and a PEXPIRE (or now and then one SET), where a sorted set needed
-- five commands; the price is that the GET copies the window's entries
-- (8 bytes each) into Lua, which stays below a sorted set's cost up to a few
-- thousand entries in the window (docs/redis.md). The string may start with
-- expired entries (see below).
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
  -- Remove n entries stamped at, newest first, and the expired entries in
  -- front, those before last - period: a log that kept them could count
  -- them again once the refund takes its newest entries and a clock that
  -- went back stands earlier than last. (Entries stamped alike expire
  -- alike, so a refund's entries are all expired or none.)
  local at = x8
  local d = first(last - period)
  local hi = first(at + 1)
  local lo = first(at)
  if hi - lo > n then lo = hi - n end
  if lo < d then lo, hi = d, d end
  if d > 0 or lo < hi then
    local rest = string.sub(s, d * 8 + 1, lo * 8) .. string.sub(s, hi * 8 + 1)
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

-- The common case first, inline: n > 0 admitted and logged, n entries
-- stamped t join. Every string Lua makes costs the server about 24
-- instructions a byte (it hashes each one), so the log is not rebuilt on
-- every write: the new entries are appended, and the expired ones (the
-- first i) stay in front, where first() steps over them, until they number
-- more than a quarter of the live ones, or keeping them would take the log
-- past rate entries; then one SET writes the live entries alone. Dropping an
-- entry at t is safe: it left the window at t, and later requests are held
-- to t. The window held at most rate - n, so the log stays within rate.
if allowed == 1 and n > 0 then
  local add = struct.pack('<d', t)
  if n > 1 then add = string.rep(add, n) end
  local ms = ttl(t + period + 1, now, least)
  if s and i * 4 <= c and size + n <= rate then
    redis.call('APPEND', key, add)
    redis.call('PEXPIRE', key, ms)
  else
    if i > 0 then add = string.sub(s, i * 8 + 1) .. add end
    redis.call('SET', key, add, 'PX', ms)
  end
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
local m = n
if m == 0 then m = 1 end
if allowed == 0 or (n == 0 and c + 1 > rate) then
  -- The request (asked without taking, n == 0: one request) fits once all
  -- but rate-m of the counted entries have left the window: an entry
  -- stamped e leaves at e+period+1.
  local k = wi + c - (rate - m) - 1
  retry = unpack8('<d', w, k * 8 + 1) + period + 1 - now
end
if c > 0 then
  reset = last + period + 1 - now
end
local rem = rate - c
if rem < 0 then rem = 0 end
return struct.pack('<dddddd', allowed, rem, retry, reset, 0, t)
