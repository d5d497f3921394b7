// Package algo holds ratekeeper's five algorithms as pure functions of
// (state, limit, now, n): no I/O, no locks, no clock.
//
// All times are integer microseconds since the Unix epoch and all arithmetic
// is on int64. Microseconds are the unit because the Redis store runs the same
// rules in Lua, whose numbers are doubles that hold integers exactly only up to
// 2^53. Every product computed here stays below that bound for any limit that
// passes validation (see MaxUnits), so the memory and Redis stores can agree
// to the microsecond.
//
// Rates that do not divide their period (3 per second is one request every
// 333333⅓ µs) are kept exact by carrying the fraction: a bucket's state is a
// whole microsecond plus Frac/Rate of one. Nothing is rounded except a wait
// reported to a caller, which is rounded up to the next microsecond so that a
// caller who waits exactly that long is never refused.
package algo

// MaxUnits bounds every product the algorithms compute (capacity × period for
// the buckets, (limit+1) × window for the sliding window counter): 2^53, the
// largest integer a Lua number holds exactly.
const MaxUnits = 1 << 53

// Limit is a validated limit in the algorithms' units.
type Limit struct {
	Rate   int64 // requests per Period; for the window algorithms the limit L
	Period int64 // µs; for the window algorithms the window W
	Burst  int64 // the buckets' capacity C (already defaulted to Rate)
	Offset int64 // where windows start, in [0, Period): 0 aligns them to the epoch
	// LogRejected makes the sliding log record refused requests too.
	LogRejected bool
	// Cal, when its Unit is set, places fixed windows on the calendar
	// instead of Period and Offset.
	Cal Calendar
	// FullGap is Burst·Period/Rate + 1: past this many µs ahead of now, a
	// bucket's tail means it is over capacity (so level need not multiply).
	// Params fills it in; zero means "compute it".
	FullGap int64
	// Step and StepFrac are Period/Rate and Period%Rate: how far one
	// request moves a bucket's tail, so that the common cost of one needs no
	// division. Params fills them in with FullGap.
	Step, StepFrac int64
	// Fit1 and Fit1Frac are (Burst-1)·Period divided by Rate, quotient
	// and remainder: where a bucket's tail may lie for one more request to
	// fit, so that refusing one needs no division either.
	Fit1, Fit1Frac int64
}

// prepared is l with FullGap, Step and StepFrac filled in.
func (l Limit) prepared() Limit {
	if l.FullGap == 0 {
		l.FullGap = l.Burst*l.Period/l.Rate + 1
		l.Step, l.StepFrac = l.Period/l.Rate, l.Period%l.Rate
		l.Fit1 = (l.Burst - 1) * l.Period / l.Rate
		l.Fit1Frac = (l.Burst-1)*l.Period - l.Fit1*l.Rate
	}
	return l
}

// Result is what one decision reports. Durations are µs.
type Result struct {
	Allowed    bool
	Limit      int64
	Remaining  int64
	RetryAfter int64 // zero when allowed
	ResetAfter int64 // until the state is back to fresh
	Delay      int64 // queue and reserve modes: how long to wait before proceeding
	// At is the instant the decision counted for. It is now, except when the
	// clock went backwards and an algorithm held to the latest instant it had
	// seen (the sliding log stamps entries in order).
	At int64
}

// floorDiv is a/b rounded towards minus infinity, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Offset places a key's windows: a hash of the key modulo the window, so that
// clients with staggered windows do not all reset at the same instant. It is
// FNV-1a (64 bit), which the Redis store's callers compute the same way.
func Offset(key string, period int64) int64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime64
	}
	return int64(h % uint64(period))
}
