// Package ratefields turns a Decision into the figures of the rate limit
// fields, which httplimit, grpclimit and rls render each in their own form:
// one decision gives the same figures everywhere.
//
// Waits are counted in microseconds and given in whole seconds, rounded up
// after one microsecond is taken off (Seconds); docs/gateway.md says why.
package ratefields

import (
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// Figures are one decision's rate limit fields, in whole numbers.
type Figures struct {
	// Limit is X-RateLimit-Limit: the most that can pass at once (the
	// buckets' burst, the windows' rate).
	Limit int
	// Remaining is X-RateLimit-Remaining and RateLimit's r, in 0..Limit.
	Remaining int
	// Reset is X-RateLimit-Reset: the seconds until the limit is fully
	// replenished; for a refusal, never less than RetryAfter.
	Reset int64
	// T is RateLimit's t: Reset when allowed, RetryAfter when refused.
	T int64
	// RetryAfter is Retry-After for a refusal, at least 1; 0 when allowed.
	RetryAfter int64
}

// Of returns d's figures.
func Of(d ratekeeper.Decision) Figures {
	return Figures{Limit: d.Limit, Remaining: Remaining(d), Reset: Reset(d), T: T(d), RetryAfter: RetryAfter(d)}
}

// Remaining is d's Remaining within 0..Limit. It and the three below each
// give one figure of Of, for a hot path that sends only some of them.
func Remaining(d ratekeeper.Decision) int { return min(max(d.Remaining, 0), d.Limit) }

// Reset is Figures.Reset.
func Reset(d ratekeeper.Decision) int64 {
	r := Seconds(d.ResetAfter)
	if !d.Allowed {
		r = max(r, RetrySeconds(d.RetryAfter))
	}
	return r
}

// T is Figures.T.
func T(d ratekeeper.Decision) int64 {
	if d.Allowed {
		return Seconds(d.ResetAfter)
	}
	return RetrySeconds(d.RetryAfter)
}

// RetryAfter is Figures.RetryAfter.
func RetryAfter(d ratekeeper.Decision) int64 {
	if d.Allowed {
		return 0
	}
	return RetrySeconds(d.RetryAfter)
}

// Policy is l as RateLimit-Policy states it for a decision at instant at.
// That is a quota of q units per w seconds. q is the capacity; w is the
// period, and for the buckets the time to refill the whole burst. A calendar
// window's w is the length of its period that holds at: a 31-day month, a
// 23-hour day. Only a calendar window reads at.
func Policy(l ratekeeper.Limit, at time.Time) (q int, w int64) {
	q = l.Capacity()
	d := l.Period
	if start, end, ok := algo.CalendarPeriod(l, at); ok {
		d = end.Sub(start)
	} else if l.Algorithm == ratekeeper.TokenBucket || l.Algorithm == ratekeeper.LeakyBucket {
		d = time.Duration(float64(l.Period) * float64(q) / float64(l.Rate))
	}
	return q, max(1, Ceil(d))
}

// Seconds is a decision's wait in whole seconds: rounded up after one
// microsecond (the stores' tick) is taken off, and never negative. A
// sliding window's place comes back a window and a microsecond after the
// request that held it (its edge is inclusive): that is the window, not a
// second more. A client that waits as long from the answer is never early,
// since the answer leaves after the decision.
func Seconds(d time.Duration) int64 {
	return Ceil(d - time.Microsecond)
}

// RetrySeconds is a refusal's wait, Seconds(d), but at least 1.
func RetrySeconds(d time.Duration) int64 {
	return max(1, Seconds(d))
}

// Ceil rounds d up to whole seconds, and a negative d to 0: a wait that is
// not a decision's (a failure policy's) is given so.
func Ceil(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
