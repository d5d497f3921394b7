package failsafe

import (
	"context"
	"fmt"

	"github.com/ratekeeper/ratekeeper"
)

// Interface guard.
var _ ratekeeper.ConcurrencyStore = (*Store)(nil)

// slotPrimary is the primary as a ConcurrencyStore, or an error wrapping
// ratekeeper.ErrNoSlots: the failsafe store holds slots only when its
// primary does.
func (s *Store) slotPrimary() (ratekeeper.ConcurrencyStore, error) {
	cs, ok := s.primary.(ratekeeper.ConcurrencyStore)
	if !ok {
		return nil, fmt.Errorf("failsafe: primary %T: %w", s.primary, ratekeeper.ErrNoSlots)
	}
	return cs, nil
}

// slotBreaker is the breaker of the part that holds key's slots. A Redis
// Cluster places a key's slots by the same hash tag as its rate limit
// state, so the part of a rate limit request for key is theirs.
func (s *Store) slotBreaker(key string) *breaker {
	return s.breakerFor(ratekeeper.Request{Key: key, Limit: ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket}})
}

// AcquireSlot asks the primary, within the timeout and unless the breaker
// is open. When that fails, the policy decides (see the package doc):
//
//   - Allow grants a slot that nothing counts;
//   - Deny refuses with RetryAfter DenyRetryAfter;
//   - Local takes a slot in the local store, Max divided by the number of
//     instances (at least 1).
//
// Only a caller's own cancelled context, or a primary that holds no slots,
// is returned as an error. A slot the primary may have taken too late for
// the timeout is freed there when the policy's slot is released (or at
// once, when none is granted).
func (s *Store) AcquireSlot(ctx context.Context, req ratekeeper.SlotRequest) (ratekeeper.Decision, error) {
	cs, err := s.slotPrimary()
	if err != nil {
		return ratekeeper.Decision{}, err
	}
	s.calls.Add(1)
	b := s.slotBreaker(req.Key)
	ok, probe := s.admit(b)
	if !ok {
		s.short.Add(1)
		return s.slotFallback(ctx, req)
	}
	d, err := s.callPrimary(ctx, func(ctx context.Context) (ratekeeper.Decision, error) {
		return cs.AcquireSlot(ctx, req)
	}, probe, b)
	if err == nil {
		return d, nil
	}
	if ctx.Err() != nil {
		// The caller gave up, and holds no permit to release: give back
		// at once what the primary may have taken.
		s.releasePrimary(context.WithoutCancel(ctx), cs, req)
		return ratekeeper.Decision{}, err
	}
	// The primary may have taken the slot and answered too late (Redis
	// ran the script; the reply missed the timeout). A slot the policy
	// grants frees the primary's as well when it is released, and a
	// refusal frees it now. Else that lease would stand, unreleased and
	// unrefreshed, for a whole TTL.
	d, err = s.slotFallback(ctx, req)
	if err == nil && d.Allowed {
		s.late.Store(slotID{req.Key, req.ID}, struct{}{})
	} else {
		s.releasePrimary(ctx, cs, req) // no permit, so no release to wait for
	}
	return d, err
}

// slotID names one slot: its key and its ID.
type slotID struct{ key, id string }

// releasePrimary frees slot req.ID on the primary, within the timeout and
// unless the breaker is open, for a slot the primary may hold though the
// caller was not told so. A failure is counted, not returned: the lease
// expires by itself.
func (s *Store) releasePrimary(ctx context.Context, cs ratekeeper.ConcurrencyStore, req ratekeeper.SlotRequest) {
	b := s.slotBreaker(req.Key)
	ok, probe := s.admit(b)
	if !ok {
		return
	}
	_, _ = s.callPrimary(ctx, func(ctx context.Context) (ratekeeper.Decision, error) {
		return ratekeeper.Decision{}, cs.ReleaseSlot(ctx, req, ratekeeper.Decision{})
	}, probe, b)
}

func (s *Store) slotFallback(ctx context.Context, req ratekeeper.SlotRequest) (ratekeeper.Decision, error) {
	d, err := s.policyDecision(ctx, req.Max, req.Now, func(ctx context.Context) (ratekeeper.Decision, error) {
		lreq := req
		if s.instances > 1 {
			lreq.Max = max(1, req.Max/s.instances)
		}
		return s.local.AcquireSlot(ctx, lreq)
	})
	if err == nil && s.onFallback != nil {
		// The hook sees a rate limit request: the key, and the limit as
		// a window of Max, so that it can tell what was decided for whom.
		s.onFallback(ratekeeper.Request{Key: req.Key, N: 1, Now: req.Now}, d)
	}
	return d, err
}

// RefreshSlot extends a slot where decision d took it. On the primary it
// runs within the timeout and unless the breaker is open; an error is
// returned, and the limiter tries again at its next refresh. Local's slots
// are in the local store. A slot that Allow granted was never counted: it
// is reported held.
func (s *Store) RefreshSlot(ctx context.Context, req ratekeeper.SlotRequest, d ratekeeper.Decision) (bool, error) {
	switch d.Fallback {
	case ratekeeper.FallbackUncounted:
		return true, nil
	case ratekeeper.FallbackLocal:
		return s.local.RefreshSlot(ctx, req, d)
	}
	cs, err := s.slotPrimary()
	if err != nil {
		return false, err
	}
	b := s.slotBreaker(req.Key)
	ok, probe := s.admit(b)
	if !ok {
		return false, fmt.Errorf("failsafe: refresh slot: circuit breaker open")
	}
	var held bool
	_, err = s.callPrimary(ctx, func(ctx context.Context) (ratekeeper.Decision, error) {
		var err error
		held, err = cs.RefreshSlot(ctx, req, d)
		return ratekeeper.Decision{}, err
	}, probe, b)
	return held, err
}

// ReleaseSlot frees a slot where decision d took it: on the primary
// (within the timeout and unless the breaker is open), in the local
// store for Local's slots, nowhere for Allow's. A failure is counted and
// logged like a decision's, not returned: the slot's lease expires by
// itself, at most its TTL later.
func (s *Store) ReleaseSlot(ctx context.Context, req ratekeeper.SlotRequest, d ratekeeper.Decision) error {
	if d.Fallback != ratekeeper.NoFallback {
		if _, late := s.late.LoadAndDelete(slotID{req.Key, req.ID}); late {
			if cs, err := s.slotPrimary(); err == nil {
				s.releasePrimary(ctx, cs, req)
			}
		}
	}
	switch d.Fallback {
	case ratekeeper.FallbackUncounted:
		return nil
	case ratekeeper.FallbackLocal:
		return s.local.ReleaseSlot(ctx, req, d)
	}
	cs, err := s.slotPrimary()
	if err != nil {
		return err
	}
	b := s.slotBreaker(req.Key)
	ok, probe := s.admit(b)
	if !ok {
		return nil
	}
	_, err = s.callPrimary(ctx, func(ctx context.Context) (ratekeeper.Decision, error) {
		return ratekeeper.Decision{}, cs.ReleaseSlot(ctx, req, d)
	}, probe, b)
	if err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}
