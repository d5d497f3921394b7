-- many.lua: independent decisions and refunds of concurrent callers, run
-- one after the other in one script run, as if each had been its own: the
-- pipeliner sends them so on a standalone or Sentinel-managed server, which
-- spares the server a command, a script call and a TIME per decision. The Go
-- side puts before this file each algorithm's function (prelude.lua):
-- algos[i] for i = 1..5 in algoIndex order.
--
-- KEYS are the calls' keys, one each. ARGV[1] holds every call's arguments,
-- one record after the other, packed '<Bc1ddddddd': the algorithm's index,
-- op, n, now (NaN: the server's TIME, read once for all), the limit's rate,
-- period, least TTL and x7, and x8 (NaN for a decision); a calendar
-- window's record (period 0) ends with its four boundaries, '<dddd'. One argument costs
-- the server less than several per call, and the client less to write.
--
-- It returns one string, each call's reply in turn: 'd' and the 48 bytes of
-- a decision, 'r' for a refund's empty reply, 'o' and any other reply, or
-- 'e' and the error the call raised (one call's error is not the others'),
-- the last two after their length packed '<I4'. One bulk string is cheaper
-- for the client to read than an array.
local unpack, pack = struct.unpack, struct.pack
local buf = ARGV[1]
local pos = 1
local now
local out = {}
ttls = {}
local k = 0
for i = 1, #KEYS do
  local a, op, n, at, rate, period, least, x7, x8
  a, op, n, at, rate, period, least, x7, x8, pos = unpack('<Bc1ddddddd', buf, pos)
  if at ~= at then
    if not now then
      local t = redis.call('TIME')
      now = t[1] * 1000000 + t[2]
    end
    at = now
  end
  if x8 ~= x8 then x8 = nil end
  local c0, c1, c2, c3
  if period == 0 then c0, c1, c2, c3, pos = unpack('<dddd', buf, pos) end
  local ok, r = pcall(algos[a], KEYS[i], op, n, at, rate, period, least, x7, x8, c0, c1, c2, c3)
  if ok and #r == 48 then
    out[k + 1] = 'd'
    out[k + 2] = r
    k = k + 2
  elseif ok and r == '' then
    k = k + 1
    out[k] = 'r'
  else
    local tag = 'o'
    if not ok then
      tag = 'e'
      if type(r) == 'table' then r = r.err end
    end
    r = tostring(r)
    out[k + 1] = tag
    out[k + 2] = pack('<I4', #r)
    out[k + 3] = r
    k = k + 3
  end
end
return table.concat(out)
