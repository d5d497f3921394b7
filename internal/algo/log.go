package algo

// Log is the state of a sliding window log: the timestamps of the requests
// it counts, oldest first, in a ring that never holds more than Rate entries
// (only the newest Rate entries can ever decide a request). The zero Log is
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
func (g *Log) expire(l Limit, now int64) {
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

// SlidingLog decides n requests against a sliding window log: at now it drops
// entries older than now-Period, and the request passes iff the count plus n
// is at most Rate. Admitted requests are logged (n entries); refused ones too
// if LogRejected. A clock that went backwards counts as standing still at the
// newest entry, so entries stay in order; the result's At says which instant
// was used.
func (g *Log) SlidingLog(l Limit, now, n int64) Result {
	t := max(now, g.Newest())
	g.expire(l, t)
	r := Result{Limit: l.Rate, At: t}
	if int64(g.size)+n <= l.Rate {
		r.Allowed = true
		g.push(int(l.Rate), n, t)
	} else {
		if l.LogRejected {
			g.push(int(l.Rate), n, t)
		}
		// The request fits once all but Rate-n of the counted entries have
		// left the window: entry k leaves at k+Period+1.
		k := int64(g.size) - (l.Rate - n) - 1
		r.RetryAfter = g.at(int(k)) + l.Period + 1 - now
	}
	r.Remaining = clamp(l.Rate-int64(g.size), 0, l.Rate)
	if g.size > 0 {
		r.ResetAfter = g.Newest() + l.Period + 1 - now
	}
	return r
}

// Check is SlidingLog without changing the log: what it would decide.
func (g *Log) Check(l Limit, now, n int64) Result {
	t := max(now, g.Newest())
	cutoff := t - l.Period
	i := 0 // first entry still in the window
	for i < g.size && g.at(i) < cutoff {
		i++
	}
	count := int64(g.size - i)
	r := Result{Limit: l.Rate, At: t}
	newest := g.Newest()
	if count+n <= l.Rate {
		r.Allowed = true
		count += n
		if n > 0 {
			newest = t
		}
	} else {
		if l.LogRejected {
			// The penalty entries push out the oldest: decide as SlidingLog
			// does, on a copy (a rare path).
			c := g.Clone()
			return c.SlidingLog(l, now, n)
		}
		k := count - (l.Rate - n) - 1
		r.RetryAfter = g.at(i+int(k)) + l.Period + 1 - now
	}
	r.Remaining = clamp(l.Rate-count, 0, l.Rate)
	if count > 0 {
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
func (g *Log) IdleAt(l Limit) int64 {
	if g.size == 0 {
		return 0
	}
	return g.Newest() + l.Period + 1
}
