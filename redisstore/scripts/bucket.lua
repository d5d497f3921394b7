-- bucket.lua: the token bucket and the leaky bucket (internal/algo/bucket.go).
-- State: the string "tail:frac", the instant tail + frac/rate µs at which
-- the bucket is next full of tokens (empty of water). ARGV[7] is the
-- capacity (burst); for op c, ARGV[8] is the slot (at + delay) of the
-- cancelled request.
local burst = tonumber(ARGV[7])

local tail, frac = 0, 0
local s = redis.call('GET', key)
if s then
  local a, b = string.match(s, '^(%-?%d+):(%d+)$')
  tail, frac = tonumber(a), tonumber(b)
end

local function save()
  redis.call('SET', key, fmt(tail) .. ':' .. fmt(frac), 'PX', ttl(tail + 1, now, least))
end

if op == 'r' or op == 'c' then
  local f = frac - n * period
  local q = fdiv(f, rate)
  local bt, bf = tail + q, f - q * rate
  if s and not (op == 'c' and (bt > tonumber(ARGV[8]) or (bt == tonumber(ARGV[8]) and bf > 0))) then
    tail, frac = bt, bf
    save()
  end
  return 0
end

local function drained(t, f)
  return t < now or (t == now and f == 0)
end

local function level(t, f)
  if t < now then return 0 end
  local gap = t - now
  if gap > fdiv(burst * period, rate) + 1 then
    return (burst + 1) * period + 1
  end
  return gap * rate + f
end

local function until_empty(t, f)
  if drained(t, f) then return 0 end
  local d = t - now
  if f > 0 then d = d + 1 end
  return d
end

local function fits(m, room)
  return fdiv((room - m) * period - frac, rate)
end

local function remaining(lv, room)
  return clamp(fdiv(room * period - lv, period), 0, burst)
end

-- pour starts the water at now if the bucket has drained, adds n requests
-- on top, and stores the result.
local function pour()
  if drained(tail, frac) then
    tail, frac = now, 0
  end
  local f = frac + n * period
  tail, frac = tail + fdiv(f, rate), f % rate
  save()
end

if op == 'q' then
  if n == 0 then
    return {1, remaining(level(tail, frac), burst + 1), 0, until_empty(tail, frac), 0, now}
  end
  local q = fits(n, burst + 1)
  if tail - now > q then
    return {0, 0, tail - now - q, until_empty(tail, frac), 0, now}
  end
  local delay = 0
  if not drained(tail, frac) then
    delay = until_empty(tail, frac)
  end
  pour()
  return {1, remaining(level(tail, frac), burst + 1), 0, until_empty(tail, frac), delay, now}
end

if n == 0 then
  return {1, remaining(level(tail, frac), burst), 0, until_empty(tail, frac), 0, now}
end

if op == 'd' then
  pour()
  local delay = tail - now - fits(0, burst)
  if delay < 0 then delay = 0 end
  return {1, remaining(level(tail, frac), burst), 0, until_empty(tail, frac), delay, now}
end

-- op m: the meter.
local q = fits(n, burst)
if tail - now > q then
  return {0, remaining(level(tail, frac), burst), tail - now - q, until_empty(tail, frac), 0, now}
end
pour()
return {1, remaining(level(tail, frac), burst), 0, until_empty(tail, frac), 0, now}
