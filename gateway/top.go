package gateway

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/internal/server/dashboard"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/internal/topk"
)

// topKeys is how many keys each slice of a rule's lists of limited
// clients counts (internal/topk): an error bound of a span's total / 200.
const topKeys = 200

// decided is the middleware's WithDecided hook: it counts the keys each
// rule refused, let go on past its limit (over_limit) or admitted near its
// limit, and fills the access log's record when there is one.
func (g *Gateway) decided(r *http.Request, d httplimit.Decided) {
	var now time.Time
	if rl := d.Refused.Rule; rl != nil {
		now = time.Now()
		g.top.Add(now, rl.Name, topk.Refused, rl.DisplayKey(d.Refused.Key), 1)
	}
	for _, m := range d.Near {
		if now.IsZero() {
			now = time.Now()
		}
		g.top.Add(now, m.Rule.Name, topk.Near, m.Rule.DisplayKey(m.Key), 1)
	}
	// A key past a limit that forwards or reroutes is limited, though
	// its request went on.
	for _, m := range d.Over {
		if now.IsZero() {
			now = time.Now()
		}
		g.top.Add(now, m.Rule.Name, topk.Refused, m.Rule.DisplayKey(m.Key), 1)
	}
	if g.access.Load() != nil {
		logDecision(r, d)
	}
}

// dashboard serves the admin's page, /v1/status and /v1/top, reads
// guarded as the other admin reads are.
func (g *Gateway) dashboard(authorize func(http.ResponseWriter, *http.Request) bool) http.Handler {
	return dashboard.New(g.status, g.topClients, dashboard.WithAuthorize(authorize))
}

// status is the dashboard's view of the gateway: the rules and their
// decisions so far, the store, the last load of the file.
func (g *Gateway) status(context.Context) (dashboard.Status, error) {
	snap, err := metrics.Read(g.proc.Registry)
	if err != nil {
		return dashboard.Status{}, err
	}
	cfg := g.cfg.Load()
	st := dashboard.Status{Time: time.Now()}
	for _, rl := range g.mw.Rules().Rules {
		n := snap.Decisions[rl.Name]
		limit := rl.Limit.String()
		if rl.IsConcurrency() {
			limit = fmt.Sprintf("%d in flight", rl.Concurrency.Max)
		}
		st.Rules = append(st.Rules, dashboard.RuleStatus{
			Name: rl.Name, Mode: rl.Mode.String(), Limit: limit,
			Allowed: n[metrics.Allowed] + n[metrics.Queued],
			Refused: n[metrics.Limited],
			Shadow:  n[metrics.ShadowLimited], OverLimit: n[metrics.OverLimit],
		})
	}
	// The store is healthy unless its breaker sends decisions to the
	// on_error policy (open) or probes it (half_open).
	healthy := snap.Breaker == "" || snap.Breaker == "closed"
	st.Store = dashboard.StoreStatus{URL: cmp.Or(cfg.Store.Redacted(), "memory"), Mode: cfg.Store.Mode, Healthy: healthy, Breaker: snap.Breaker}
	if !healthy {
		st.Store.Detail = "decided by on_error: " + cmp.Or(cfg.Store.OnError, "allow")
	}
	last := g.proc.LastLoad()
	st.Reload = dashboard.ReloadStatus{Time: last.At, OK: last.Err == nil}
	if last.Err != nil {
		st.Reload.Error = last.Err.Error()
	}
	return st, nil
}

// topClients answers /v1/top from this gateway's counts or, for the fleet
// scope over Redis, from every gateway's last published ones. Over the
// memory store a fleet query answers with the local scope.
func (g *Gateway) topClients(ctx context.Context, q dashboard.TopQuery) (dashboard.TopAnswer, error) {
	names, err := q.Rules(func(yield func(string) bool) {
		for _, rl := range g.mw.Rules().Rules {
			if !yield(rl.Name) {
				return
			}
		}
	})
	if err != nil {
		return dashboard.TopAnswer{}, err
	}
	if q.Scope == dashboard.ScopeFleet && g.fleet != nil {
		return g.fleetTop(ctx, names, q)
	}
	now := time.Now()
	out := dashboard.TopAnswer{Scope: dashboard.ScopeLocal, Span: q.Span}
	for _, name := range names {
		for _, kind := range []topk.Kind{topk.Refused, topk.Near} {
			t, ok := g.top.Top(now, name, kind, q.Span, q.N)
			if !ok {
				return dashboard.TopAnswer{}, fmt.Errorf("span %q: want 1m or 1h", q.Span)
			}
			out.Rules = append(out.Rules, dashboard.TopRuleOf(name, kind, q.Span, t))
		}
	}
	return out, nil
}

// fleetTop answers /v1/top for the fleet: the rules' lists merged over
// every gateway that published within the TTL.
func (g *Gateway) fleetTop(ctx context.Context, names []string, q dashboard.TopQuery) (dashboard.TopAnswer, error) {
	tops, err := g.fleet.Read(ctx, names, q.Span, q.N)
	if err != nil {
		return dashboard.TopAnswer{}, fmt.Errorf("fleet: %w", err)
	}
	out := dashboard.TopAnswer{Scope: dashboard.ScopeFleet, Span: q.Span}
	for _, t := range tops {
		out.Instances = max(out.Instances, t.Instances)
		out.Rules = append(out.Rules, dashboard.TopRuleOf(t.Rule, t.Kind, q.Span, t.Top))
	}
	return out, nil
}
