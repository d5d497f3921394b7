package httplimit

import (
	"context"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/rules"
)

// addBanChecks appends to s.reqs, after the enforced rules' requests, a
// request of cost 0 on the ban of each enforced rule with a ban. It takes
// nothing: its RetryAfter is how long the ban has left. It goes in the
// same TakeAll as the takes. So on one Redis server a ban costs no round
// trip of its own; on a Cluster its key is in another slot, a call apart.
func addBanChecks(s *scratch, now time.Time) {
	for _, i := range s.enforced {
		mt := &s.matches[i]
		if mt.Rule.Ban > 0 {
			s.bans = append(s.bans, i)
			s.reqs = append(s.reqs, ratekeeper.Request{Key: rules.BanKey(mt.Key), Limit: mt.Rule.BanLimit(), Now: now})
		}
	}
}

// applyBans reads the ban checks of s, and drops them from s.reqs and
// s.decs, which then hold the enforced rules' alone. It reports whether a
// key is banned. Then each banned rule's result is refused, for the
// longer of what its ban has left and the limit's own wait. Whatever the
// rules took is given back: requests during a ban do not spend the limit.
// A check the store's failure policy refused refuses the request as that
// policy says.
func (m *Middleware) applyBans(ctx context.Context, ok bool, s *scratch) bool {
	if len(s.bans) == 0 {
		return false
	}
	n := len(s.enforced)
	checks := s.decs[n:]
	s.reqs, s.decs = s.reqs[:n], s.decs[:n]
	banned := false
	for k, i := range s.bans {
		d := checks[k]
		if d.Allowed && d.RetryAfter <= 0 {
			continue
		}
		if !banned && ok {
			m.giveBack(ctx, s)
		}
		banned = true
		res := &s.results[i]
		if d.Allowed { // banned: the check's RetryAfter is what the ban has left
			retry := d.RetryAfter
			if !res.Allowed { // the limit refuses too: wait for both
				retry = max(retry, res.RetryAfter)
			}
			d = ratekeeper.Decision{Limit: res.Limit, RetryAfter: retry, ResetAfter: max(res.ResetAfter, retry)}
		}
		d.Allowed, d.Remaining, d.Limit = false, 0, res.Limit
		*res = d
	}
	return banned
}

// startBans bans the key of each rule with a ban that refused the request
// by its count. The ban's one token is taken: only the first refusal of an
// episode gets it, on any gateway sharing the store. So a refusal during a
// ban does not extend it, and each ban is counted once. Each such rule's
// result then waits out the ban. A store that fails leaves the refusal as
// the limit made it.
func (m *Middleware) startBans(ctx context.Context, v verdict, s *scratch) {
	for _, i := range s.enforced {
		mt := &s.matches[i]
		res := &s.results[i]
		if mt.Rule.Ban <= 0 || res.Allowed || res.Fallback != ratekeeper.NoFallback {
			continue
		}
		req := ratekeeper.Request{Key: rules.BanKey(mt.Key), Limit: mt.Rule.BanLimit(), N: 1}
		if len(s.reqs) > 0 {
			req.Now = s.reqs[0].Now
		}
		d, err := m.store.Take(ctx, req)
		if err != nil {
			m.logger.ErrorContext(ctx, "rate limit store failed to ban", "rule", mt.Rule.Name, "err", err)
			continue
		}
		left := d.RetryAfter // another refusal banned the key first
		if d.Allowed {
			left = d.ResetAfter
			inc(v.c.rules[mt.Rule.Index].bans)
		}
		if left > res.RetryAfter {
			res.RetryAfter = left
		}
		res.ResetAfter = max(res.ResetAfter, res.RetryAfter)
	}
}
