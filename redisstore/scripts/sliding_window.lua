-- sliding_window.lua: the sliding window counter (internal/algo/window.go).
-- State: the string "end:prev:cur", the end of the current fixed window and
-- the counts of it and of the one before. ARGV[7] is the windows' offset;
-- for op r, ARGV[8] is the instant the refunded request was counted at.
local offset = tonumber(ARGV[7])

local function window_end(t)
  return fdiv(t - offset, period) * period + offset + period
end

local wend, prev, cur = 0, 0, 0
local s = redis.call('GET', key)
if s then
  local a, b, c = string.match(s, '^(%-?%d+):(%d+):(%d+)$')
  wend, prev, cur = tonumber(a), tonumber(b), tonumber(c)
end

local function save()
  local idle = 0
  if cur > 0 then
    idle = wend + period
  elseif prev > 0 then
    idle = wend
  end
  redis.call('SET', key, fmt(wend) .. ':' .. fmt(prev) .. ':' .. fmt(cur), 'PX', ttl(idle, now, least))
end

if op == 'r' or op == 'c' then
  if s then
    local e = window_end(tonumber(ARGV[8]))
    if e == wend then
      cur = math.max(0, cur - n)
      save()
    elseif e == wend - period then
      prev = math.max(0, prev - n)
      save()
    end
  end
  return 0
end

local e = window_end(now)
if e == wend + period then
  wend, prev, cur = e, cur, 0
elseif e > wend then
  wend, prev, cur = e, 0, 0
end

-- wait is the least time from elapsed el of the current window until the
-- estimate is at most a.
local function wait(el, a)
  if cur <= a then
    local b = a - cur
    if prev <= b then return 0 end
    local x = period - fdiv((b + 1) * period - 1, prev)
    if x <= el then return 0 end
    if x < period then return x - el end
    return period - el
  end
  local x = period - fdiv((a + 1) * period - 1, cur)
  return period - el + x
end

local el = clamp(now - (wend - period), 0, period - 1)
local lag = math.max(0, wend - period - now)
local est = fdiv(prev * (period - el), period) + cur
local allowed, retry, reset = 0, 0, 0
if est + n <= rate then
  allowed = 1
  if n > 0 then
    cur = cur + n
    est = est + n
    save()
  end
else
  retry = lag + wait(el, rate - n)
end
if est > 0 then reset = lag + wait(el, 0) end
return {allowed, clamp(rate - est, 0, rate), retry, reset, 0, now}
