package algo

// Log is the state of a sliding window log: the timestamps of the requests
// it counts, oldest first. They are kept in a ring that never holds more
// than Rate entries (only the newest Rate entries can ever decide a request). The zero Log is
// empty; it grows as entries arrive.
type Log struct {
	buf  []int64
	head int // index of the oldest entry in buf
	size int
}

// at is the i-th oldest entry.
func (g *Log) at(i int) int64 { return g.buf[(g.head+i)%len(g.buf)] }

// Len is how many entries the log holds.
func (g *Log) Len() int { return g.size }

// Newest is the latest entry, or 0 for an empty log.
func (g *Log) Newest() int64 {
	if g.size == 0 {
		return 0
	}
	return g.at(g.size - 1)
}

// expire drops the entries that have left the window [now-Period, now): an
// entry stamped exactly now-Period still counts.
func (g *Log) expire(l *Limit, now int64) {
	for g.size > 0 && g.buf[g.head] < now-l.Period {
		g.head = (g.head + 1) % len(g.buf)
		g.size--
	}
	if g.size == 0 {
		g.head = 0
	}
}

// push appends n entries stamped t, dropping the oldest past capacity.
func (g *Log) push(capacity int, n int64, t int64) {
	for ; n > 0; n-- {
		switch {
		case g.size < len(g.buf):
			g.buf[(g.head+g.size)%len(g.buf)] = t
			g.size++
		case len(g.buf) < capacity:
			// Grow: unroll the ring into a larger slice.
			nb := make([]int64, min(capacity, max(4, 2*len(g.buf))))
			for i := 0; i < g.size; i++ {
				nb[i] = g.at(i)
			}
			g.buf, g.head = nb, 0
			g.buf[g.size] = t
			g.size++
		default: // full: the oldest entry makes room
			g.buf[g.head] = t
			g.head = (g.head + 1) % len(g.buf)
		}
	}
}

// SlidingLog decides n requests against a sliding window log: the request
// passes iff the entries in the window [t-Period, t) plus n are at most
// Rate. Admitted requests are logged (n entries stamped t); refused ones too
// if LogRejected. A call with n == 0 asks without taking: it is allowed, and
// RetryAfter is the wait until one request would be. The instant t is now,
// or the newest entry if the clock went back, so entries stay in order; the
// result's At says which instant was used.
//
// Only a request that is logged drops expired entries. Its stamp then
// becomes the newest, which later requests are held to, so an entry dropped
// at t can never be needed by a request stamped before t.
func (g *Log) SlidingLog(l *Limit, now, n int64) Result {
	if n > 0 && l.LogRejected {
		t := max(now, g.Newest())
		allowed := g.count(l, t)+n <= l.Rate
		g.expire(l, t)
		g.push(int(l.Rate), n, t)
		return g.result(l, now, t, n, allowed, 0)
	}
	r := g.Check(l, now, n)
	if r.Allowed && n > 0 {
		g.expire(l, r.At)
		g.push(int(l.Rate), n, r.At)
	}
	return r
}

// count is how many entries lie in the window ending at t.
func (g *Log) count(l *Limit, t int64) int64 {
	return int64(g.size - g.firstFrom(t-l.Period))
}

// firstFrom is the index of the oldest entry at or after cutoff.
func (g *Log) firstFrom(cutoff int64) int {
	lo, hi := 0, g.size
	for lo < hi {
		m := (lo + hi) / 2
		if g.at(m) < cutoff {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Check is SlidingLog without changing the log: what it would decide.
func (g *Log) Check(l *Limit, now, n int64) Result {
	t := max(now, g.Newest())
	if n > 0 && l.LogRejected {
		// The penalty entries push out the oldest: decide on a copy (this
		// path serves only dry runs).
		return g.Clone().SlidingLog(l, now, n)
	}
	allowed := g.count(l, t)+n <= l.Rate
	pending := int64(0)
	if allowed {
		pending = n
	}
	return g.result(l, now, t, n, allowed, pending)
}

// result reports a decision at t on the log as it stands plus pending
// entries about to be stamped t.
func (g *Log) result(l *Limit, now, t, n int64, allowed bool, pending int64) Result {
	i := g.firstFrom(t - l.Period)
	count := int64(g.size-i) + pending
	r := Result{Limit: l.Rate, At: t, Allowed: allowed}
	if m := max(n, 1); !allowed || (n == 0 && count+1 > l.Rate) {
		// The request (for n == 0, one request) fits once all but Rate-m
		// of the counted entries have left the window: an entry stamped e
		// leaves at e+Period+1.
		k := count - (l.Rate - m) - 1
		r.RetryAfter = g.at(i+int(k)) + l.Period + 1 - now
	}
	r.Remaining = clamp(l.Rate-count, 0, l.Rate)
	if count > 0 {
		newest := g.Newest()
		if pending > 0 {
			newest = t
		}
		r.ResetAfter = newest + l.Period + 1 - now
	}
	return r
}

// Clone is a deep copy of the log.
func (g *Log) Clone() *Log {
	c := &Log{buf: make([]int64, len(g.buf)), size: g.size}
	for i := 0; i < g.size; i++ {
		c.buf[i] = g.at(i)
	}
	return c
}

// Refund removes n entries stamped at (the Result's At of the decision that
// logged them), newest first.
func (g *Log) Refund(n, at int64) {
	keep := make([]int64, 0, g.size)
	for i := g.size - 1; i >= 0; i-- {
		if v := g.at(i); v == at && n > 0 {
			n--
		} else {
			keep = append(keep, v)
		}
	}
	for i, j := 0, len(keep)-1; i < j; i, j = i+1, j-1 {
		keep[i], keep[j] = keep[j], keep[i]
	}
	g.head, g.size = 0, len(keep)
	copy(g.buf, keep)
}

// IdleAt is when every entry has left the window.
func (g *Log) IdleAt(l *Limit) int64 {
	if g.size == 0 {
		return 0
	}
	return g.Newest() + l.Period + 1
}
