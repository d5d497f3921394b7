package httplimit

import (
	"context"
	"fmt"
	"net/http"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/rules"
)

// Concurrency rules (rules.Rule.IsConcurrency) hold a slot per request from
// its admission until its handler returns. Handler releases it then, in a
// deferred call. So a response that ends normally, a client that leaves
// mid-body (the reverse proxy aborts the handler with a panic) and an
// upstream that fails all give it back. Admit, which cannot see the end of
// the response, defers requests that a concurrency rule matches to
// Handler, as it does queued ones.
//
// The rate rules decide first, in one batch, and the slots are taken only
// for a request they allow. A request refused by a rate takes no slot. A
// request refused by a concurrency rule gives back what the rate rules
// took.

// checkSlots reports a set with concurrency rules on a store that cannot
// hold slots.
func checkSlots(store ratekeeper.Store, set *rules.Set) error {
	if !set.HasConcurrency() {
		return nil
	}
	if _, ok := store.(ratekeeper.ConcurrencyStore); !ok {
		return fmt.Errorf("httplimit: concurrency rules on %T: %w", store, ratekeeper.ErrNoSlots)
	}
	return nil
}

// slotLimiters builds a limiter per concurrency rule of set, by rule index;
// nil when set has none. A store that holds no slots gets none: New
// refused that, and after a SetRules every such request fails open, logged.
func (m *Middleware) slotLimiters(set *rules.Set) []*ratekeeper.ConcurrencyLimiter {
	if !set.HasConcurrency() {
		return nil
	}
	out := make([]*ratekeeper.ConcurrencyLimiter, len(set.Rules))
	var opts []ratekeeper.Option
	if m.clock != nil {
		opts = append(opts, ratekeeper.WithClock(m.clock))
	}
	for i, rl := range set.Rules {
		if !rl.IsConcurrency() {
			continue
		}
		l, err := ratekeeper.NewConcurrencyLimiter(m.store, rl.Concurrency, opts...)
		if err != nil {
			m.logger.Error("concurrency rule not applied", "rule", rl.Name, "err", err)
			continue
		}
		out[i] = l
	}
	return out
}

// acquireSlots takes a slot for each concurrency rule in s.conc, for a
// request the rate rules allowed, and adds those rules to s.enforced. When
// one refuses it gives back every slot taken and what the rate rules took,
// and answers the refusal; refused reports whether it did.
func (m *Middleware) acquireSlots(ctx context.Context, r *http.Request, v verdict, s *scratch) (_ verdict, refused bool) {
	for _, i := range s.conc {
		mt := s.matches[i]
		rl := mt.Rule
		var (
			p   *ratekeeper.Permit
			d   ratekeeper.Decision
			err error
		)
		if l := v.c.slots[rl.Index]; l != nil {
			p, d, err = l.TryAcquire(ctx, mt.Key)
		} else {
			err = ratekeeper.ErrNoSlots
		}
		if err != nil {
			// Fail open, as for a rate rule's store error.
			m.logger.ErrorContext(ctx, "concurrency store failed; request allowed", "rule", rl.Name, "err", err)
			m.count(rl.Name, ResultError)
			d = ratekeeper.Decision{Allowed: true, Fallback: ratekeeper.FallbackUncounted, Limit: rl.Concurrency.Max}
		}
		s.results[i] = d
		s.enforced = append(s.enforced, i)
		if p != nil {
			s.permits = append(s.permits, p)
		}
		if !d.Allowed {
			releaseAll(ctx, s.permits)
			clear(s.permits)
			s.permits = s.permits[:0]
			m.giveBack(ctx, s)
			return m.refused(ctx, r, v, s), true
		}
	}
	return v, false
}

// releaseAll gives back the slots of ps.
func releaseAll(ctx context.Context, ps []*ratekeeper.Permit) {
	for _, p := range ps {
		_ = p.Release(ctx) // an unreachable store's slot expires by itself
	}
}
