-- fixed_window.lua: the fixed window counter (internal/algo/window.go).
-- State: the end of the window counted and its count, packed as two
-- little-endian doubles (struct '<d<d'). x7 is the windows' offset (0: aligned to the Unix epoch); for
-- op r, x8 is the instant the refunded request was counted at. Windows
-- are [k·period+offset, (k+1)·period+offset). A calendar window has period
-- 0 and its boundaries in c0..c3 (prelude.lua's cal_end).
local offset = x7

local wend, count = 0, 0
local s = redis.call('GET', key)
if s then
  wend, count = struct.unpack('<d<d', s)
end

if op == 'r' or op == 'c' then
  -- Refund only if the request's window is still the one counting.
  local at = x8
  local ae
  if period > 0 then
    ae = floor((at - offset) / period) * period + offset + period
  else
    ae = cal_end(at, c0, c1, c2, c3)
  end
  if s and ae == wend then
    count = count - n
    if count < 0 then count = 0 end
    redis.call('SET', key, struct.pack('<d<d', wend, count), 'PX', ttl(wend, now, least))
  end
  return ''
end

-- Roll to the window holding now; a clock that went back into an earlier
-- window keeps counting in the latest one. A calendar window's stored end
-- is authoritative, as in the memory store: a new window starts only once
-- it has passed, whatever the boundaries sent say (cal_end).
if period > 0 then
  local e = floor((now - offset) / period) * period + offset + period
  if e > wend then
    wend, count = e, 0
  end
elseif now >= wend then
  wend, count = cal_end(now, c0, c1, c2, c3, wend), 0
end

if op == 'a' then
  -- Add (sync mode, algo.Window.Add): n requests admitted elsewhere at
  -- instant x8, counted whatever the limit; dropped (0) if their window
  -- has ended. Answers ok, the state's end and count, now.
  local at = x8
  local ok = 1
  if n ~= 0 and period > 0 then
    local ae = floor((at - offset) / period) * period + offset + period
    if ae > wend then
      wend, count = ae, 0
    elseif ae < wend then
      ok = 0
    end
  elseif n ~= 0 and at >= wend then
    wend, count = cal_end(at, c0, c1, c2, c3, wend), 0 -- a sender ahead
  elseif n ~= 0 and (at < c0 or cal_end(at, c0, c1, c2, c3) < wend) then
    ok = 0 -- a calendar window before the stored one: ended
  end
  if ok == 1 and n ~= 0 then
    count = count + n
    if count < 0 then count = 0 end
    redis.call('SET', key, struct.pack('<d<d', wend, count), 'PX', ttl(wend, now, least))
  end
  return struct.pack('<dddddd', ok, wend, count, 0, 0, now)
end

if op == 'l' then
  -- Lease (lease mode, shared.LeaseFrom): grant the most of n, of what
  -- remains and of half of it (rounded up) that fits, unless that is fewer
  -- than x8. Answers the grant, the state's end and count, the wait until
  -- x8 would fit when nothing is granted, now.
  local rem = rate - count
  if rem < 0 then rem = 0 end
  local g = math.min(n, rem, math.max(x8, ceil(rem / 2)))
  if g >= x8 and g > 0 then
    count = count + g
    redis.call('SET', key, struct.pack('<d<d', wend, count), 'PX', ttl(wend, now, least))
    return struct.pack('<dddddd', g, wend, count, 0, 0, now)
  end
  return struct.pack('<dddddd', 0, wend, count, 0, wend - now, now)
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
-- Asked without taking (n == 0): the wait until one request would pass.
if n == 0 and count + 1 > rate then retry = wend - now end
if count > 0 then reset = wend - now end
local rem = rate - count
if rem < 0 then rem = 0 end
return struct.pack('<dddddd', allowed, rem, retry, reset, 0, now)
