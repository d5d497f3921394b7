-- single.lua: the driver of one call (see prelude.lua): its key and packed
-- arguments, run by the algorithm's function, algo.
local op, n, now = struct.unpack('<c1dd', ARGV[1])
local rate, period, least, x7 = struct.unpack('<dddd', ARGV[2])
if now ~= now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local x8
if ARGV[3] then x8 = tonumber(ARGV[3]) end
return algo(KEYS[1], op, n, now, rate, period, least, x7, x8)
