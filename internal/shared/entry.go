package shared

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// entry is what an instance knows of one key. Its fields are guarded by mu.
type entry struct {
	key  string
	mu   sync.Mutex
	dead bool // dropped from the store: takers start a new entry
	mode Mode // how the key is decided, fixed when the entry is made
	// given is the last instant a request on the key carried (a Limiter on
	// a fake clock), 0 if none: the loop's calls for the key run at it.
	given int64
	limit ratekeeper.Limit
	p     algo.Limit
	local bool // decisions were made locally

	// The denial cache: refused for a cost of deniedN or more until
	// deniedUntil (remote µs).
	deniedUntil int64
	deniedN     int
	deniedAt    int64
	deniedLimit ratekeeper.Limit
	refusal     ratekeeper.Decision

	// busy is closed when the remote call in flight for the entry (a sync,
	// a lease) ends; nil when there is none.
	busy chan struct{}
	// lastUse is the local µs of the last decision.
	lastUse int64

	// Sync mode: state is the shared state last read plus pend, what the
	// instance admitted since its last cut; syncedAt the local µs of the
	// last answer.
	loaded   bool
	state    State
	pend     []delta
	touched  bool
	syncedAt int64
	// unanswered: the key's last sync failed, or the one in flight was not
	// answered within the store's time (ErrTimeout). Its decisions then
	// use what the instance knows at once, while that is recent enough
	// (the stale bound), rather than each wait for a sync first.
	unanswered bool

	// Lease mode: the quota held, oldest first, and the instance's recent
	// use, which sizes the next lease.
	grants            []grant
	usedPrev, usedCur int64
	periodStart       int64 // local µs
	remaining         int64 // what the remote had left after the last grant
}

// delta is a count admitted at instant at (remote µs) not yet sent.
type delta struct{ at, n int64 }

// grant is leased quota granted at instant at: units usable until end
// (remote µs, exclusive) for the window counters; for the buckets, no
// more units than the bucket left by the grant (tail, frac) still holds
// above the instant of use (usable).
type grant struct{ units, end, at, tail, frac int64 }

func (e *entry) setLimit(l ratekeeper.Limit) {
	e.limit = l
	e.p = algo.Params(e.key, l)
}

// sameLimit makes the entry follow the limit a request carries: a key keeps
// one state per algorithm, as in the stores, so a reload that changes the
// limit keeps the count.
func (e *entry) sameLimit(l ratekeeper.Limit) {
	if e.limit != l {
		e.setLimit(l)
	}
}

// decide applies the algorithm to the local state. A window counter whose
// state is in a later window than now counts the request in that window.
// When now is the instance's estimate of the remote's clock (estimated,
// not a request's own instant), that happens when the estimate stepped
// back across a window's end as it was learned again, and the decision
// says where it counted: its instant is that window's start. (With a
// request's own instant, as the stores do, At stays that instant.)
func (e *entry) decide(now, n int64, estimated bool) algo.Result {
	var r algo.Result
	e.state, r = Decide(e.state, e.limit, &e.p, now, n)
	if estimated {
		r.At = e.countedAt(r.At)
	}
	return r
}

// countedAt is at, or the start of the state's window if that is later:
// the instant a request decided at at was counted at.
func (e *entry) countedAt(at int64) int64 {
	var end int64
	switch e.limit.Algorithm {
	case ratekeeper.FixedWindow:
		end = e.state.Window.End
	case ratekeeper.SlidingWindow:
		end = e.state.Sliding.End
	default:
		return at
	}
	return max(at, end-e.p.Period)
}

// add counts n admitted at instant at into the local state as of now.
func (e *entry) add(now, at, n int64) {
	e.state, _ = AddTo(e.state, e.limit, &e.p, now, at, n)
}

// ended reports whether a count admitted at instant at no longer counts at
// now: its window, or for the sliding window counter the one after it, has
// ended. A bucket's water drains in the remote as it would have.
func (e *entry) ended(now, at int64) bool {
	switch e.limit.Algorithm {
	case ratekeeper.FixedWindow:
		return algo.WindowEnd(&e.p, at) < algo.WindowEnd(&e.p, now)
	case ratekeeper.SlidingWindow:
		return algo.WindowEnd(&e.p, at) < algo.WindowEnd(&e.p, now)-e.p.Period
	}
	return false
}

