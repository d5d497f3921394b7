package algo

// Bucket is the state of a token bucket and of a leaky bucket: one instant,
// Tail + Frac/Rate µs. At that instant the bucket is next full (token bucket)
// or, which is the same thing seen from the other side, next empty (leaky
// bucket).
// Before Tail the bucket holds (Tail-now)·Rate/Period requests' worth of
// water, that is Capacity minus that many tokens.
//
// The zero Bucket is full of tokens and empty of water. 0 <= Frac < Rate.
//
// One state serves three decisions, which Apply makes as its Mode says:
// Metered (token bucket Allow, leaky bucket Allow), Debited (token bucket
// Reserve) and Queued (leaky bucket Reserve).
type Bucket struct {
	Tail int64
	Frac int64
}

// level is the water in the bucket at now, in ticks of 1/Rate µs (one request
// is Period ticks). It saturates just above capacity when a clock that went
// backwards leaves Tail far ahead, so that nothing overflows.
func (b Bucket) level(l *Limit, now int64) int64 {
	if b.Tail < now {
		return 0
	}
	gap := b.Tail - now
	if gap > l.FullGap {
		return (l.Burst+1)*l.Period + 1
	}
	return gap*l.Rate + b.Frac
}

// untilEmpty is how long until the bucket holds no water (is full of tokens),
// rounded up to the microsecond.
func (b Bucket) untilEmpty(now int64) int64 {
	if b.Tail < now || (b.Tail == now && b.Frac == 0) {
		return 0
	}
	d := b.Tail - now
	if b.Frac > 0 {
		d++
	}
	return d
}

// start is where new water goes: on top of what is there, or at now if the
// bucket has drained.
func (b Bucket) start(now int64) Bucket {
	if b.Tail < now || (b.Tail == now && b.Frac == 0) {
		return Bucket{Tail: now}
	}
	return b
}

// add pours n requests' worth of water on top of b.
func (b Bucket) add(l *Limit, n int64) Bucket {
	f := b.Frac + n*l.Period
	q := f / l.Rate // one division serves both parts
	return Bucket{Tail: b.Tail + q, Frac: f - q*l.Rate}
}

// fits reports how far in the future the tail may lie for n more requests to
// leave at most room·Period ticks of water: the request fits iff Tail-now is
// at most the returned gap.
func (b Bucket) fits(l *Limit, n, room int64) int64 {
	return floorDiv((room-n)*l.Period-b.Frac, l.Rate)
}

// remaining is how many more single requests fit under room·Period ticks.
func remaining(level int64, l *Limit, room int64) int64 {
	r := floorDiv(room*l.Period-level, l.Period)
	return clamp(r, 0, l.Burst)
}

func clamp(v, lo, hi int64) int64 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

// Mode is which of a bucket's three decisions Apply makes.
type Mode uint8

const (
	// Metered decides now whether n requests fit in a bucket of capacity
	// Burst that drains (refills) at Rate per Period, and takes them if so:
	// the token bucket's Allow and the leaky bucket's meter.
	Metered Mode = iota
	// Debited takes n tokens now even if the bucket does not hold them yet,
	// and says in Delay how long until it would have: the token bucket's
	// Reserve. It never refuses; a waiter bounds it with its deadline.
	Debited
	// Queued gives n requests the next free slots of a FIFO queue drained
	// at Rate per Period, and says in Delay how long to wait for the first
	// of them: the leaky bucket's Reserve. The request whose slot is now
	// proceeds at once and is not waiting; it is refused iff more than Burst
	// requests would be waiting.
	Queued
)

