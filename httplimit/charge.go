package httplimit

import (
	"context"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/rules"
)

// pending holds the costs an admitted request owes once the upstream has
// answered: one per rule that reads its cost from the response or counts
// its status (count_only).
type pending struct {
	c       *compiled
	charges []charge
}

// charge is one rule's part of pending: the unit it took at admission
// (req, with its decision d), to be made the response's cost.
type charge struct {
	rl  *rules.Rule
	req ratekeeper.Request
	d   ratekeeper.Decision
}

// pending records what the admitted request of v owes after its response.
func (m *Middleware) pending(v verdict, s *scratch) *pending {
	p := &pending{c: v.c}
	for j, i := range s.enforced {
		if rl := s.matches[i].Rule; rl.Cost.Response != "" || !rl.CountOnly.IsZero() {
			p.charges = append(p.charges, charge{rl: rl, req: s.reqs[j], d: s.decs[j]})
		}
	}
	return p
}

// settle makes each charge the cost that the response header h gives.
// For a cost of 0, the unit taken at admission is given back. A cost above
// 1 takes the rest even past what the bucket holds (the token bucket's
// debt), so that the client's next requests wait it out. A count_only
// rule takes one unit when status is one it counts.
func (m *Middleware) settle(ctx context.Context, p *pending, h http.Header, status int) {
	for _, c := range p.charges {
		if !c.rl.CountOnly.IsZero() {
			m.countOutcome(ctx, p, c, status)
			continue
		}
		n, ok := c.rl.Cost.FromResponse(h)
		if !ok {
			m.logger.WarnContext(ctx, "the upstream's cost header is not one whole number from 0; charged the rule's default", "rule", c.rl.Name, "header", c.rl.Cost.Response, "cost", n)
		}
		var err error
		switch {
		case n == 0:
			err = m.store.Refund(ctx, c.req, c.d)
		case n > 1:
			req := c.req
			req.N, req.Reserve, req.Now = n-1, true, time.Time{}
			if m.clock != nil {
				req.Now = m.clock.Now()
			}
			_, err = m.store.Take(ctx, req)
		}
		if err != nil {
			m.logger.ErrorContext(ctx, "rate limit store failed charging a response's cost", "rule", c.rl.Name, "cost", n, "err", err)
		}
		if u := p.c.rules[c.rl.Index].units; u != nil {
			u.Add(float64(n))
		}
	}
}

// countOutcome takes one unit for count_only charge c if the response's
// status counts. It takes as Allow does: when requests in flight spent
// the limit first, it is refused and takes nothing, so a key's excess is
// at most its requests in flight when the limit was spent.
func (m *Middleware) countOutcome(ctx context.Context, p *pending, c charge, status int) {
	if !c.rl.CountOnly.Has(status) {
		return
	}
	req := c.req
	req.N, req.Now = 1, time.Time{}
	if m.clock != nil {
		req.Now = m.clock.Now()
	}
	if _, err := m.store.Take(ctx, req); err != nil {
		m.logger.ErrorContext(ctx, "rate limit store failed counting a response", "rule", c.rl.Name, "status", status, "err", err)
	}
	if u := p.c.rules[c.rl.Index].units; u != nil {
		u.Add(1)
	}
}

// spentCountOnly reports whether a count_only rule's look at its key
// (cost 0, allowed) found no unit left, and marks those refused.
func spentCountOnly(s *scratch) bool {
	spent := false
	for j, i := range s.enforced {
		if s.reqs[j].N == 0 && !s.matches[i].Rule.CountOnly.IsZero() && s.decs[j].RetryAfter > 0 {
			s.results[i].Allowed = false
			spent = true
		}
	}
	return spent
}

// chargeWriter settles a request's pending costs when the response's head
// is written: the upstream's headers are in the map then. Else it settles
// them when the handler returns, from the headers it left (a hijacked
// upgrade's, or none: the defaults).
type chargeWriter struct {
	http.ResponseWriter
	m       *Middleware
	p       *pending
	ctx     context.Context // the request's, without its cancellation: a client that leaves still pays
	settled bool
}

// charge settles with status, the response's; a handler that wrote no
// head answered 200, as net/http does.
func (w *chargeWriter) charge(status int) {
	if !w.settled {
		w.settled = true
		w.m.settle(w.ctx, w.p, w.ResponseWriter.Header(), status)
	}
}

func (w *chargeWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.charge(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *chargeWriter) Write(b []byte) (int, error) {
	w.charge(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Flush sends what is buffered, as the writer it wraps does.
func (w *chargeWriter) Flush() {
	w.charge(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (w *chargeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
