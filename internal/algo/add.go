package algo

import "math"

// The Add methods count requests that were already admitted elsewhere: the
// deltas an instance deciding locally (sync mode) sends to the shared state.
// They never refuse. They place the n requests admitted at instant at into
// the state as of now. They report false when at's window has ended: the
// requests then no longer count for anything (the sender counts them as
// dropped).
// A negative n gives requests back (a local refund sent late). Past the
// limit, counts keep growing: the shared state must hold every admission,
// or the instances' over-admission would go unseen.

// Add counts n requests admitted at instant at into the window holding now.
// A request from a window later than now's (a sender whose clock runs
// ahead) rolls the state to that window, as a decision at that instant
// would.
func (w Window) Add(l *Limit, now, at, n int64) (Window, bool) {
	w = w.roll(l, now)
	end := windowEnd(l, at)
	switch {
	case end > w.End:
		w = Window{End: end}
	case end < w.End:
		return w, false
	}
	w.Count = max(0, w.Count+n)
	return w, true
}

// Add counts n requests admitted at instant at into whichever of the two
// windows holds at: the current one, or the previous, whose weight still
// counts.
func (s Sliding) Add(l *Limit, now, at, n int64) (Sliding, bool) {
	s = s.roll(l, now)
	end := windowEnd(l, at)
	if end > s.End {
		s = s.roll(l, end-1)
	}
	switch end {
	case s.End:
		s.Cur = addCount(s.Cur, n)
	case s.End - l.Period:
		s.Prev = addCount(s.Prev, n)
	default:
		return s, false
	}
	return s, true
}

// addCount is c+n held within [0, MaxInt32].
func addCount(c int32, n int64) int32 {
	return int32(clamp(int64(c)+n, 0, math.MaxInt32))
}

// Add pours n requests' worth of water admitted at instant at (no later
// than now) on the bucket, past its capacity if need be. Water poured at an
// earlier instant has drained since as it would have; a negative n takes
// water out, as Refund does.
func (b Bucket) Add(lim *Limit, now, at, n int64) (Bucket, bool) {
	p := lim.prepared()
	l := &p
	if n == 0 {
		return b, true
	}
	if n < 0 {
		return b.Refund(l, -n, false, 0), true
	}
	at = min(at, now)
	return b.start(at).add(l, n), true
}

// MergeAdds reports whether adding n1 at instant a1 and then n2 at a2 to
// any bucket, at any instant, is one add of n1+n2, and at which instant. A
// sender keeps one record of both then, and sends the same water.
//
// Two pours merge when the first would not have drained by a2 even from an
// empty bucket: no bucket is empty at a2 then, and the second pours on top
// of the first. A refund merges into a pour it leaves water of, and into
// another refund; an add of nothing into anything. Otherwise they stay two:
// counted at the later instant, the first pour's water would not have
// drained meanwhile, and the remote would hold more than was admitted.
func MergeAdds(lim *Limit, a1, n1, a2, n2 int64) (int64, bool) {
	switch {
	case n2 == 0:
		return a1, true
	case n1 == 0:
		return a2, true
	case n1 < 0 && n2 < 0:
		return max(a1, a2), true // a refund's instant does not matter
	case n1 > 0 && n2 < 0:
		return a1, n1+n2 > 0
	case n1 > 0:
		p := lim.prepared()
		return a1, Bucket{Tail: a1}.add(&p, n1).Tail >= a2
	}
	return 0, false // a refund then a pour: the pour may land on an empty bucket
}

// WindowEnd is the end of the window holding at: windows are
// [k·Period+Offset, (k+1)·Period+Offset).
func WindowEnd(l *Limit, at int64) int64 { return windowEnd(l, at) }
