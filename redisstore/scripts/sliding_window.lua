-- sliding_window.lua: the sliding window counter (internal/algo/window.go).
-- State: the end of the current fixed window and the counts of it and of the
-- one before, packed as three little-endian doubles (struct '<d<d<d'). x7 is the windows' offset;
-- for op r, x8 is the instant the refunded request was counted at.
local offset = x7

local wend, prev, cur = 0, 0, 0
local s = redis.call('GET', key)
if s then
  wend, prev, cur = struct.unpack('<d<d<d', s)
end

-- The common case first, inline: admitting n > 0 (ops m, the only decision
-- op for windows). Reset: with cur > 0 after admitting, the estimate is zero
-- once this window and the weight of it as the previous one have passed.
if op == 'm' and n > 0 then
  local e = floor((now - offset) / period) * period + offset + period
  local w, p, c = wend, prev, cur
  if e == w + period then
    w, p, c = e, c, 0
  elseif e > w then
    w, p, c = e, 0, 0
  end
  local el = now - (w - period)
  if el < 0 then el = 0 elseif el > period - 1 then el = period - 1 end
  local est = floor(p * (period - el) / period) + c
  if est + n <= rate then
    c = c + n
    redis.call('SET', key, struct.pack('<d<d<d', w, p, c), 'PX', ttl(w + period, now, least))
    local lag = w - period - now
    if lag < 0 then lag = 0 end
    local reset = lag + period - el + period - floor((period - 1) / c)
    return struct.pack('<dddddd', 1, rate - est - n, 0, reset, 0, now)
  end
end

local function save()
  local idle = 0
  if cur > 0 then
    idle = wend + period
  elseif prev > 0 then
    idle = wend
  end
  redis.call('SET', key, struct.pack('<d<d<d', wend, prev, cur), 'PX', ttl(idle, now, least))
end

if op == 'r' or op == 'c' then
  -- Refund in whichever of the two windows counted the request.
  if s then
    local e = floor((x8 - offset) / period) * period + offset + period
    if e == wend then
      cur = math.max(0, cur - n)
      save()
    elseif e == wend - period then
      prev = math.max(0, prev - n)
      save()
    end
  end
  return ''
end

local e = floor((now - offset) / period) * period + offset + period
if e == wend + period then
  wend, prev, cur = e, cur, 0
elseif e > wend then
  wend, prev, cur = e, 0, 0
end

if op == 'a' then
  -- Add (sync mode, algo.Sliding.Add): n requests admitted elsewhere at
  -- instant x8, counted in whichever of the two windows holds x8 (a later
  -- window rolls the state to it), whatever the limit; dropped (0) if that
  -- is neither. Answers ok, the state's end, previous and current counts,
  -- now.
  local at = x8
  if n == 0 then at = now end -- a read
  local ae = floor((at - offset) / period) * period + offset + period
  if ae == wend + period then
    wend, prev, cur = ae, cur, 0
  elseif ae > wend then
    wend, prev, cur = ae, 0, 0
  end
  local ok = 1
  if ae == wend then
    cur = math.min(math.max(cur + n, 0), 2147483647)
  elseif ae == wend - period then
    prev = math.min(math.max(prev + n, 0), 2147483647)
  else
    ok = 0
  end
  if ok == 1 and n ~= 0 then save() end
  return struct.pack('<dddddd', ok, wend, prev, cur, 0, now)
end

-- el is how far into the current window now is (0 if the clock is behind
-- it); lag is how far behind.
local el = now - (wend - period)
if el < 0 then el = 0 elseif el > period - 1 then el = period - 1 end
local lag = wend - period - now
if lag < 0 then lag = 0 end

-- wait is the least time from el until the estimate is at most a: first
-- within this window, as the previous window's weight decays, else in the
-- next one, where this window's count becomes the previous.
local function wait(a)
  if cur <= a then
    local b = a - cur
    if prev <= b then return 0 end
    -- floor(prev·(W-x)/W) <= b  <=>  prev·(W-x) <= (b+1)·W - 1
    local x = period - floor(((b + 1) * period - 1) / prev)
    if x <= el then return 0 end
    if x < period then return x - el end
    return period - el
  end
  local x = period - floor(((a + 1) * period - 1) / cur)
  return period - el + x
end

local est = floor(prev * (period - el) / period) + cur

if op == 'l' then
  -- Lease (lease mode, shared.LeaseFrom): see fixed_window.lua. Answers
  -- the grant, the state's end, previous and current counts, the wait
  -- until x8 would fit when nothing is granted, now.
  local rem = rate - est
  if rem < 0 then rem = 0 end
  local g = math.min(n, rem, math.max(x8, ceil(rem / 2)))
  if g >= x8 and g > 0 then
    cur = cur + g
    save()
    return struct.pack('<dddddd', g, wend, prev, cur, 0, now)
  end
  local retry = lag + wait(rate - x8)
  if retry < 1 then retry = 1 end
  return struct.pack('<dddddd', 0, wend, prev, cur, retry, now)
end

local allowed, retry, reset = 0, 0, 0
if est + n <= rate then
  allowed = 1
  if n > 0 then
    cur = cur + n
    est = est + n
    save()
  end
else
  retry = lag + wait(rate - n)
end
-- Asked without taking (n == 0): the wait until one request would pass.
if n == 0 and est + 1 > rate then retry = lag + wait(rate - 1) end
if est > 0 then reset = lag + wait(0) end
local rem = rate - est
if rem < 0 then rem = 0 end
return struct.pack('<dddddd', allowed, rem, retry, reset, 0, now)
