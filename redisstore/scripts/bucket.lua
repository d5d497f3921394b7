-- bucket.lua: the token bucket and the leaky bucket (internal/algo/bucket.go).
-- State: tail and frac packed as two little-endian doubles (struct '<d<d'),
-- the instant tail + frac/rate µs at which the bucket is next full of tokens
-- (empty of water). x7 is the
-- capacity (burst); for op c, x8 is the slot (at + delay) of the
-- cancelled request.
local burst = x7

local tail, frac = 0, 0
local s = redis.call('GET', key)
if s then
  tail, frac = struct.unpack('<d<d', s)
end

if op == 'r' or op == 'c' then
  local f = frac - n * period
  local q = floor(f / rate)
  local bt, bf = tail + q, f - q * rate
  local slot = x8
  if s and not (op == 'c' and (bt > slot or (bt == slot and bf > 0))) then
    redis.call('SET', key, struct.pack('<d<d', bt, bf), 'PX', ttl(bt + 1, now, least))
  end
  return ''
end

if op == 'a' then
  -- Add (sync mode, algo.Bucket.Add): pour n requests' worth of water
  -- admitted elsewhere at instant x8 (no later than now), past the
  -- capacity if need be; a negative n takes water out, as a refund does.
  -- Answers 1, the state's tail and frac, now.
  if n > 0 then
    local at = x8
    if at > now then at = now end
    if tail < at or (tail == at and frac == 0) then
      tail, frac = at, 0
    end
    local f = frac + n * period
    tail, frac = tail + floor(f / rate), f % rate
  elseif n < 0 then
    local f = frac + n * period
    local q = floor(f / rate)
    tail, frac = tail + q, f - q * rate
  end
  if n ~= 0 then
    redis.call('SET', key, struct.pack('<d<d', tail, frac), 'PX', ttl(tail + 1, now, least))
  end
  return struct.pack('<dddddd', 1, tail, frac, 0, 0, now)
end

if op == 'l' then
  -- Lease (lease mode, shared.LeaseFrom): see fixed_window.lua; what
  -- remains is the meter's remaining. Answers the grant, the state's tail
  -- and frac, the wait until x8 would fit when nothing is granted, now.
  local level = 0
  if tail >= now then
    local gap = tail - now
    if gap > floor(burst * period / rate) + 1 then
      level = (burst + 1) * period + 1
    else
      level = gap * rate + frac
    end
  end
  local rem = floor((burst * period - level) / period)
  if rem < 0 then rem = 0 elseif rem > burst then rem = burst end
  local g = math.min(n, rem, math.max(x8, ceil(rem / 2)))
  while g >= x8 and g > 0 do
    if tail - now <= floor(((burst - g) * period - frac) / rate) then
      if tail < now or (tail == now and frac == 0) then
        tail, frac = now, 0
      end
      local f = frac + g * period
      tail, frac = tail + floor(f / rate), f % rate
      redis.call('SET', key, struct.pack('<d<d', tail, frac), 'PX', ttl(tail + 1, now, least))
      return struct.pack('<dddddd', g, tail, frac, 0, 0, now)
    end
    g = g - 1
  end
  local retry = tail - now - floor(((burst - x8) * period - frac) / rate)
  if retry < 1 then retry = 1 end
  return struct.pack('<dddddd', 0, tail, frac, 0, retry, now)
end

-- The common case first, inline: the meter (token bucket and leaky bucket
-- Allow) admitting n > 0. It fits iff tail - now <= q; after pouring, the
-- tail lies ahead of now (each request adds period/rate >= 1 µs), so the
-- bucket is neither drained nor past its saturation bound.
if op == 'm' and n > 0 then
  local q = floor(((burst - n) * period - frac) / rate)
  if tail - now <= q then
    if tail < now or (tail == now and frac == 0) then
      tail, frac = now, 0
    end
    local f = frac + n * period
    tail, frac = tail + floor(f / rate), f % rate
    redis.call('SET', key, struct.pack('<d<d', tail, frac), 'PX', ttl(tail + 1, now, least))
    local gap = tail - now
    local empty = gap
    if frac > 0 then empty = gap + 1 end
    return struct.pack('<dddddd', 1, floor((burst * period - gap * rate - frac) / period), 0, empty, 0, now)
  end
end

-- room is how many requests' worth of water the bucket may hold: burst for
-- the meter and the debt, one more for the queue, whose head is not waiting.
local room = burst
if op == 'q' then room = burst + 1 end

-- The bucket as it stands: drained (all of its water gone by now), the water
-- level in ticks of 1/rate µs, and how long until it is empty.
local drained = tail < now or (tail == now and frac == 0)

-- decide answers from the state tail, frac: allowed (0/1), retry, delay.
local function answer(allowed, retry, delay)
  local level, empty = 0, 0
  if tail >= now then
    local gap = tail - now
    if gap > floor(burst * period / rate) + 1 then
      level = (burst + 1) * period + 1
    else
      level = gap * rate + frac
    end
  end
  if not (tail < now or (tail == now and frac == 0)) then
    empty = tail - now
    if frac > 0 then empty = empty + 1 end
  end
  local rem = floor((room * period - level) / period)
  if rem < 0 then rem = 0 elseif rem > burst then rem = burst end
  if allowed == 0 and op == 'q' then rem = 0 end
  return struct.pack('<dddddd', allowed, rem, retry, empty, delay, now)
end

if n == 0 then
  -- Asked without taking: allowed, with the wait until one request would
  -- be (none for the debt, which never refuses).
  local retry = 0
  if op ~= 'd' then
    local q = floor(((room - 1) * period - frac) / rate)
    if tail - now > q then retry = tail - now - q end
  end
  return answer(1, retry, 0)
end

if op ~= 'd' then
  -- The meter and the queue refuse a request that would overflow room.
  local q = floor(((room - n) * period - frac) / rate)
  if tail - now > q then
    return answer(0, tail - now - q, 0)
  end
end

-- Pour n requests' worth of water on top of what is there (or at now).
local delay = 0
if drained then
  tail, frac = now, 0
elseif op == 'q' then
  delay = tail - now
  if frac > 0 then delay = delay + 1 end
end
local f = frac + n * period
tail, frac = tail + floor(f / rate), f % rate
redis.call('SET', key, struct.pack('<d<d', tail, frac), 'PX', ttl(tail + 1, now, least))
if op == 'd' then
  -- Debt: proceed once the water is back under burst.
  delay = tail - now - floor((burst * period - frac) / rate)
  if delay < 0 then delay = 0 end
end
return answer(1, 0, delay)
