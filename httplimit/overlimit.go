package httplimit

import (
	"context"
	"net/http"
	"strings"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/rules"
)

// Rules whose over_limit forwards or reroutes (rules.OverLimit) never
// refuse. They are decided after the request is admitted, each on its
// own, as shadow rules are: a request that an enforced rule refuses takes
// nothing from them. Within its limit such a rule takes as any rule.
// Past it, the request goes on taking nothing from it. Handler then sets
// the rule's header on the request for the next handler. The header holds
// the names of the rules exceeded, comma-separated, in the set's order.
// Handler also sends the next handler the upstream of the first rerouting
// rule exceeded (Reroute). A client's own copy of any such header is
// removed before the rules decide.

// rerouteKey is the context key of the upstream a request is rerouted to.
type rerouteKey struct{}

// Reroute returns the upstream that a rule with over_limit: reroute sends
// r to: that of the first such rule, in the set's order, whose limit r
// exceeded. ok is false when none did. Handler gives next such a request.
func Reroute(r *http.Request) (upstream string, ok bool) {
	upstream, ok = r.Context().Value(rerouteKey{}).(string)
	return upstream, ok
}

// dropOverHeaders removes from r the headers set's over_limit write: only
// the middleware sets them. It also removes a tier or offset header
// (set.ProxyHeaders) that an untrusted peer sent: the rules did not
// believe it, so next must not either.
func dropOverHeaders(r *http.Request, set *rules.Set) {
	for _, h := range set.OverLimitHeaders() {
		delete(r.Header, h)
	}
	if hs := set.ProxyHeaders(); len(hs) > 0 && !set.ClientIP().Trusts(r) {
		for _, h := range hs {
			delete(r.Header, h)
		}
	}
}

// decideOver takes for each rule that forwards or reroutes on its own, and
// notes in s.exceeded those whose limit is spent. A store that fails, or
// whose failure policy decided without counting, reports the rule as
// uncounted and within its limit: a rule acts on a count only.
func (m *Middleware) decideOver(ctx context.Context, v verdict, s *scratch) {
	for j, i := range s.over {
		mt := &s.matches[i]
		rl := mt.Rule
		ri := &v.c.rules[rl.Index]
		d, err := m.takeOver(ctx, v, s, j)
		if err != nil {
			m.logger.ErrorContext(ctx, "rate limit store failed for a rule that forwards or reroutes; request within it", "rule", rl.Name, "err", err)
			m.count(rl.Name, ResultError)
			limit := rl.Concurrency.Max
			if !rl.IsConcurrency() {
				limit = mt.Limit().Capacity()
			}
			d = ratekeeper.Decision{Allowed: true, Fallback: ratekeeper.FallbackUncounted, Limit: limit}
		}
		if d.Fallback == ratekeeper.FallbackUncounted {
			d.Allowed = true
		}
		s.results[i] = d
		if !d.Allowed {
			inc(ri.counters[cOver])
			s.exceeded = append(s.exceeded, j)
			m.logger.DebugContext(ctx, "over the limit; request goes on", "rule", rl.Name, "action", rl.OverLimit.Action.String(), "client_ip", v.ip)
			continue
		}
		inc(ri.counters[cAllowed])
		if ri.units != nil && d.Fallback != ratekeeper.FallbackUncounted {
			ri.units.Add(float64(s.overReqs[j].N))
		}
	}
}

// takeOver takes for over rule j of s: its store request, or a slot for a
// concurrency rule, which the request then holds as an enforced rule's.
func (m *Middleware) takeOver(ctx context.Context, v verdict, s *scratch, j int) (ratekeeper.Decision, error) {
	mt := &s.matches[s.over[j]]
	if !mt.Rule.IsConcurrency() {
		return m.store.Take(ctx, s.overReqs[j])
	}
	l := v.c.slots[mt.Rule.Index]
	if l == nil {
		return ratekeeper.Decision{}, ratekeeper.ErrNoSlots
	}
	p, d, err := l.TryAcquire(ctx, mt.Key)
	if p != nil {
		s.permits = append(s.permits, p)
	}
	return d, err
}

// overMatches returns the over rules whose limit the request exceeded.
func (s *scratch) overMatches() []rules.Match {
	for _, j := range s.exceeded {
		s.overM = append(s.overM, s.matches[s.over[j]])
	}
	return s.overM
}

// setOverHeaders sets on r the header of each exceeded rule that names
// one, and returns the upstream of the first exceeded rule that
// reroutes ("" if none).
func setOverHeaders(r *http.Request, set *rules.Set, s *scratch) (reroute string) {
	for _, j := range s.exceeded {
		if o := s.matches[s.over[j]].Rule.OverLimit; o.Action == rules.Reroute && reroute == "" {
			reroute = o.Upstream
		}
	}
	for _, h := range set.OverLimitHeaders() {
		var b strings.Builder
		for _, j := range s.exceeded {
			if rl := s.matches[s.over[j]].Rule; rl.OverLimit.Header == h {
				if b.Len() > 0 {
					b.WriteString(", ")
				}
				b.WriteString(rl.Name)
			}
		}
		if b.Len() == 0 {
			continue
		}
		if r.Header == nil {
			r.Header = http.Header{}
		}
		r.Header[h] = []string{b.String()}
	}
	return reroute
}
