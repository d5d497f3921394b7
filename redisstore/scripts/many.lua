-- many.lua: independent decisions and refunds of concurrent callers, run
-- one after the other in one script run, as if each had been its own: the
-- pipeliner sends them so on a standalone or Sentinel-managed server, which
-- spares the server a command, a script call and a TIME per decision. The Go
-- side puts before this file each algorithm's script wrapped in a function
-- of (KEYS, ARGV): algos[i] for i = 1..5 in algoIndex order.
--
-- KEYS are the calls' keys, one each. ARGV holds, per call, the algorithm's
-- index (text) then the call's own ARGV (prelude.lua): the call, the limit,
-- and for a refund (op r or c) its instant. Calls that read the server's
-- TIME share one reading. It returns one string, each call's reply in turn:
-- 'o' and what the call's own script returns, or 'e' and the error it raised
-- (one call's error is not the others'), each after its length packed '<I4'.
-- One bulk string is cheaper for the client to read than an array.
local now
local out = {}
local j = 1
for i = 1, #KEYS do
  local a, call = tonumber(ARGV[j]), ARGV[j + 1]
  local op, n, at = struct.unpack('<c1dd', call)
  if at ~= at then
    if not now then
      local t = redis.call('TIME')
      now = t[1] * 1000000 + t[2]
    end
    call = struct.pack('<c1dd', op, n, now)
  end
  local args = {call, ARGV[j + 2]}
  j = j + 3
  if op == 'r' or op == 'c' then
    args[3] = ARGV[j]
    j = j + 1
  end
  local ok, r = pcall(algos[a], {KEYS[i]}, args)
  local tag = 'o'
  if not ok then
    tag = 'e'
    if type(r) == 'table' then r = r.err end
    r = tostring(r)
  end
  out[#out + 1] = tag
  out[#out + 1] = struct.pack('<I4', #r)
  out[#out + 1] = r
end
return table.concat(out)
