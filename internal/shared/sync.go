package shared

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// takeSync decides req from the local state, reading the shared state
// first if the instance has none or what it has is older than two periods.
// e is locked; takeSync unlocks it.
func (s *Store) takeSync(ctx context.Context, e *entry, req ratekeeper.Request) (ratekeeper.Decision, error) {
	e.sameLimit(req.Limit)
	if !req.Now.IsZero() {
		e.given = req.Now.UnixMicro()
	}
	for tried := false; ; {
		lnow := s.localMicros()
		if s.fresh(e, lnow) || (e.unanswered && s.known(e, lnow)) {
			// Unanswered, the key decides at once from what is known, as
			// a decision whose own sync failed does, rather than each
			// decision waiting out a sync of its own.
			break
		}
		if ch := e.busy; ch != nil {
			// A sync of this key is in flight (the loop's, or another
			// caller's): its answer is what this decision needs.
			if err := s.awaitSync(ctx, e, ch); err != nil {
				return ratekeeper.Decision{}, err
			}
			if e.dead {
				return s.retake(ctx, e, req)
			}
			if tried || s.fresh(e, s.localMicros()) {
				continue
			}
		}
		if tried {
			if s.known(e, lnow) {
				break // the remote is not answering: decide from what is known
			}
			e.mu.Unlock()
			return ratekeeper.Decision{}, errStale
		}
		tried = true
		e.mu.Unlock()
		s.syncEntries(ctx, []*entry{e}, s.remoteNow(req))
		e.mu.Lock()
		if e.dead {
			return s.retake(ctx, e, req)
		}
	}
	return s.decideSync(e, req), nil
}

// fresh reports whether e's shared state is recent enough to decide from
// at local instant lnow: read within two periods.
func (s *Store) fresh(e *entry, lnow int64) bool {
	return e.loaded && lnow-e.syncedAt <= 2*s.period.Microseconds()
}

// known reports whether e's shared state may still be decided from at
// local instant lnow while the remote does not answer: read within the
// stale bound.
func (s *Store) known(e *entry, lnow int64) bool {
	return e.loaded && lnow-e.syncedAt <= s.stale.Microseconds()
}

// awaitSync waits for the sync in flight on e, whose end closes ch, with
// e unlocked. It returns nil with e locked again, or the wait's error
// with e unlocked. A wait that ran out of the store's time (ErrTimeout)
// marks e unanswered, so that the next decisions do not wait for the
// same sync.
func (s *Store) awaitSync(ctx context.Context, e *entry, ch chan struct{}) error {
	e.mu.Unlock()
	if err := wait(ctx, ch); err != nil {
		if errors.Is(context.Cause(ctx), ErrTimeout) {
			e.mu.Lock()
			if e.busy == ch {
				e.unanswered = true
			}
			e.mu.Unlock()
		}
		return err
	}
	e.mu.Lock()
	return nil
}

// decideSync decides req from e's local state and keeps an admission as
// unsent. Once the unsent count reaches an eighth of the limit, it asks
// for an early sync. e is locked; decideSync unlocks it.
func (s *Store) decideSync(e *entry, req ratekeeper.Request) ratekeeper.Decision {
	n := int64(req.N)
	now := s.nowFor(req)
	lnow := s.localMicros()
	atLeast(&s.maxStale, lnow-e.syncedAt)
	r := e.decide(now, n, req.Now.IsZero())
	early := false
	if r.Allowed {
		// Sent at an instant of the window it counted in: a state ahead
		// of now counts it in its own window, which Redis would not if
		// told now.
		e.addPending(e.countedAt(r.At), n, lnow)
		early = e.pending() >= max(1, int64(req.Limit.Capacity())/8)
	}
	e.touched, e.local = true, true
	e.lastUse = lnow
	e.mu.Unlock()
	s.locals.Add(1)
	if early {
		s.syncSoon()
	}
	return algo.Decision(r)
}

// delta is a count admitted at instant at (remote µs) not yet sent, since
// local µs since (its first admission's; 0 for a refund).
type delta struct{ at, n, since int64 }

// addPending records n admitted at at, merged with the last record when
// the remote counts both as one: in the same window, or for a bucket as
// algo.MergeAdds says.
func (e *entry) addPending(at, n, since int64) {
	if k := len(e.pend) - 1; k >= 0 {
		if at, ok := e.merge(e.pend[k], at, n); ok {
			d := &e.pend[k]
			d.at, d.n = at, d.n+n
			if d.since == 0 {
				d.since = since
			}
			return
		}
	}
	e.pend = append(e.pend, delta{at, n, since})
}

