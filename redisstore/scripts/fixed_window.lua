-- fixed_window.lua: the fixed window counter (internal/algo/window.go).
-- State: the string "end:count", the end of the window counted and its
-- count. ARGV[7] is the windows' offset (0: aligned to the Unix epoch); for
-- op r, ARGV[8] is the instant the refunded request was counted at.
local offset = tonumber(ARGV[7])

local function window_end(t)
  return fdiv(t - offset, period) * period + offset + period
end

local wend, count = 0, 0
local s = redis.call('GET', key)
if s then
  local a, b = string.match(s, '^(%-?%d+):(%d+)$')
  wend, count = tonumber(a), tonumber(b)
end

local function save()
  redis.call('SET', key, fmt(wend) .. ':' .. fmt(count), 'PX', ttl(wend, now, least))
end

if op == 'r' or op == 'c' then
  if s and window_end(tonumber(ARGV[8])) == wend then
    count = count - n
    if count < 0 then count = 0 end
    save()
  end
  return 0
end

local e = window_end(now)
if e > wend then
  wend, count = e, 0
end
local allowed, retry, reset = 0, 0, 0
if count + n <= rate then
  count = count + n
  allowed = 1
  if n > 0 then save() end
else
  retry = wend - now
end
if count > 0 then reset = wend - now end
return {allowed, clamp(rate - count, 0, rate), retry, reset, 0, now}
