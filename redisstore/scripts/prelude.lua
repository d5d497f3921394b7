-- prelude.lua: what every ratekeeper script starts with (the Go side
-- prepends this file to each algorithm's script).
--
-- Every number is an integer count of microseconds or requests. Lua numbers
-- are doubles, exact for integers below 2^53; internal/algo keeps every
-- product below that bound for valid limits, and floor(a / b) of two such
-- integers is exact, so these scripts compute what the Go code does. Numbers
-- are stored as doubles packed with the struct library (exact, and cheaper
-- to read than text) or written with string.format('%d'), never with Lua's
-- default formatting, which keeps only 14 digits.
--
-- The scripts are written for the server's CPU: each run pays for every
-- closure it creates and every call it makes, so the common path is inline.
-- Redis 5 or later replicates a script's effects, which lets a script read
-- TIME and then write.
--
-- Arguments, packed with the struct library: each RESP argument and each
-- tonumber costs the server more than one struct.unpack of them all.
--   ARGV[1] the call, '<c1dd': op, n (the cost), now in µs (NaN: read the
--           Redis server's TIME). op is m (allow/meter), d (token debt),
--           q (leaky queue), r (refund) or c (cancel a queued slot).
--   ARGV[2] the limit, '<dddd': rate, period in µs, the least TTL in ms
--           (0: exactly what the state needs), and x7, the algorithm's own
--           (see each script); the same string for every call of a limit.
--   ARGV[3] refunds only (r, c): an instant in µs, as text (see each script).
-- A decision returns its six values packed as '<dddddd': allowed (0/1),
-- remaining, retry_after, reset_after, delay, at, durations in µs (one bulk
-- string is cheaper to build and to read than an array of integers). A
-- refund returns an empty string.
local floor = math.floor
local key = KEYS[1]
local op, n, now = struct.unpack('<c1dd', ARGV[1])
local rate, period, least, x7 = struct.unpack('<dddd', ARGV[2])
if now ~= now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- ttl is how long, in ms rounded up, until the instant idle (µs) at which
-- the state is back to fresh and the key can go.
local function ttl(idle)
  local ms = math.ceil((idle - now) / 1000)
  if ms < least then ms = least end
  if ms < 1 then ms = 1 end
  return ms
end