// merge reports whether the remote counts d and then n admitted at at as
// one record, and at which instant.
func (e *entry) merge(d delta, at, n int64) (int64, bool) {
	switch e.limit.Algorithm {
	case ratekeeper.FixedWindow, ratekeeper.SlidingWindow:
		return max(d.at, at), algo.WindowEnd(&e.p, d.at) == algo.WindowEnd(&e.p, at)
	}
	return algo.MergeAdds(&e.p, d.at, d.n, at, n)
}

// pending is the sum of e's unsent counts.
func (e *entry) pending() (n int64) {
	for _, d := range e.pend {
		n += d.n
	}
	return n
}

// retake decides req again on the key's live entry: the loop dropped e
// while it was unlocked (idle, nothing unsent), and what is counted in a
// dropped entry is never sent. e is locked.
func (s *Store) retake(ctx context.Context, e *entry, req ratekeeper.Request) (ratekeeper.Decision, error) {
	e.mu.Unlock()
	return s.Take(ctx, req)
}

// syncSoon asks for a sync before the period ends: the loop's next turn,
// or without a loop, now.
func (s *Store) syncSoon() {
	if s.noLoop {
		s.flush(false)
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// refundSync takes back, locally and in what is sent next, what d took.
func (e *entry) refundSync(req ratekeeper.Request, d ratekeeper.Decision) {
	at := d.At.UnixMicro()
	switch e.limit.Algorithm {
	case ratekeeper.FixedWindow:
		e.state.Window = e.state.Window.Refund(&e.p, int64(req.N), at)
	case ratekeeper.SlidingWindow:
		e.state.Sliding = e.state.Sliding.Refund(&e.p, int64(req.N), at)
	default:
		e.state.Bucket = e.state.Bucket.Refund(&e.p, int64(req.N), false, 0)
	}
	e.addPending(at, -int64(req.N), 0)
}

// syncEntries sends each entry's unsent count and reads back its shared
// state, in one call. An entry with a call in flight already is skipped.
// On failure the counts are kept for the next call, except those whose
// window has ended, which are counted as dropped. now is the instant to
// give the remote (zero: its own clock).
func (s *Store) syncEntries(ctx context.Context, es []*entry, now int64) {
	parts, items := cutEntries(es, now)
	if len(parts) == 0 {
		return
	}
	sent := s.localMicros()
	s.unsentFor(parts, sent)
	err := s.remote.Add(ctx, items)
	recv := s.localMicros()
	s.syncs.Add(1)
	if err != nil {
		s.syncErrs.Add(1)
	} else {
		s.learnFromSync(items, sent, recv, now == 0)
	}
	// A caller that gave up (its context cancelled, or its own deadline
	// ended before the store's bound, ErrTimeout) learned nothing of the
	// remote, so its failed sync leaves each key's unanswered as it was.
	gaveUp := ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrTimeout)
	for i, p := range parts {
		end := len(items)
		if i+1 < len(parts) {
			end = parts[i+1].first
		}
		s.settle(p, items[p.first:end], err, gaveUp, recv)
	}
}

// syncPart is one entry's share of a sync call: the counts it sends, where
// its items start in the call, and the channel its end closes (the
// entry's busy).
type syncPart struct {
	e        *entry
	inflight []delta
	first    int
	busy     chan struct{}
}

// cutEntries takes the unsent counts of each entry with no call in flight
// and marks it busy. It returns the entries' parts and the items to send.
// now is the instant to give the remote (zero: each entry's given).
func cutEntries(es []*entry, now int64) ([]syncPart, []Item) {
	parts := make([]syncPart, 0, len(es))
	var items []Item
	for _, e := range es {
		e.mu.Lock()
		if e.busy != nil {
			e.mu.Unlock()
			continue
		}
		p := syncPart{e: e, inflight: e.pend, first: len(items), busy: make(chan struct{})}
		e.busy, e.pend, e.touched = p.busy, nil, false
		items = e.syncItems(items, p.inflight, now)
		e.mu.Unlock()
		parts = append(parts, p)
	}
	return parts, items
}

// syncItems appends to items those that send e's counts ds at now (zero:
// e's given instant), or one that reads e if there are none. e is locked.
func (e *entry) syncItems(items []Item, ds []delta, now int64) []Item {
	if now == 0 {
		now = e.given
	}
	if len(ds) == 0 {
		return append(items, Item{Key: e.key, Limit: e.limit, Now: now})
	}
	for _, d := range ds {
		inst := now
		if now != 0 {
			// A count admitted before the given clock stepped back
			// runs at its own instant: the remote clips a count's
			// instant to its now, and its water would drain early.
			inst = max(now, d.at)
		}
		items = append(items, Item{Key: e.key, Limit: e.limit, N: d.n, At: d.at, Now: inst})
	}
	return items
}

// atLeast raises v to x if x is more.
func atLeast(v *atomic.Int64, x int64) {
	for {
		m := v.Load()
		if x <= m || v.CompareAndSwap(m, x) {
			return
		}
	}
}

// unsentFor records how long the oldest admission in parts waited until
// sent: sync mode's over-admission grows with it.
func (s *Store) unsentFor(parts []syncPart, sent int64) {
	for _, p := range parts {
		for _, d := range p.inflight {
			if d.since == 0 {
				continue
			}
			atLeast(&s.maxUnsent, sent-d.since)
		}
	}
}

// learnFromSync records the round trip of a sync call sent and received at
// local µs sent and recv, if every item was answered, and learns the
// remote's clock from an answered item if learn. Items can fail alone (on
// a Cluster, those of a primary that did not answer).
func (s *Store) learnFromSync(items []Item, sent, recv int64, learn bool) {
	var answered *Item
	all := true
	for i := range items {
		if items[i].Err != nil {
			all = false
		} else if answered == nil {
			answered = &items[i]
		}
	}
	if all {
		s.roundTrip(sent, recv)
	}
	if learn && answered != nil {
		s.learn(sent, recv, answered.Now)
	}
}

// settle ends p's share of a sync call, whose items for p are mine and
// whose error is err. It takes the state read back, or keeps what must go
// again, then clears the entry's busy. If the caller gave up (gaveUp), a
// failure leaves the entry's unanswered as it was.
func (s *Store) settle(p syncPart, mine []Item, err error, gaveUp bool, recv int64) {
	failed := err != nil
	for _, it := range mine {
		failed = failed || it.Err != nil
	}
	e := p.e
	e.mu.Lock()
	if !failed || !gaveUp {
		e.unanswered = failed
	}
	if failed {
		s.keepUnsent(e, p.inflight, mine, err)
	} else {
		s.applySync(e, mine, recv)
	}
	e.busy = nil
	e.mu.Unlock()
	close(p.busy)
}

// keepUnsent puts back the counts inflight of a failed sync that must go
// again, ahead of those e admitted since. It then drops those whose window
// has ended. callErr is the call's error as a whole. e is locked.
//
// What the remote answered it applied: only the rest goes again (all of
// it when the call failed as a whole). A negative count (a refund) does
// not go again: the remote may have applied it before the reply was lost,
// and twice would give back twice.
func (s *Store) keepUnsent(e *entry, inflight []delta, mine []Item, callErr error) {
	var again []delta
	for k, d := range inflight {
		it := mine[k]
		switch {
		case callErr == nil && it.Err == nil:
			s.countDropped(it)
		case d.n > 0:
			again = append(again, d)
		}
	}
	e.pend = append(again, e.pend...)
	s.dropEnded(e)
}

// applySync takes the shared state a sync answered at local µs recv read
// back for e (its last item's), and adds to it what e admitted since the
// cut. e is locked.
//
// A count admitted after the remote's read (while the call was in flight)
// is added at its own instant, as the remote will count it when sent.
// Clipped back to the read's instant, a bucket's water drained early: up to
// R·δ under the limit, which the instance then admitted past it.
func (s *Store) applySync(e *entry, mine []Item, recv int64) {
	last := mine[len(mine)-1]
	for _, it := range mine {
		s.countDropped(it)
	}
	e.state, e.loaded, e.syncedAt = last.State, true, recv
	for _, d := range e.pend {
		e.add(max(last.Now, d.at), d.at, d.n)
	}
}

// countDropped counts an answered item's admissions that the remote
// dropped, their window having ended.
func (s *Store) countDropped(it Item) {
	if it.Dropped && it.N > 0 {
		s.dropped.Add(uint64(it.N))
	}
}

// dropEnded forgets the unsent counts whose window has ended, counting
// them.
func (s *Store) dropEnded(e *entry) {
	now := s.now()
	kept := e.pend[:0]
	for _, d := range e.pend {
		if e.ended(now, d.at) {
			if d.n > 0 {
				s.dropped.Add(uint64(d.n))
			}
			continue
		}
		kept = append(kept, d)
	}
	e.pend = kept
}
