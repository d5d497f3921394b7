package storetest

import (
	"time"

	"github.com/ratekeeper/ratekeeper"
)

const (
	us  = time.Microsecond
	ms  = time.Millisecond
	sec = time.Second
	min = time.Minute
)

// Timelines returns the conformance timelines: every worked example of the
// algorithms' exact semantics (docs/algorithms.md), with exact retry-after
// and reset-after at the microsecond. They cover rates that do not divide
// their period, costs above one, clocks that step back, refunds and
// cancels. They cover peeks (the wait for one request, taking nothing),
// resets (one key's, leaving another's alone) and calendar windows
// (CalendarTimelines).
func Timelines() []Timeline {
	return append(timelines(), CalendarTimelines()...)
}

// timelines are the timelines of windows and buckets on the epoch.
func timelines() []Timeline {
	allowed := func(rem int, reset time.Duration) Want { return Want{Allowed: true, Remaining: rem, ResetAfter: reset} }
	refused := func(rem int, retry, reset time.Duration) Want {
		return Want{Remaining: rem, RetryAfter: retry, ResetAfter: reset}
	}
	queued := func(rem int, delay, reset time.Duration) Want {
		return Want{Allowed: true, Remaining: rem, Delay: delay, ResetAfter: reset}
	}
	return []Timeline{
		{
			// DESIGN: C=3, 3 per minute (a token every 20 s): three at t=0
			// pass, a fourth at 10 s is refused for 10 s, at 60 s three pass.
			Name:  "token_bucket/design_3_per_minute",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 3, Period: min},
			Steps: []Step{
				{At: 0, Op: Peek, Want: allowed(3, 0)},
				{At: 0, Want: allowed(2, 20*sec)},
				{At: 0, Want: allowed(1, 40*sec)},
				{At: 0, Want: allowed(0, 60*sec)},
				{At: 10 * sec, Want: refused(0, 10*sec, 50*sec)},
				{At: 60 * sec, Want: allowed(2, 20*sec)},
				{At: 60 * sec, Want: allowed(1, 40*sec)},
				{At: 60 * sec, Want: allowed(0, 60*sec)},
			},
		},
		{
			// A client that retries exactly after RetryAfter gets in; one
			// microsecond earlier it does not.
			Name:  "token_bucket/retry_after_is_exact",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 3, Period: min},
			Steps: []Step{
				{At: 0, N: 3, Want: allowed(0, 60*sec)},
				{At: 10 * sec, Want: refused(0, 10*sec, 50*sec)},
				{At: 20*sec - us, Want: refused(0, us, 40*sec+us)},
				{At: 20 * sec, Want: allowed(0, 60*sec)},
			},
		},
		{
			// 3 per second: a token every 333333⅓ µs, kept exact.
			Name:  "token_bucket/fractional_rate",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 3, Period: sec},
			Steps: []Step{
				{At: 0, N: 3, Want: allowed(0, sec)},
				{At: 333333 * us, Want: refused(0, us, 666667*us)},
				{At: 333334 * us, Want: allowed(0, 999999*us+us)},
				{At: sec + 333334*us, N: 3, Want: allowed(0, sec)},
			},
		},
		{
			Name:  "token_bucket/cost_above_one",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 10, Period: sec},
			Steps: []Step{
				{At: 0, N: 5, Want: allowed(5, 500*ms)},
				{At: 0, N: 6, Want: refused(5, 100*ms, 500*ms)},
				{At: 100 * ms, N: 6, Want: allowed(0, sec)},
			},
		},
		{
			Name:  "token_bucket/burst_above_rate",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1, Period: sec, Burst: 3},
			Steps: []Step{
				{At: 0, N: 3, Want: allowed(0, 3*sec)},
				{At: 0, Want: refused(0, sec, 3*sec)},
				{At: 2500 * ms, Want: allowed(1, 1500*ms)},
			},
		},
		{
			// Reserve on a token bucket takes tokens on credit and says how
			// long until they exist.
			Name:  "token_bucket/reserve_waits_for_tokens",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1, Period: sec, Burst: 2},
			Steps: []Step{
				{At: 0, Op: Reserve, Want: queued(1, 0, sec)},
				{At: 0, Op: Reserve, Want: queued(0, 0, 2*sec)},
				{At: 0, Op: Reserve, Want: queued(0, sec, 3*sec)},
				{At: 0, Op: Reserve, Want: queued(0, 2*sec, 4*sec)},
				{At: 0, Op: Cancel},
				{At: 0, Op: Reserve, Want: queued(0, 2*sec, 4*sec)},
			},
		},
		{
			// A clock that steps back never mints tokens.
			Name:  "token_bucket/clock_steps_back",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 2, Period: sec},
			Steps: []Step{
				{At: 10 * sec, Want: allowed(1, 500*ms)},
				{At: 10 * sec, Want: allowed(0, sec)},
				{At: 9 * sec, Want: refused(0, 1500*ms, 2*sec)},
				{At: 10*sec + 500*ms, Want: allowed(0, sec)},
			},
		},
		{
			Name:  "token_bucket/refund",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 2, Period: sec},
			Steps: []Step{
				{At: 0, Want: allowed(1, 500*ms)},
				{At: 0, Want: allowed(0, sec)},
				{At: 0, Op: Refund},
				{At: 0, Op: Peek, Want: allowed(1, 500*ms)},
				{At: 0, Want: allowed(0, sec)},
			},
		},
		{
			// DESIGN: queue C=2, R=1/s, five requests at t=0: delays 0 s,
			// 1 s, 2 s; the 4th and 5th are refused.
			Name:  "leaky_bucket/design_queue",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 1, Period: sec, Burst: 2},
			Steps: []Step{
				{At: 0, Op: Reserve, Want: queued(2, 0, sec)},
				{At: 0, Op: Reserve, Want: queued(1, sec, 2*sec)},
				{At: 0, Op: Reserve, Want: queued(0, 2*sec, 3*sec)},
				{At: 0, Op: Reserve, Want: refused(0, sec, 3*sec)},
				{At: 0, Op: Reserve, Want: refused(0, sec, 3*sec)},
				{At: sec - us, Op: Reserve, Want: refused(0, us, 2*sec+us)},
				{At: sec, Op: Reserve, Want: queued(0, 2*sec, 3*sec)},
			},
		},
		{
			// The meter with the same state takes C at one instant, one
			// fewer than the queue.
			Name:  "leaky_bucket/design_meter",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 1, Period: sec, Burst: 2},
			Steps: []Step{
				{At: 0, Want: allowed(1, sec)},
				{At: 0, Want: allowed(0, 2*sec)},
				{At: 0, Want: refused(0, sec, 2*sec)},
				{At: sec, Want: allowed(0, 2*sec)},
			},
		},
		{
			// 3 per second: slots every 333333⅓ µs; delays round up.
			Name:  "leaky_bucket/fractional_queue",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 3, Period: sec, Burst: 2},
			Steps: []Step{
				{At: 0, Op: Reserve, Want: queued(2, 0, 333334*us)},
				{At: 0, Op: Reserve, Want: queued(1, 333334*us, 666667*us)},
				{At: 0, Op: Reserve, Want: queued(0, 666667*us, sec)},
				{At: 0, Op: Reserve, Want: refused(0, 333334*us, sec)},
				{At: 333333 * us, Op: Reserve, Want: refused(0, us, 666667*us)},
				{At: 333334 * us, Op: Reserve, Want: queued(0, 666666*us, sec)},
			},
		},
		{
			// Cancelling the last place in the queue frees it; the next
			// request gets the same slot.
			Name:  "leaky_bucket/cancel_last_slot",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 1, Period: sec, Burst: 2},
			Steps: []Step{
				{At: 0, Op: Reserve, Want: queued(2, 0, sec)},
				{At: 0, Op: Reserve, Want: queued(1, sec, 2*sec)},
				{At: 0, Op: Reserve, Want: queued(0, 2*sec, 3*sec)},
				{At: 500 * ms, Op: Cancel},
				{At: 500 * ms, Op: Reserve, Want: queued(0, 1500*ms, 2500*ms)},
			},
		},
		{
			// DESIGN: 5 per minute. Five pass in 2:00:30..2:00:59, a sixth
			// in that minute is refused until 2:01:00, five more pass in
			// 2:01:00..2:01:29: ten within the minute 2:00:30..2:01:30, the
			// boundary burst.
			Name:  "fixed_window/design_boundary_burst",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Period: min},
			Start: Epoch.Add(2 * time.Hour),
			Steps: []Step{
				{At: 30 * sec, Want: allowed(4, 30*sec)},
				{At: 35 * sec, Want: allowed(3, 25*sec)},
				{At: 40 * sec, Want: allowed(2, 20*sec)},
				{At: 45 * sec, Want: allowed(1, 15*sec)},
				{At: 50 * sec, Want: allowed(0, 10*sec)},
				{At: 59 * sec, Want: refused(0, sec, sec)},
				{At: 60*sec - us, Want: refused(0, us, us)},
				{At: 60 * sec, Want: allowed(4, 60*sec)},
				{At: 65 * sec, Want: allowed(3, 55*sec)},
				{At: 70 * sec, Want: allowed(2, 50*sec)},
				{At: 75 * sec, Want: allowed(1, 45*sec)},
				{At: 80 * sec, Want: allowed(0, 40*sec)},
				{At: 89 * sec, Want: refused(0, 31*sec, 31*sec)},
			},
		},
		{
			Name:  "fixed_window/clock_steps_back",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 2, Period: min},
			Start: Epoch.Add(time.Hour),
			Steps: []Step{
				{At: 30 * sec, N: 2, Want: allowed(0, 30*sec)},
				{At: -10 * sec, Want: refused(0, 70*sec, 70*sec)},
			},
		},
		{
			Name:  "fixed_window/refund",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 2, Period: min},
			Steps: []Step{
				{At: sec, Want: allowed(1, 59*sec)},
				{At: sec, Want: allowed(0, 59*sec)},
				{At: 2 * sec, Op: Refund},
				{At: 2 * sec, Want: allowed(0, 58*sec)},
				{At: 2 * sec, Want: refused(0, 58*sec, 58*sec)},
			},
		},
		{
			// DESIGN: 2 per minute. 1:00:01 and 1:00:30 pass, 1:00:50 is
			// refused until the oldest entry leaves, 1:01:40 passes.
			Name:  "sliding_log/design_2_per_minute",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 2, Period: min},
			Start: Epoch.Add(time.Hour),
			Steps: []Step{
				{At: sec, Want: allowed(1, min+us)},
				{At: 30 * sec, Want: allowed(0, min+us)},
				{At: 50 * sec, Want: refused(0, 11*sec+us, 40*sec+us)},
				{At: 100 * sec, Want: allowed(1, min+us)},
			},
		},
		{
			// The window is [t-W, t): an entry stamped exactly t-W counts.
			Name:  "sliding_log/window_edge",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 2, Period: min},
			Start: Epoch.Add(time.Hour),
			Steps: []Step{
				{At: sec, Want: allowed(1, min+us)},
				{At: 30 * sec, Want: allowed(0, min+us)},
				{At: 61 * sec, Want: refused(0, us, 29*sec+us)},
				{At: 61*sec + us, Want: allowed(0, min+us)},
			},
		},
		{
			// LogRejected: a refused request is logged too, as a penalty.
			Name:  "sliding_log/log_rejected",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 2, Period: min, LogRejected: true},
			Steps: []Step{
				{At: 0, N: 2, Want: allowed(0, min+us)},
				{At: 30 * sec, Want: refused(0, 30*sec+us, min+us)},
				// Without the penalty this would pass at 60 s+1 µs.
				{At: 40 * sec, Want: refused(0, 50*sec+us, min+us)},
				{At: 90*sec + us, Want: allowed(0, min+us)},
			},
		},
		{
			Name:  "sliding_log/clock_steps_back",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 1, Period: min},
			Steps: []Step{
				{At: 30 * sec, Want: allowed(0, min+us)},
				{At: 20 * sec, Want: refused(0, 70*sec+us, 70*sec+us)},
			},
		},
		{
			Name:  "sliding_log/refund",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 2, Period: min},
			Steps: []Step{
				{At: sec, Want: allowed(1, min+us)},
				{At: sec, Want: allowed(0, min+us)},
				{At: 5 * sec, Op: Refund},
				{At: 5 * sec, Want: allowed(0, min+us)},
			},
		},
		{
			// DESIGN: L=7 with prev=5 and cur=3 at 30% of the window:
			// floor(3.5)+3 = 6, so one request passes and the next is
			// refused.
			Name:  "sliding_window/design_7_per_minute",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 7, Period: min},
			Steps: []Step{
				{At: 10 * sec, N: 5, Want: allowed(2, 98*sec+us)},
				{At: 61 * sec, Want: allowed(2, 59*sec+us)},
				{At: 62 * sec, Want: allowed(1, 88*sec+us)},
				{At: 63 * sec, Want: allowed(0, 97*sec+us)},
				{At: 78 * sec, Want: allowed(0, 87*sec+us)},
				{At: 78 * sec, Want: refused(0, 6*sec+us, 87*sec+us)},
				{At: 84 * sec, Want: refused(0, us, 81*sec+us)},
				{At: 84*sec + us, Want: allowed(0, 84*sec)},
			},
		},
		{
			// DESIGN: L=100 with prev=88 and cur=12 at 25%:
			// floor(66)+12 = 78, so the request passes.
			Name:  "sliding_window/design_100_per_minute",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 100, Period: min},
			Steps: []Step{
				{At: sec, N: 88, Want: allowed(12, 118318182*us)},
				{At: 60500 * ms, N: 12, Want: allowed(1, 114500001*us)},
				{At: 75 * sec, Want: allowed(21, 100384616*us)},
			},
		},
		{
			Name:  "sliding_window/clock_steps_back",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 2, Period: min},
			Start: Epoch.Add(time.Hour),
			Steps: []Step{
				{At: 30 * sec, N: 2, Want: allowed(0, 60*sec+us)},
				{At: -10 * sec, Want: refused(0, 70*sec+us, 100*sec+us)},
			},
		},
		{
			Name:  "sliding_window/refund",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 2, Period: min},
			Steps: []Step{
				{At: sec, Want: allowed(1, 59*sec+us)},
				{At: sec, Want: allowed(0, 89*sec+us)},
				{At: 2 * sec, Op: Refund},
				{At: 2 * sec, Want: allowed(0, 88*sec+us)},
			},
		},
		// Peek and Reset, one timeline per algorithm: a spent key peeks
		// refused with the wait for one request and takes nothing; a reset
		// makes it fresh and leaves the key "other" as it was.
		{
			Name:  "token_bucket/peek_and_reset",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 3, Period: min},
			Steps: []Step{
				{At: 0, N: 3, Want: allowed(0, 60*sec)},
				{At: 10 * sec, Op: Peek, Want: refused(0, 10*sec, 50*sec)},
				{At: 10 * sec, Op: Peek, Want: refused(0, 10*sec, 50*sec)},
				{At: 10 * sec, Key: "other", Want: allowed(2, 20*sec)},
				{At: 10 * sec, Op: Reset},
				{At: 10 * sec, Op: Peek, Want: allowed(3, 0)},
				{At: 10 * sec, Want: allowed(2, 20*sec)},
				{At: 10 * sec, Key: "other", Want: allowed(1, 40*sec)},
				{At: 10 * sec, Op: Reset, Key: "never-used"},
			},
		},
		{
			Name:  "leaky_bucket/peek_and_reset",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 1, Period: sec, Burst: 2},
			Steps: []Step{
				{At: 0, N: 2, Want: allowed(0, 2*sec)},
				{At: 0, Op: Peek, Want: refused(0, sec, 2*sec)},
				{At: 0, Key: "other", Want: allowed(1, sec)},
				{At: 0, Op: Reset},
				{At: 0, Op: Peek, Want: allowed(2, 0)},
				{At: 0, N: 2, Want: allowed(0, 2*sec)},
				{At: 0, Key: "other", Want: allowed(0, 2*sec)},
			},
		},
		{
			Name:  "fixed_window/peek_and_reset",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Period: min},
			Steps: []Step{
				{At: 30 * sec, N: 5, Want: allowed(0, 30*sec)},
				{At: 40 * sec, Op: Peek, Want: refused(0, 20*sec, 20*sec)},
				{At: 40 * sec, Key: "other", Want: allowed(4, 20*sec)},
				{At: 40 * sec, Op: Reset},
				{At: 40 * sec, Op: Peek, Want: allowed(5, 0)},
				{At: 40 * sec, Want: allowed(4, 20*sec)},
				{At: 40 * sec, Key: "other", Want: allowed(3, 20*sec)},
			},
		},
		{
			Name:  "sliding_log/peek_and_reset",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 2, Period: min},
			Steps: []Step{
				{At: 0, N: 2, Want: allowed(0, 60*sec+us)},
				{At: 10 * sec, Op: Peek, Want: refused(0, 50*sec+us, 50*sec+us)},
				{At: 10 * sec, Key: "other", Want: allowed(1, 60*sec+us)},
				{At: 10 * sec, Op: Reset},
				{At: 10 * sec, Op: Peek, Want: allowed(2, 0)},
				{At: 10 * sec, Want: allowed(1, 60*sec+us)},
				{At: 10 * sec, Key: "other", Want: allowed(0, 60*sec+us)},
			},
		},
		{
			Name:  "sliding_window/peek_and_reset",
			Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 2, Period: min},
			Steps: []Step{
				{At: sec, N: 2, Want: allowed(0, 89*sec+us)},
				{At: 2 * sec, Op: Peek, Want: refused(0, 58*sec+us, 88*sec+us)},
				{At: 2 * sec, Key: "other", Want: allowed(1, 58*sec+us)},
				{At: 2 * sec, Op: Reset},
				{At: 2 * sec, Op: Peek, Want: allowed(2, 0)},
				{At: 2 * sec, Want: allowed(1, 58*sec+us)},
				{At: 2 * sec, Key: "other", Want: allowed(0, 88*sec+us)},
			},
		},
	}
}
