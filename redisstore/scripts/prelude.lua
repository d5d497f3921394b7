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
-- Arguments, the same positions in every script:
--   ARGV[1] op: m (allow/meter), d (token debt), q (leaky queue),
--           r (refund), c (cancel a queued slot)
--   ARGV[2] now in µs, or "" to read the Redis server's TIME
--   ARGV[3] n, the cost
--   ARGV[4] rate, ARGV[5] period in µs
--   ARGV[6] the least TTL in ms (0: exactly what the state needs)
--   ARGV[7], ARGV[8]: the algorithm's own (see each script); a decision
--           has no ARGV[8]
-- A decision returns {allowed (0/1), remaining, retry_after, reset_after,
-- delay, at}, durations in µs.
local floor, fmt = math.floor, string.format
local key = KEYS[1]
local op = ARGV[1]
local n, rate, period, least = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local now = tonumber(ARGV[2])
if not now then
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