// addPending records n admitted at at, merged with the last record when
// the remote counts both as one: in the same window, or for a bucket as
// algo.MergeAdds says.
func (e *entry) addPending(at, n int64) {
	if k := len(e.pend) - 1; k >= 0 {
		if at, ok := e.merge(e.pend[k], at, n); ok {
			e.pend[k] = delta{at, e.pend[k].n + n}
			return
		}
	}
	e.pend = append(e.pend, delta{at, n})
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

func (e *entry) pending() (n int64) {
	for _, d := range e.pend {
		n += d.n
	}
	return n
}

// denied answers from the denial cache: a refusal while the key was refused
// for the same cost less than its retry-after ago, and nothing was
// admitted on it since. (A larger cost would be refused too, but the store
// would give it a longer retry-after than the cache knows.) The answer is the
// refusal's, its durations shortened by the time since (what the store
// would say: a refusal takes nothing), its Remaining as it was then (a
// bucket may have refilled a little since, a sliding window's previous
// count weighed a little less: the cache reports no more than there is).
func (e *entry) denied(req ratekeeper.Request, now int64) (ratekeeper.Decision, bool) {
	if now >= e.deniedUntil || req.N != e.deniedN || now < e.deniedAt || req.Limit != e.deniedLimit {
		return ratekeeper.Decision{}, false
	}
	d := e.refusal
	since := time.Duration(now-e.deniedAt) * time.Microsecond
	d.RetryAfter -= since
	d.ResetAfter = max(0, d.ResetAfter-since)
	d.At = d.At.Add(since)
	return d, true
}

// deny remembers a refusal d of req made at now, unless its limit counts
// refusals (the sliding log's log_rejected: each one must reach the
// store).
func (e *entry) deny(req ratekeeper.Request, d ratekeeper.Decision, now int64) {
	if req.Limit.LogRejected {
		return
	}
	e.deniedUntil, e.deniedN, e.deniedAt, e.refusal = now+int64(d.RetryAfter/time.Microsecond), req.N, now, d
	e.deniedLimit = req.Limit
}

// nowFor is the instant to decide req at: its own, or the remote's clock as
// the instance estimates it.
func (s *Store) nowFor(req ratekeeper.Request) int64 {
	if !req.Now.IsZero() {
		t := req.Now.UnixMicro()
		s.given.Store(t)
		return t
	}
	return s.now()
}

// remoteNow is the instant to give the remote: the request's own, or zero
// for the remote's clock, which every instance's estimate follows.
func (s *Store) remoteNow(req ratekeeper.Request) int64 {
	if !req.Now.IsZero() {
		return req.Now.UnixMicro()
	}
	return 0
}

// takeSync decides req from the local state, reading the shared state
// first if the instance has none or what it has is older than two periods.
func (s *Store) takeSync(ctx context.Context, e *entry, req ratekeeper.Request) (ratekeeper.Decision, error) {
	n := int64(req.N)
	fresh := 2 * s.period.Microseconds()
	e.sameLimit(req.Limit) // e is locked
	if !req.Now.IsZero() {
		e.given = req.Now.UnixMicro()
	}
	for tried := false; ; {
		lnow := s.localMicros()
		if e.loaded && lnow-e.syncedAt <= fresh {
			break
		}
		if e.loaded && e.unanswered && lnow-e.syncedAt <= s.stale.Microseconds() {
			// The remote did not answer the key's last sync: decide from
			// what is known, as a decision whose own sync failed does,
			// without waiting out another. Each decision waited for a sync
			// of its own (a timed-out call) and then decided so anyway:
			// every request on a Cluster node answering CLUSTERDOWN took
			// the store timeout, and its circuit breaker, which counted
			// them as neither failures nor answers, never opened.
			break
		}
		if ch := e.busy; ch != nil {
			// A sync of this key is in flight (the loop's, or another
			// caller's): its answer is what this decision needs.
			e.mu.Unlock()
			if err := wait(ctx, ch); err != nil {
				if errors.Is(context.Cause(ctx), ErrTimeout) {
					// Not answered within the store's time: the next
					// decisions do not wait for it too (the loop's sync
					// runs for up to a second, and each waited out the
					// store's timeout on it).
					e.mu.Lock()
					if e.busy == ch {
						e.unanswered = true
					}
					e.mu.Unlock()
				}
				return ratekeeper.Decision{}, err
			}
			e.mu.Lock()
			if e.dead {
				return s.retake(ctx, e, req)
			}
			if tried || (e.loaded && s.localMicros()-e.syncedAt <= fresh) {
				continue
			}
		}
		if tried {
			if e.loaded && lnow-e.syncedAt <= s.stale.Microseconds() {
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
	now := s.nowFor(req)
	r := e.decide(now, n, req.Now.IsZero())
	early := false
	if r.Allowed {
		// Sent at an instant of the window it counted in: a state ahead
		// of now counts it in its own window, which Redis would not if
		// told now.
		e.addPending(e.countedAt(r.At), n)
		early = e.pending() >= max(1, int64(req.Limit.Capacity())/8)
	}
	e.touched, e.local = true, true
	e.lastUse = s.localMicros()
	e.mu.Unlock()
	s.locals.Add(1)
	if early {
		s.syncSoon()
	}
	return algo.Decision(r), nil
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
	e.addPending(at, -int64(req.N))
}

// syncEntries sends each entry's unsent count and reads back its shared
// state, in one call. An entry with a call in flight already is skipped.
// On failure the counts are kept for the next call, except those whose
// window has ended, which are counted as dropped. now is the instant to
// give the remote (zero: its own clock).
func (s *Store) syncEntries(ctx context.Context, es []*entry, now int64) {
	type part struct {
		e        *entry
		inflight []delta
		first    int
		busy     chan struct{}
	}
	parts := make([]part, 0, len(es))
	var items []Item
	for _, e := range es {
		e.mu.Lock()
		if e.busy != nil {
			e.mu.Unlock()
			continue
		}
		p := part{e: e, inflight: e.pend, first: len(items), busy: make(chan struct{})}
		now := now
		if now == 0 {
			now = e.given
		}
		e.busy, e.pend, e.touched = p.busy, nil, false
		if len(p.inflight) == 0 {
			items = append(items, Item{Key: e.key, Limit: e.limit, Now: now})
		}
		for _, d := range p.inflight {
			inst := now
			if now != 0 {
				// A count admitted before the given clock stepped back
				// runs at its own instant: the remote clips a count's
				// instant to its now, and its water would drain early.
				inst = max(now, d.at)
			}
			items = append(items, Item{Key: e.key, Limit: e.limit, N: d.n, At: d.at, Now: inst})
		}
		e.mu.Unlock()
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return
	}
	sent := s.localMicros()
	err := s.remote.Add(ctx, items)
	recv := s.localMicros()
	s.syncs.Add(1)
	if err != nil {
		s.syncErrs.Add(1)
	} else {
		// Items can fail alone (on a Cluster, those of a primary that did
		// not answer): the round trip is the call's only if none did, and
		// the remote's clock is read from one that was answered.
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
		if now == 0 && answered != nil {
			s.learn(sent, recv, answered.Now)
		}
	}
	// A caller that gave up (its context cancelled: a client that hung up;
	// or its own deadline, before the store's bound, ErrTimeout) learned
	// nothing of the remote: its failed sync leaves the keys' unanswered
	// as it was. Taken for an unanswered sync, it let the key's next
	// decisions use a state older than two periods while the remote
	// answered, beyond sync mode's bound on over-admission.
	gaveUp := ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrTimeout)
	for i, p := range parts {
		end := len(items)
		if i+1 < len(parts) {
			end = parts[i+1].first
		}
		mine := items[p.first:end]
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
			// What the remote answered it applied: only the rest goes
			// again (all of it when the call failed as a whole). Sending
			// all again counted twice the items of a key split between a
			// batch that was answered and one that failed.
			//
			// A negative count (refunds past what was admitted since the
			// last cut) does not go again: the remote may have applied it
			// before the reply was lost, and twice it gave back twice,
			// admitting past the limit. Lost, it only counts more.
			var again []delta
			for k, d := range p.inflight {
				it := mine[k]
				switch {
				case err == nil && it.Err == nil:
					if it.Dropped && it.N > 0 {
						s.dropped.Add(uint64(it.N))
					}
				case d.n > 0:
					again = append(again, d)
				}
			}
			e.pend = append(again, e.pend...)
			s.dropEnded(e)
		} else {
			last := mine[len(mine)-1]
			for _, it := range mine {
				if it.Dropped && it.N > 0 {
					s.dropped.Add(uint64(it.N))
				}
			}
			e.state, e.loaded, e.syncedAt = last.State, true, recv
			for _, d := range e.pend {
				e.add(last.Now, d.at, d.n)
			}
		}
		e.busy = nil
		e.mu.Unlock()
		close(p.busy)
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

// takeLease admits req from the quota the instance holds, leasing more from
// the remote when it runs short.
func (s *Store) takeLease(ctx context.Context, e *entry, req ratekeeper.Request) (ratekeeper.Decision, error) {
	n := int64(req.N)
	e.sameLimit(req.Limit) // e is locked
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
			e.consume(n)
			at := now
			e.local = true
			e.useLease(s, n)
			d := ratekeeper.Decision{Allowed: true, Limit: req.Limit.Capacity(),
				Remaining: int(min(int64(req.Limit.Capacity()), held-n+e.remaining)), At: time.UnixMicro(at)}
			if k := len(e.grants); k > 0 {
				d.ResetAfter = time.Duration(e.grants[k-1].end-now) * time.Microsecond
			}
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
		need := n - e.held()
		asked := s.CacheNow(req)
		it := Item{Key: e.key, Limit: e.limit, N: e.want(s, need), Min: need, Now: s.remoteNow(req)}
		ch := make(chan struct{})
		e.busy = ch
		e.mu.Unlock()
		items := []Item{it}
		sent := s.localMicros()
		err := s.remote.Lease(ctx, items)
		recv := s.localMicros()
		s.leases.Add(1)
		it = items[0]
		if err == nil {
			err = it.Err
		}
		e.mu.Lock()
		e.busy = nil
		close(ch)
		if err != nil {
			s.leaseErrs.Add(1)
			e.mu.Unlock()
			return ratekeeper.Decision{}, err
		}
		s.roundTrip(sent, recv)
		if req.Now.IsZero() {
			s.learn(sent, recv, it.Now)
			s.rtt.Store(recv - sent)
		}
		if it.Granted == 0 {
			d := ratekeeper.Decision{Limit: req.Limit.Capacity(), RetryAfter: time.Duration(it.Retry) * time.Microsecond,
				ResetAfter: time.Duration(it.Retry) * time.Microsecond, At: time.UnixMicro(it.Now)}
			e.deny(req, d, asked)
			e.mu.Unlock()
			return d, nil
		}
		// Quota held from before that ended while the lease was asked for
		// goes; the request is admitted at the grant's instant, as the
		// remote's own decision would be, if what is held now covers it.
		e.grants = append(e.grants, e.grantOf(it))
		e.expire(it.Now, 0)
		e.remaining = e.remainingAfter(it)
		if held := e.held(); held >= n {
			e.consume(n)
			at := it.Now
			e.local = true
			e.useLease(s, n)
			d := ratekeeper.Decision{Allowed: true, Limit: req.Limit.Capacity(),
				Remaining: int(min(int64(req.Limit.Capacity()), held-n+e.remaining)), At: time.UnixMicro(at)}
			if k := len(e.grants); k > 0 {
				d.ResetAfter = time.Duration(e.grants[k-1].end-at) * time.Microsecond
			}
			e.mu.Unlock()
			return d, nil
		}
	}
}

// refillEarly leases more in the background once the quota held falls
// under half of what the instance uses in a sync period, so that its
// callers seldom wait for a lease. e is locked.
func (s *Store) refillEarly(e *entry, req ratekeeper.Request) {
	if e.busy != nil || s.noLoop {
		// Without its loop the engine runs no goroutine of its own, so
		// that a caller on a virtual clock drives it deterministically: a
		// lease is taken when the quota runs out, by the request that
		// needs it.
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
		items := []Item{it}
		sent := s.localMicros()
		err := s.remote.Lease(ctx, items)
		recv := s.localMicros()
		s.leases.Add(1)
		it := items[0]
		if err == nil {
			err = it.Err
		}
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
// quota is the water the grant poured: a unit used at u must still be
// above u's water line, or a request would be admitted where the bucket,
// had the quota been taken at u, would have refilled and overflowed (one
// token leased from a full bucket is usable only at once). So at most the
// post-grant bucket's level at u, in requests.
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
