package algo

// windowEnd is the end of the window holding now: windows are
// [k·Period+Offset, (k+1)·Period+Offset), or follow l.Cal.
func windowEnd(l *Limit, now int64) int64 {
	if l.Cal.Unit != NoCalendar {
		_, end := l.Cal.Window(now)
		return end
	}
	return floorDiv(now-l.Offset, l.Period)*l.Period + l.Offset + l.Period
}

// Window is the state of a fixed window counter: the end of the window it
// counts and how many requests that window admitted. The zero Window counts
// nothing.
type Window struct {
	End   int64
	Count int64
}

// roll moves w to the window holding now. A clock that went back into an
// earlier window keeps counting in the latest one, so it mints nothing.
func (w Window) roll(l *Limit, now int64) Window {
	if l.Cal.Unit != NoCalendar && now < w.End {
		return w // no later window starts before w.End: skip the zone's arithmetic
	}
	if end := windowEnd(l, now); end > w.End {
		return Window{End: end}
	}
	return w
}

// Fixed decides n requests against a fixed window counter: they pass iff the
// window's count plus n is at most Rate. A call with n == 0 asks without
// taking: it is allowed, and RetryAfter is the wait until one request would
// be.
func (w Window) Fixed(l *Limit, now, n int64) (Window, Result) {
	w = w.roll(l, now)
	r := Result{Limit: l.Rate, At: now}
	if w.Count+max(n, 1) > l.Rate {
		// Refused, or for n == 0 the wait until one request would pass.
		r.RetryAfter = w.End - now
	}
	if w.Count+n <= l.Rate {
		w.Count += n
		r.Allowed = true
		if n > 0 {
			r.RetryAfter = 0
		}
	}
	r.Remaining = clamp(l.Rate-w.Count, 0, l.Rate)
	if w.Count > 0 {
		r.ResetAfter = w.End - now
	}
	return w, r
}

// Refund gives back n requests counted at instant at, if their window is
// still the one counting.
func (w Window) Refund(l *Limit, n, at int64) Window {
	if windowEnd(l, at) == w.End {
		w.Count = max(0, w.Count-n)
	}
	return w
}

// IdleAt is when the window is back to its zero state.
func (w Window) IdleAt() int64 { return w.End }

// Sliding is the state of a sliding window counter: the end of the current
// fixed window and the counts of it and of the one before.
type Sliding struct {
	End  int64
	Prev int32
	Cur  int32
}

func (s Sliding) roll(l *Limit, now int64) Sliding {
	end := windowEnd(l, now)
	switch {
	case end <= s.End:
		return s
	case end == s.End+l.Period:
		return Sliding{End: end, Prev: s.Cur}
	default:
		return Sliding{End: end}
	}
}

// elapsed is how far into its current window now is; zero if the clock is
// behind the window, which weighs the previous window fully.
func (s Sliding) elapsed(l *Limit, now int64) int64 {
	return clamp(now-(s.End-l.Period), 0, l.Period-1)
}

// estimate is floor(prev·(1-f)) + cur at elapsed e of the window.
func estimate(prev, cur, e, period int64) int64 {
	return prev*(period-e)/period + cur
}

// SlidingWindow decides n requests against a sliding window counter. At
// elapsed fraction f of the current window the estimate is
// floor(prev·(1-f)) + cur, and n pass iff estimate + n <= Rate. A call with
// n == 0 asks without taking: it is allowed, and RetryAfter is the wait
// until one request would be.
func (s Sliding) SlidingWindow(l *Limit, now, n int64) (Sliding, Result) {
	s = s.roll(l, now)
	e := s.elapsed(l, now)
	lag := max(0, s.End-l.Period-now) // a clock behind the window waits for it
	prev, cur := int64(s.Prev), int64(s.Cur)
	est := estimate(prev, cur, e, l.Period)
	r := Result{Limit: l.Rate, At: now}
	if est+n <= l.Rate {
		if n > 0 {
			cur += n
			est += n
			s.Cur = int32(cur)
		}
		r.Allowed = true
	} else {
		r.RetryAfter = lag + slidingWait(prev, cur, e, l.Period, l.Rate-n)
	}
	if n == 0 && est+1 > l.Rate {
		// Asked without taking: the wait until one request would pass.
		r.RetryAfter = lag + slidingWait(prev, cur, e, l.Period, l.Rate-1)
	}
	r.Remaining = clamp(l.Rate-est, 0, l.Rate)
	if est > 0 {
		r.ResetAfter = lag + slidingWait(prev, cur, e, l.Period, 0)
	}
	return s, r
}

// slidingWait is the least time from elapsed e of the current window until
// the estimate is at most a (a >= 0). That is first within this window, as
// the previous window's weight decays, else in the next one, where this
// window's count becomes the previous.
func slidingWait(prev, cur, e, period, a int64) int64 {
	if cur <= a {
		b := a - cur
		if prev <= b {
			return 0
		}
		// floor(prev·(W-x)/W) <= b  <=>  prev·(W-x) <= (b+1)·W - 1
		x := period - ((b+1)*period-1)/prev
		if x <= e {
			return 0
		}
		if x < period {
			return x - e
		}
		return period - e
	}
	x := period - ((a+1)*period-1)/cur
	return period - e + x
}

// Refund gives back n requests counted at instant at, in whichever of the two
// windows counted them.
func (s Sliding) Refund(l *Limit, n, at int64) Sliding {
	switch windowEnd(l, at) {
	case s.End:
		s.Cur = int32(max(0, int64(s.Cur)-n))
	case s.End - l.Period:
		s.Prev = int32(max(0, int64(s.Prev)-n))
	}
	return s
}

// IdleAt is when both counts are zero. The counter behaves as fresh
// earlier, once its estimate reaches zero (a decision's At + ResetAfter).
func (s Sliding) IdleAt(l *Limit) int64 {
	switch {
	case s.Cur > 0:
		return s.End + l.Period
	case s.Prev > 0:
		return s.End
	}
	return 0
}
