-- batch.lua: several requests decided as one, all or none (TakeAll). The Go
-- side puts before this file each algorithm's script wrapped in a function
-- of (KEYS, ARGV): algos[i] for i = 1..5 in the order token bucket, leaky
-- bucket, fixed window, sliding log, sliding window.
--
-- KEYS are the requests' keys, one each, all in one slot. ARGV[1] is now in
-- µs or "" for TIME; then 7 arguments per request: the algorithm's index,
-- op, n, rate, period, least TTL, and the script's ARGV[7].
--
-- Every request is taken; if any is refused, those allowed are given back
-- with the algorithms' own refunds. The script runs atomically, so nothing
-- comes between the take and the give-back, and the give-back is exact. It
-- returns {all allowed (0/1)} followed by each request's six values.
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local snow = string.format('%d', now)
local m = #KEYS
local out = {1}
local res = {}
for i = 1, m do
  local b = 1 + (i - 1) * 7
  local r = algos[tonumber(ARGV[b + 1])]({KEYS[i]},
    {ARGV[b + 2], snow, ARGV[b + 3], ARGV[b + 4], ARGV[b + 5], ARGV[b + 6], ARGV[b + 7]})
  res[i] = r
  if r[1] == 0 then out[1] = 0 end
end
if out[1] == 0 then
  for i = m, 1, -1 do
    local r = res[i]
    local b = 1 + (i - 1) * 7
    local n = tonumber(ARGV[b + 3])
    if r[1] == 1 and n > 0 then
      local op, x8 = 'r', r[6]
      if ARGV[b + 2] == 'q' then
        op, x8 = 'c', r[6] + r[5] -- the queue slot taken
      end
      algos[tonumber(ARGV[b + 1])]({KEYS[i]},
        {op, snow, ARGV[b + 3], ARGV[b + 4], ARGV[b + 5], ARGV[b + 6], ARGV[b + 7], string.format('%d', x8)})
    end
  end
end
for i = 1, m do
  for j = 1, 6 do
    out[#out + 1] = res[i][j]
  end
end
return out
