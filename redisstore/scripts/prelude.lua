-- prelude.lua: helpers every ratekeeper script starts with (the Go side
-- prepends this file to each algorithm's script).
--
-- Every number is an integer count of microseconds or requests. Lua numbers
-- are doubles, exact for integers below 2^53; internal/algo keeps every
-- product below that bound for valid limits, and floor(a / b) of two such
-- integers is exact, so these scripts compute what the Go code does.
--
-- Arguments, the same positions in every script:
--   ARGV[1] op: m (allow/meter), d (token debt), q (leaky queue),
--           r (refund), c (cancel a queued slot)
--   ARGV[2] now in µs, or "" to read the Redis server's TIME
--   ARGV[3] n, the cost
--   ARGV[4] rate, ARGV[5] period in µs
--   ARGV[6] the least TTL in ms (0: exactly what the state needs)
--   ARGV[7], ARGV[8]: the algorithm's own (see each script)
-- A decision returns {allowed (0/1), remaining, retry_after, reset_after,
-- delay, at}, durations in µs.

local function fdiv(a, b)
  return math.floor(a / b)
end

local function fmt(v)
  return string.format('%d', v)
end

local function clamp(v, lo, hi)
  if v < lo then return lo end
  if v > hi then return hi end
  return v
end

local function clock(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- ttl is how long, in ms rounded up, until the instant idle (µs) at which
-- the state is back to fresh and the key can go.
local function ttl(idle, now, least)
  local ms = math.ceil((idle - now) / 1000)
  if ms < 1 then ms = 1 end
  if ms < least then ms = least end
  return ms
end

local op = ARGV[1]
local now = clock(ARGV[2])
local n = tonumber(ARGV[3])
local rate = tonumber(ARGV[4])
local period = tonumber(ARGV[5])
local least = tonumber(ARGV[6])
local key = KEYS[1]
