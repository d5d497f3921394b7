package shared

import (
	"context"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// grant is leased quota granted at instant at. A window counter's units
// are usable until end (remote µs, exclusive). A bucket's are usable at
// an instant only as far as the bucket the grant left (tail, frac) still
// holds above it (usable).
type grant struct{ units, end, at, tail, frac int64 }

// takeLease admits req from the quota the instance holds, leasing more from
// the remote when it runs short. e is locked; takeLease unlocks it.
func (s *Store) takeLease(ctx context.Context, e *entry, req ratekeeper.Request) (ratekeeper.Decision, error) {
	n := int64(req.N)
	e.sameLimit(req.Limit)
	if !req.Now.IsZero() {
		e.given = req.Now.UnixMicro()
	}
	for {
		// A request counts no earlier than the quota it uses was granted,
		// whatever the estimate of the remote's clock says.
		now := max(s.nowFor(req), e.latestGrant())
		e.expire(now, s.margin())
		if d, hit := e.denied(req, s.CacheNow(req)); hit {
			e.mu.Unlock()
			s.denials.Add(1)
			return d, nil
		}
		if held := e.held(); held >= n {
			d := s.admitLeased(e, req, held, now)
			s.refillEarly(e, req)
			e.mu.Unlock()
			s.locals.Add(1)
			return d, nil
		}
		if ch := e.busy; ch != nil {
			e.mu.Unlock()
			if err := wait(ctx, ch); err != nil {
				return ratekeeper.Decision{}, err
			}
			e.mu.Lock()
			continue
		}
		if d, done, err := s.leaseFor(ctx, e, req); done {
			return d, err
		}
	}
}

// admitLeased admits req from the held units of quota e holds (held >= N)
// at instant at. e is locked.
func (s *Store) admitLeased(e *entry, req ratekeeper.Request, held, at int64) ratekeeper.Decision {
	n := int64(req.N)
	e.consume(n)
	e.local = true
	e.useLease(s, n)
	d := ratekeeper.Decision{Allowed: true, Limit: req.Limit.Capacity(),
		Remaining: int(min(int64(req.Limit.Capacity()), held-n+e.remaining)), At: time.UnixMicro(at)}
	if k := len(e.grants); k > 0 {
		d.ResetAfter = time.Duration(e.grants[k-1].end-at) * time.Microsecond
	}
	return d
}

// leaseFor leases what req needs beyond the quota e holds and decides req
// by the answer. done: d and err are the decision, and e is unlocked.
// Otherwise (the quota held before ran out meanwhile) e is locked, for the
// caller to try again. e is locked.
func (s *Store) leaseFor(ctx context.Context, e *entry, req ratekeeper.Request) (d ratekeeper.Decision, done bool, err error) {
	n := int64(req.N)
	need := n - e.held()
	asked := s.CacheNow(req)
	it, err := s.askLease(ctx, e, req, Item{Key: e.key, Limit: e.limit, N: e.want(s, need), Min: need, Now: s.remoteNow(req)})
	if err != nil {
		e.mu.Unlock()
		return ratekeeper.Decision{}, true, err
	}
	if it.Granted == 0 {
		d := ratekeeper.Decision{Limit: req.Limit.Capacity(), RetryAfter: time.Duration(it.Retry) * time.Microsecond,
			ResetAfter: time.Duration(it.Retry) * time.Microsecond, At: time.UnixMicro(it.Now)}
		e.deny(req, d, asked)
		e.mu.Unlock()
		return d, true, nil
	}
	// Quota held from before that ended while the lease was asked for
	// goes; the request is admitted at the grant's instant, as the
	// remote's own decision would be, if what is held now covers it.
	e.grants = append(e.grants, e.grantOf(it))
	e.expire(it.Now, 0)
	e.remaining = e.remainingAfter(it)
	if held := e.held(); held >= n {
		d := s.admitLeased(e, req, held, it.Now)
		e.mu.Unlock()
		return d, true, nil
	}
	return ratekeeper.Decision{}, false, nil
}

// askLease makes the Lease call it for req, with e busy and unlocked
// meanwhile. Unless req carries its own instant, it learns the remote's
// clock from the answer. e is locked, and locked again on return.
func (s *Store) askLease(ctx context.Context, e *entry, req ratekeeper.Request, it Item) (Item, error) {
	ch := make(chan struct{})
	e.busy = ch
	e.mu.Unlock()
	it, sent, recv, err := s.leaseCall(ctx, it)
	e.mu.Lock()
	e.busy = nil
	close(ch)
	if err != nil {
		s.leaseErrs.Add(1)
		return it, err
	}
	s.roundTrip(sent, recv)
	if req.Now.IsZero() {
		s.learn(sent, recv, it.Now)
		s.rtt.Store(recv - sent)
	}
	return it, nil
}

// leaseCall makes one Lease call for it and counts it. sent and recv are
// the local µs before and after; err is the call's error, else the item's.
func (s *Store) leaseCall(ctx context.Context, it Item) (got Item, sent, recv int64, err error) {
	items := []Item{it}
	sent = s.localMicros()
	err = s.remote.Lease(ctx, items)
	recv = s.localMicros()
	s.leases.Add(1)
	if err == nil {
		err = items[0].Err
	}
	return items[0], sent, recv, err
}

// refillEarly leases more in the background once the quota held falls
// under half of what the instance uses in a sync period, so that its
// callers seldom wait for a lease. Without its loop it does nothing: a
// lease is then taken by the request that needs it, so that a caller on a
// virtual clock drives the engine deterministically. e is locked.
func (s *Store) refillEarly(e *entry, req ratekeeper.Request) {
	if e.busy != nil || s.noLoop {
		return
	}
	want := e.want(s, 1)
	if e.held() >= max(1, want/2) {
		return
	}
	ch := make(chan struct{})
	e.busy = ch
	it := Item{Key: e.key, Limit: e.limit, N: want, Min: 1, Now: s.remoteNow(req)}
	go func() {
		ctx, cancel := context.WithTimeoutCause(context.Background(), max(s.period, time.Second), ErrTimeout)
		defer cancel()
		it, sent, recv, err := s.leaseCall(ctx, it)
		e.mu.Lock()
		defer func() {
			e.busy = nil
			e.mu.Unlock()
			close(ch)
		}()
		if err != nil {
			s.leaseErrs.Add(1)
			return
		}
		s.roundTrip(sent, recv)
		if it.Granted > 0 {
			e.grants = append(e.grants, e.grantOf(it))
			e.remaining = e.remainingAfter(it)
		}
	}()
}

// margin is how far ahead of its estimate of the remote's clock the
// instance counts a lease as expired: the last round trip, which bounds the
// estimate's error.
func (s *Store) margin() int64 { return s.rtt.Load() }

// validUntil is when a window's leased quota expires (exclusive): the end
// of its window. (A bucket's quota is bounded by usable instead; the value
// here, the instant the bucket is next full, only reports ResetAfter.)
func (e *entry) validUntil(st State) int64 {
	switch e.limit.Algorithm {
	case ratekeeper.FixedWindow:
		return st.Window.End
	case ratekeeper.SlidingWindow:
		return st.Sliding.End
	}
	return st.Bucket.Tail + 1
}

// remainingAfter is what the remote had left after a grant, for the
// decisions' Remaining.
func (e *entry) remainingAfter(it Item) int64 {
	_, r := Decide(it.State, e.limit, &e.p, it.Now, 0)
	return r.Remaining
}

// grantOf is the quota a lease call granted.
func (e *entry) grantOf(it Item) grant {
	return grant{units: it.Granted, end: e.validUntil(it.State), at: it.Now, tail: it.State.Bucket.Tail, frac: it.State.Bucket.Frac}
}

// latestGrant is the instant of the latest grant held, or 0.
func (e *entry) latestGrant() int64 {
	if k := len(e.grants); k > 0 {
		return e.grants[k-1].at
	}
	return 0
}

// usable is how many of g's units may be admitted at instant u. A window's
// quota counts in its window: all of it, until the window ends. A bucket's
// quota is the water the grant poured: at most the post-grant bucket's
// level at u, in requests. A unit used below u's water line would be
// admitted where the bucket, had the quota been taken at u, would have
// refilled and overflowed. (One token leased from a full bucket is usable
// only at once.)
func (e *entry) usable(g grant, u int64) int64 {
	switch e.limit.Algorithm {
	case ratekeeper.FixedWindow, ratekeeper.SlidingWindow:
		if u < g.end {
			return g.units
		}
		return 0
	}
	level := (g.tail-u)*e.p.Rate + g.frac
	if level <= 0 {
		return 0
	}
	return min(g.units, level/e.p.Period)
}

// expire cuts every grant to what is usable at u (margin µs later, for the
// error of the remote clock's estimate) and drops those left empty: what is
// not usable now never will be.
func (e *entry) expire(u, margin int64) {
	kept := e.grants[:0]
	for _, g := range e.grants {
		if g.units = e.usable(g, u+margin); g.units > 0 {
			kept = append(kept, g)
		}
	}
	clear(e.grants[len(kept):])
	e.grants = kept
}

func (e *entry) held() (n int64) {
	for _, g := range e.grants {
		n += g.units
	}
	return n
}

// consume takes n units from the grants made first.
func (e *entry) consume(n int64) {
	for n > 0 {
		g := &e.grants[0]
		take := min(n, g.units)
		g.units -= take
		n -= take
		if g.units == 0 {
			e.grants = e.grants[1:]
		}
	}
}

// useLease counts n units used, for the next lease's size.
func (e *entry) useLease(s *Store, n int64) {
	lnow := s.localMicros()
	e.lastUse = lnow
	if lnow-e.periodStart >= s.period.Microseconds() {
		e.usedPrev, e.usedCur, e.periodStart = e.usedCur, 0, lnow
	}
	e.usedCur += n
}

// want sizes a lease: what the instance would use over a sync period at
// its recent rate, at least need and at most the capacity.
func (e *entry) want(s *Store, need int64) int64 {
	T := s.period.Microseconds()
	elapsed := max(s.localMicros()-e.periodStart, T/4, 1)
	rate := max(float64(e.usedPrev)/float64(T), float64(e.usedCur)/float64(elapsed))
	w := int64(rate*float64(T)) + 1
	return min(max(w, need), int64(e.limit.Capacity()))
}

// refundLease puts what d took back into the lease it came from, if that
// has not expired: the units are still taken in the remote.
func (e *entry) refundLease(req ratekeeper.Request, d ratekeeper.Decision) {
	at := d.At.UnixMicro()
	for i := range e.grants {
		if e.grants[i].end > at {
			e.grants[i].units += int64(req.N)
			return
		}
	}
}
