-- fixed_window.lua: the fixed window counter (internal/algo/window.go).
-- State: the end of the window counted and its count, packed as two
-- little-endian doubles (struct '<d<d'). x7 is the windows' offset (0: aligned to the Unix epoch); for
-- op r, x8 is the instant the refunded request was counted at. Windows
-- are [k·period+offset, (k+1)·period+offset).
local offset = x7

local wend, count = 0, 0
local s = redis.call('GET', key)
if s then
  wend, count = struct.unpack('<d<d', s)
end

if op == 'r' or op == 'c' then
  -- Refund only if the request's window is still the one counting.
  local at = x8
  if s and floor((at - offset) / period) * period + offset + period == wend then
    count = count - n
    if count < 0 then count = 0 end
    redis.call('SET', key, struct.pack('<d<d', wend, count), 'PX', ttl(wend, now, least))
  end
  return ''
end

-- Roll to the window holding now; a clock that went back into an earlier
-- window keeps counting in the latest one.
local e = floor((now - offset) / period) * period + offset + period
if e > wend then
  wend, count = e, 0
end
local allowed, retry, reset = 0, 0, 0
if count + n <= rate then
  allowed = 1
  if n > 0 then
    count = count + n
    redis.call('SET', key, struct.pack('<d<d', wend, count), 'PX', ttl(wend, now, least))
  end
else
  retry = wend - now
end
if count > 0 then reset = wend - now end
local rem = rate - count
if rem < 0 then rem = 0 end
return struct.pack('<dddddd', allowed, rem, retry, reset, 0, now)