// Apply makes the decision mode says for n requests at now, and changes b
// in place only if it takes something. A call with n == 0 asks without
// taking: it is allowed, and RetryAfter is the wait until one request would
// be (zero for Debited, which never refuses).
//
// Metering one request, the stores' common case, is decided right here on
// scalars, from the figures Params precomputes: with at most one division
// when it is allowed, and none when refused. Every other decision goes
// through the bucket's level (meter, debt, queue). The two ways of metering
// agree exactly: TestApplyMatchesMeter and every fuzzed step check it.
func (b *Bucket) Apply(l *Limit, mode Mode, now, n int64) Result {
	if mode != Metered || n != 1 || l.FullGap == 0 {
		if l.FullGap == 0 { // built by hand rather than by Params
			p := l.prepared()
			l = &p
		}
		switch mode {
		case Debited:
			return b.debt(l, now, n)
		case Queued:
			return b.queue(l, now, n)
		}
		return b.meter(l, now, n)
	}
	rate, period, burst := l.Rate, l.Period, l.Burst
	tail, frac := b.Tail, b.Frac
	r := Result{Limit: burst, At: now}
	// One more request is refused iff the water after it would pass
	// capacity: (Tail-now)·Rate + Frac > (Burst-1)·Period. Past FullGap,
	// where the product could grow large, the answer is always no.
	if gap := tail - now; gap > l.FullGap || (gap >= 0 && gap*rate+frac > (burst-1)*period) {
		// RetryAfter is gap - fits(l, 1, Burst), and that is Fit1, less
		// one when Frac > Fit1Frac (0 <= Frac < Rate). A refused single
		// request leaves less than one request's room: Remaining is 0.
		q := l.Fit1
		if frac > l.Fit1Frac {
			q--
		}
		r.RetryAfter = gap - q
		r.ResetAfter = gap
		if frac > 0 {
			r.ResetAfter++
		}
		return r
	}
	if tail < now || (tail == now && frac == 0) { // drained: start afresh
		tail, frac = now, 0
	}
	tail += l.Step
	if frac += l.StepFrac; frac >= rate {
		tail, frac = tail+1, frac-rate
	}
	b.Tail, b.Frac = tail, frac
	r.Allowed = true
	// Now now <= tail and the water is within capacity.
	r.Remaining = min((burst*period-(tail-now)*rate-frac)/period, burst)
	r.ResetAfter = tail - now
	if frac > 0 {
		r.ResetAfter++
	}
	return r
}

// meter is Apply's Metered for any cost, computed from the bucket's level:
// the reference its one-request case is checked against. l is prepared.
func (b *Bucket) meter(l *Limit, now, n int64) Result {
	r := Result{Allowed: true, Limit: l.Burst, At: now}
	if q := b.fits(l, max(n, 1), l.Burst); b.Tail-now > q {
		// Refused, or for n == 0 the wait until one request would fit.
		r.Allowed = n == 0
		r.RetryAfter = b.Tail - now - q
	} else if n > 0 {
		*b = b.start(now).add(l, n)
	}
	r.Remaining = remaining(b.level(l, now), l, l.Burst)
	r.ResetAfter = b.untilEmpty(now)
	return r
}

// debt is Apply's Debited. l is prepared.
func (b *Bucket) debt(l *Limit, now, n int64) Result {
	if n == 0 {
		r := b.meter(l, now, 0)
		r.RetryAfter = 0 // a debt is never refused
		return r
	}
	*b = b.start(now).add(l, n)
	r := Result{Allowed: true, Limit: l.Burst, At: now}
	// The request may proceed once the water is back under capacity.
	if d := b.Tail - now - b.fits(l, 0, l.Burst); d > 0 {
		r.Delay = d
	}
	r.Remaining = remaining(b.level(l, now), l, l.Burst)
	r.ResetAfter = b.untilEmpty(now)
	return r
}

// queue is Apply's Queued. l is prepared.
func (b *Bucket) queue(l *Limit, now, n int64) Result {
	r := Result{Allowed: true, Limit: l.Burst, At: now}
	if q := b.fits(l, max(n, 1), l.Burst+1); b.Tail-now > q {
		// Refused, or for n == 0 the wait until one request would fit.
		r.RetryAfter = b.Tail - now - q
		if n > 0 {
			r.Allowed = false
			r.ResetAfter = b.untilEmpty(now)
			return r
		}
	} else if n > 0 {
		s := b.start(now)
		r.Delay = s.untilEmpty(now)
		*b = s.add(l, n)
	}
	r.Remaining = remaining(b.level(l, now), l, l.Burst+1)
	r.ResetAfter = b.untilEmpty(now)
	return r
}

// Refund gives back n requests taken by an earlier decision. A token (or
// meter) refund drains that much water. A queue refund gives the slots back
// only if no later request queued behind them; slot is the instant
// (at+delay) the refunded request was to proceed. Otherwise the slots stay
// as a gap, so that the queue never sends two requests in one slot.
func (b Bucket) Refund(l *Limit, n int64, queue bool, slot int64) Bucket {
	f := b.Frac - n*l.Period
	back := Bucket{Tail: b.Tail + floorDiv(f, l.Rate)}
	back.Frac = f - floorDiv(f, l.Rate)*l.Rate
	if queue && (back.Tail > slot || (back.Tail == slot && back.Frac > 0)) {
		return b
	}
	return back
}

// IdleAt is when the bucket is back to its zero state (full of tokens).
func (b Bucket) IdleAt() int64 {
	if b.Frac == 0 {
		return b.Tail
	}
	return b.Tail + 1
}
