package shared

import (
	"context"
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// loop syncs every period, and when a key's unsent count grows large,
// until Close; then it syncs once more and gives back unused leases.
func (s *Store) loop() {
	defer close(s.done)
	t := time.NewTicker(s.period)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			s.parts.Wait() // its keys are busy until then: the last flush sends them
			s.flush(true)
			return
		case <-t.C:
		case <-s.kick:
		}
		s.flush(false)
	}
}

// idlePeriods is how many sync periods an entry with nothing to send is
// kept after its last use.
const idlePeriods = 10

// flush syncs the touched entries (sync mode), gives back the leases of
// idle ones (lease mode), and drops entries with nothing left to do. final
// gives back every lease it can.
func (s *Store) flush(final bool) {
	var (
		syncs []*entry
		back  []Item
	)
	lnow := s.localMicros()
	now := s.now()
	// given, when requests carry their own instants, is the instant every
	// call to the remote runs at, as the decisions' own calls do.
	given := s.given.Load()
	if given != 0 {
		now = given
	}
	idle := idlePeriods * s.period.Microseconds()
	s.each(func(e *entry) bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.busy != nil {
			return false
		}
		switch e.mode {
		case Sync:
			if len(e.pend) > 0 || e.touched {
				syncs = append(syncs, e)
				return false
			}
		case Lease:
			e.expire(now, 0)
			if giveBack(e.limit) && len(e.grants) > 0 && (final || lnow-e.lastUse >= s.period.Microseconds()) {
				for _, g := range e.grants {
					back = append(back, Item{Key: e.key, Limit: e.limit, N: -g.units, At: g.at, Now: e.given})
				}
				e.grants = nil
			}
			if len(e.grants) > 0 {
				return false
			}
		}
		if lnow-e.lastUse > idle && now >= e.deniedUntil && len(e.pend) == 0 {
			e.dead = true
			return true
		}
		return false
	})
	timeout := max(s.period, time.Second)
	if len(syncs) > 0 {
		s.syncParts(syncs, timeout, final || s.noLoop)
	}
	if len(back) > 0 {
		// Quota given back is quota others may use: best effort, since
		// a lease not given back expires with its window anyway. The loop
		// does not wait for it (Close does): a server that does not
		// answer held the loop, and the syncs of a store that mixes
		// modes, for the timeout.
		give := func() {
			ctx, cancel := context.WithTimeoutCause(context.Background(), timeout, ErrTimeout)
			defer cancel()
			s.givebacks.Add(1)
			_ = s.remote.Add(ctx, back)
		}
		if final || s.noLoop {
			give()
		} else {
			s.parts.Go(give)
		}
	}
}

// giveBack reports whether unused leased quota of limit l is given back:
// for the window counters, where giving back within the window is exactly
// as if it had never been taken. A bucket's quota is not: returned late,
// it could add to what the bucket refilled meanwhile; it drains away as
// the water it was would (entry.usable).
func giveBack(l ratekeeper.Limit) bool {
	return l.Algorithm == ratekeeper.FixedWindow || l.Algorithm == ratekeeper.SlidingWindow
}

// syncParts syncs es in one call bounded by timeout or, WithParts, in one
// call per part at once. Unless wait, the loop does not wait for the
// parts' calls (Close does). A part that does not answer holds its own
// keys, busy until its call ends, and no other part's.
func (s *Store) syncParts(es []*entry, timeout time.Duration, wait bool) {
	run := func(es []*entry) {
		ctx, cancel := context.WithTimeoutCause(context.Background(), timeout, ErrTimeout)
		defer cancel()
		s.syncEntries(ctx, es, 0) // each key at its own requests' instant, if they carry one
	}
	if s.part == nil {
		run(es)
		return
	}
	parts := map[string][]*entry{}
	for _, e := range es {
		e.mu.Lock()
		l := e.limit
		e.mu.Unlock()
		k := s.part(ratekeeper.Request{Key: e.key, Limit: l})
		parts[k] = append(parts[k], e)
	}
	var wg sync.WaitGroup
	for _, part := range parts {
		if wait {
			wg.Go(func() { run(part) })
		} else {
			s.parts.Go(func() { run(part) })
		}
	}
	wg.Wait()
}
