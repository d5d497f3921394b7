-- prelude.lua: what every ratekeeper script starts with. The Go side
-- (scripts.go) puts after it either single.lua and one algorithm's file, for
-- a script of one call, or each algorithm's file wrapped as a function of
-- one call, local function(key, op, n, now, rate, period, least, x7, x8), and
-- a driver that calls them: many.lua for the calls of a flush, batch.lua for
-- TakeAll. The arguments are those of the call below, unpacked; x8 is
-- ARGV[3] as a number (nil for a decision).
--
-- Every number is an integer count of microseconds or requests. Lua numbers
-- are doubles, exact for integers below 2^53; internal/algo keeps every
-- product below that bound for valid limits, and floor(a / b) of two such
-- integers is exact, so these scripts compute what the Go code does. Numbers
-- are stored as doubles packed with the struct library (exact, and cheaper
-- to read than text) or written with string.format('%d'), never with Lua's
-- default formatting, which keeps only 14 digits.
--
-- The scripts are written for the server's CPU: each run pays for every
-- closure and table it creates and every call it makes, so the common path
-- is inline and the helpers below take what they need as arguments.
-- Redis 5 or later replicates a script's effects, which lets a script read
-- TIME and then write.
--
-- An algorithm's function takes, after x8, a calendar window's boundaries
-- c0..c3 (nil for other limits).
--
-- A call's arguments (single.lua), packed with the struct library: each RESP
-- argument and each tonumber costs the server more than one struct.unpack of
-- them all.
--   ARGV[1] the call, '<c1dd': op, n (the cost), now in µs (NaN: read the
--           Redis server's TIME). op is m (allow/meter), d (token debt),
--           q (leaky queue), r (refund), c (cancel a queued slot), or, for
--           the shared modes (internal/shared) on the window counters and
--           the buckets, a (add counts admitted elsewhere) or l (lease).
--   ARGV[2] the limit, '<dddd': rate, period in µs, the least TTL in ms
--           (0: exactly what the state needs), and x7, the algorithm's own
--           (see each script); the same string for every call of a limit.
--           A calendar window (fixed_window.lua) has period 0 and four
--           more doubles, c0 < c1 < c2 < c3: consecutive boundaries of its
--           windows around the client's clock (see cal_end).
--   ARGV[3] ops r, c, a and l only: an instant in µs, or for l the least
--           to grant, as text (see each script).
-- A decision returns its six values packed as '<dddddd': allowed (0/1),
-- remaining, retry_after, reset_after, delay, at, durations in µs (one bulk
-- string is cheaper to build and to read than an array of integers). A
-- refund returns an empty string.
local floor, ceil = math.floor, math.ceil

-- ttl is how long, in ms rounded up, until the instant idle (µs) at which
-- the state is back to fresh and the key can go: at least least, and 1.
-- many.lua sets ttls to a table, and then ttl answers text, formatting each
-- distinct TTL once per run: SET takes text as it is, where Redis formats a
-- number argument with printf's %.17g, which costs more than the rest of
-- SET's arguments. A script of one call answers the number: formatting it
-- in Lua costs as much as Redis does.
local ttls
local function ttl(idle, now, least)
  local ms = ceil((idle - now) / 1000)
  if ms < least then ms = least end
  if ms < 1 then ms = 1 end
  if not ttls then return ms end
  local s = ttls[ms]
  if not s then
    s = string.format('%d', ms)
    ttls[ms] = s
  end
  return s
end

-- cal_end is the end of the calendar window holding t, from four of its
-- consecutive boundaries. An instant outside [b0, b3) has a window the
-- client did not send: the clocks of client and server are a period or
-- more apart, and the script fails rather than guess.
--
-- Given wend, the end of a stored window that has ended (wend <= t), it is
-- the end of the window that a new count at t follows: the window holding
-- t, unless that window began before wend (the caller's zone data puts a
-- boundary elsewhere than the data that set wend). Then it is the end of
-- the window holding wend + h, h half the shortest window sent, so that no
-- window is shorter than h and none gives a second quota.
local function cal_end(t, b0, b1, b2, b3, wend)
  if t < b0 or t >= b3 then
    error({err = 'RKCALSKEW instant ' .. string.format('%d', t) .. ' outside the calendar boundaries sent, ' ..
      string.format('%d', b0) .. ' to ' .. string.format('%d', b3)})
  end
  if wend and (wend > b1 or t < b1) then
    local u = wend + floor(math.min(b1 - b0, b2 - b1, b3 - b2) / 2)
    if u > t and u < b3 then t = u end
  end
  if t < b1 then return b1 end
  if t < b2 then return b2 end
  return b3
end
