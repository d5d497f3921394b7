-- single.lua: a script of one call is prelude.lua, this file, then the
-- algorithm's file as it is, which sees here the call's key and arguments
-- as its function in many.lua would (see prelude.lua).
local key = KEYS[1]
local op, n, now = struct.unpack('<c1dd', ARGV[1])
local rate, period, least, x7 = struct.unpack('<dddd', ARGV[2])
local c0, c1, c2, c3
if period == 0 then c0, c1, c2, c3 = struct.unpack('<dddd', ARGV[2], 33) end
if now ~= now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local x8
if ARGV[3] then x8 = tonumber(ARGV[3]) end
