-- batch.lua: several requests decided as one, all or none (TakeAll). The Go
-- side puts before this file each algorithm's function (prelude.lua):
-- algos[i] for i = 1..5 in the order token bucket, leaky bucket, fixed
-- window, sliding log, sliding window.
--
-- KEYS are the requests' keys, one each, all in one slot. ARGV[1] is now,
-- packed '<d' (NaN: read TIME); then 3 arguments per request: the
-- algorithm's index (text), the call and the limit, packed as the
-- algorithms' ARGV[1] and ARGV[2] (prelude.lua), a calendar window's with
-- its boundaries; the calls' instants are
-- replaced by the batch's.
--
-- Every request is taken; if any is refused, those allowed are given back
-- with the algorithms' own refunds. The script runs atomically, so nothing
-- comes between the take and the give-back, and the give-back is exact. It
-- returns all allowed (0/1) then each request's six values, all packed as
-- doubles in one string.
local pack, unpack = struct.pack, struct.unpack
local now = unpack('<d', ARGV[1])
if now ~= now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local m = #KEYS
local all = 1
local res = {}

-- give_back refunds requests 1..last that were allowed.
local function give_back(last)
  for i = last, 1, -1 do
    local b = 2 + (i - 1) * 3
    local op, n = unpack('<c1d', ARGV[b + 1])
    local rate, period, least, x7 = unpack('<dddd', ARGV[b + 2])
    local c0, c1, c2, c3
    if period == 0 then c0, c1, c2, c3 = unpack('<dddd', ARGV[b + 2], 33) end
    local allowed, _, _, _, delay, at = unpack('<dddddd', res[i])
    if allowed == 1 and n > 0 then
      local back, x8 = 'r', at
      if op == 'q' then
        back, x8 = 'c', at + delay -- the queue slot taken
      end
      algos[tonumber(ARGV[b])](KEYS[i], back, n, now, rate, period, least, x7, x8, c0, c1, c2, c3)
    end
  end
end

-- A request that fails (a calendar window's clock skew) fails the batch
-- after the requests before it are given back: a failed batch takes
-- nothing, and the caller may send it again.
for i = 1, m do
  local b = 2 + (i - 1) * 3
  local op, n = unpack('<c1d', ARGV[b + 1])
  local rate, period, least, x7 = unpack('<dddd', ARGV[b + 2])
  local c0, c1, c2, c3
  if period == 0 then c0, c1, c2, c3 = unpack('<dddd', ARGV[b + 2], 33) end
  local ok, r = pcall(algos[tonumber(ARGV[b])], KEYS[i], op, n, now, rate, period, least, x7, nil, c0, c1, c2, c3)
  if not ok then
    give_back(i - 1)
    error(r, 0)
  end
  res[i] = r
  if unpack('<d', r) == 0 then all = 0 end
end
if all == 0 then give_back(m) end
return pack('<d', all) .. table.concat(res)
