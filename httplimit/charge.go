package httplimit

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/rules"
)

// pending holds the costs an admitted request owes once the upstream has
// answered: one per rule that reads its cost from the response or counts
// its status (count_only).
type pending struct {
	c        *compiled
	charges  []charge
	body     bool // a rule reads its cost from the body
	unserved bool // the handler answered itself (Unserved)
}

// charge is one rule's part of pending: the units it took at admission
// (req, with its decision d), to be made the response's cost.
type charge struct {
	rl   *rules.Rule
	req  ratekeeper.Request
	d    ratekeeper.Decision
	body *rules.BodyMeter // for a cost read from the body, once the head is written
}

// pending records what the admitted request of v owes after its response.
func (m *Middleware) pending(v verdict, s *scratch) *pending {
	p := &pending{c: v.c}
	for j, i := range s.enforced {
		if rl := s.matches[i].Rule; rl.Cost.AfterResponse() || !rl.CountOnly.IsZero() {
			p.charges = append(p.charges, charge{rl: rl, req: s.reqs[j], d: s.decs[j]})
			p.body = p.body || len(rl.Cost.JSON) > 0
		}
	}
	return p
}

// settleHead settles, once the response's head with header h and status
// is known, each charge read from a header and each count_only rule's. It
// starts reading the body for the others.
func (m *Middleware) settleHead(ctx context.Context, p *pending, h http.Header, status int) {
	for i := range p.charges {
		c := &p.charges[i]
		switch {
		case !c.rl.CountOnly.IsZero():
			m.countOutcome(ctx, p, *c, status)
		case p.unserved:
			m.chargeCost(ctx, p, c, c.rl.Cost.Default) // the upstream did no work
		case len(c.rl.Cost.JSON) > 0:
			c.body = c.rl.Cost.Meter(h)
		default:
			n, ok := c.rl.Cost.FromResponse(h, c.req.N)
			if !ok {
				m.logger.WarnContext(ctx, "the upstream's cost header is not one whole number from 0; charged the rule's default or reserve", "rule", c.rl.Name, "header", c.rl.Cost.Response, "cost", n)
			}
			m.chargeCost(ctx, p, c, n)
		}
	}
}

// settleBody makes each charge read from the body the cost it read;
// complete says that the whole body was passed on.
func (m *Middleware) settleBody(ctx context.Context, p *pending, complete bool) {
	for i := range p.charges {
		c := &p.charges[i]
		if len(c.rl.Cost.JSON) == 0 || !c.rl.CountOnly.IsZero() || p.unserved {
			continue // settled with the head
		}
		n, ok := c.rl.Cost.FromBody(c.body, complete, c.req.N)
		if !complete {
			n = max(n, c.req.N) // a response cut short keeps its reserve
		}
		if !ok {
			m.logger.WarnContext(ctx, "the upstream's body does not give its cost as numbers from 0; charged at least the rule's default or reserve", "rule", c.rl.Name, "cost", n)
		}
		m.chargeCost(ctx, p, c, n)
	}
}

// chargeCost settles c's cost to n. Below what admission took, the
// difference is given back. Above, the rest is taken even past what the
// bucket holds (the token bucket's debt), so that the client's next
// requests wait it out.
func (m *Middleware) chargeCost(ctx context.Context, p *pending, c *charge, n int) {
	var err error
	req := c.req
	switch taken := req.N; {
	case n < taken:
		req.N = taken - n
		err = m.store.Refund(ctx, req, c.d)
	case n > taken:
		req.N, req.Reserve, req.Now = n-taken, true, time.Time{}
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

// unknownStatus settles a response whose status the middleware never saw:
// the client left, or the handler panicked, before the head was written.
// Every count_only rule counts it, since the upstream may have done what
// the rule limits.
const unknownStatus = 0

// countOutcome takes one unit for count_only charge c if the response's
// status counts, or is unknownStatus. It takes as Allow does: when requests in flight spent
// the limit first, it is refused and takes nothing, so a key's excess is
// at most its requests in flight when the limit was spent.
func (m *Middleware) countOutcome(ctx context.Context, p *pending, c charge, status int) {
	if status != unknownStatus && !c.rl.CountOnly.Has(status) {
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

// chargeWriter settles a request's pending costs read from a header, and
// its count_only rules', when the response's head is written: the
// upstream's headers are in the map then. Else it settles them when the
// handler returns, from the headers it left: a hijacked upgrade's, as a
// 101; none, as a 200 if the handler ended well, else as unknownStatus. It passes the body's bytes on, then reads them for
// the costs read from the body, which it settles when the handler returns.
type chargeWriter struct {
	http.ResponseWriter
	m        *Middleware
	p        *pending
	ctx      context.Context // the request's, without its cancellation: a client that leaves still pays
	settled  bool
	hijacked bool
}

// charge settles with status, the response's; a handler that wrote no
// head answered 200, as net/http does.
func (w *chargeWriter) charge(status int) {
	if !w.settled {
		w.settled = true
		w.m.settleHead(w.ctx, w.p, w.ResponseWriter.Header(), status)
	}
}

// end settles what is left once the handler returned; complete says that
// it passed the whole body on.
func (w *chargeWriter) end(complete bool) {
	switch {
	case w.hijacked:
		w.charge(http.StatusSwitchingProtocols)
	case !complete:
		w.charge(unknownStatus)
	}
	w.charge(http.StatusOK)
	if w.p.body {
		w.m.settleBody(w.ctx, w.p, complete)
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
	n, err := w.ResponseWriter.Write(b)
	if w.p.body {
		for i := range w.p.charges {
			if bm := w.p.charges[i].body; bm != nil {
				bm.Write(b[:n])
			}
		}
	}
	return n, err
}

// Flush sends what is buffered, as the writer it wraps does.
func (w *chargeWriter) Flush() {
	w.charge(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands over the connection, as the writer it wraps does. The
// handler then answers on it itself: ReverseProxy writes an upgrade's
// 101 there, so the response settles as a 101.
func (w *chargeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	w.hijacked = w.hijacked || err == nil
	return c, brw, err
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (w *chargeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Unserved marks the response about to be written on w as the handler's
// own answer, made without the work its cost measures. Examples are a
// proxy's 502 for an unreachable upstream, or a 408 for a stalled request
// body. A cost read from the response then settles at the rule's default,
// not at its reserve. Count_only rules count its status as any other.
//
// W is the writer Handler passed on, or one that wraps it with an Unwrap
// method. Call Unserved before writing the head; after, or on another
// writer, it does nothing.
func Unserved(w http.ResponseWriter) {
	for w != nil {
		if cw, ok := w.(*chargeWriter); ok {
			cw.p.unserved = cw.p.unserved || !cw.settled
			return
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}
