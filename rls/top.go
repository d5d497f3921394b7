package rls

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/server/adminauth"
	"github.com/ratekeeper/ratekeeper/internal/server/dashboard"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/internal/topfleet"
	"github.com/ratekeeper/ratekeeper/internal/topk"
	"github.com/ratekeeper/ratekeeper/rules"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

// topKeys is how many keys each slice of a rule's lists of limited
// clients counts (internal/topk): an error bound of a span's total / 200,
// as the gateway's.
const topKeys = 200

// newBoard is the Board a Server counts its limited clients on: the one
// place it is made.
func newBoard() *topk.Board { return topk.NewBoard(topKeys) }

// withTop counts, on b, the keys each rule refused or admitted near its
// limit.
func withTop(b *topk.Board) Option {
	return optionFunc(func(c *config) { c.top = b })
}

// names is the set of the rules' names as /v1/top and /v1/status give
// them: their descriptor paths, domain.key_value.key.
func (rs *Rules) names() map[string]bool {
	out := make(map[string]bool, len(rs.rules))
	for _, r := range rs.rules {
		out[r.stat] = true
	}
	return out
}

// noteTop counts, per rule, the keys of the enforced descriptors that were
// refused or admitted with at most a tenth of their limit left. The store's
// failure policy refuses no client of its own: its refusals are not
// counted.
func (s *Service) noteTop(req *rlsv3.RateLimitRequest, slots []slot) {
	var now time.Time
	descs := req.GetDescriptors()
	for i := range slots {
		sl := &slots[i]
		kind, ok := topKind(sl)
		if !ok {
			continue
		}
		if now.IsZero() {
			now = s.now()
		}
		s.top.Add(now, sl.r.stat, kind, displayKey(sl.r, descs[i]), 1)
	}
}

// topKind is what sl counts for in the lists of limited clients, if
// anything.
func topKind(sl *slot) (topk.Kind, bool) {
	switch {
	case sl.r == nil || sl.r.shadow || sl.d.Fallback == ratekeeper.FallbackUncounted:
		return 0, false
	case sl.over && sl.kind != noLimit && sl.kind != unlimited:
		return topk.Refused, true
	case sl.kind == take && sl.d.Allowed && sl.d.Limit > 0 && sl.d.Remaining*10 <= sl.d.Limit:
		return topk.Near, true
	}
	return 0, false
}

// displayKey is a descriptor's entries as the admin shows them:
// key=value joined by '|', each value a fingerprint (rules.Fingerprint,
// as the gateway shows a header) unless the rule has show_key.
func displayKey(r *rule, d *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	for i, e := range d.GetEntries() {
		if i > 0 {
			b.WriteByte('|')
		}
		b.WriteString(e.GetKey())
		b.WriteByte('=')
		if r.showKey {
			b.WriteString(e.GetValue())
		} else {
			b.WriteString(rules.Fingerprint(e.GetValue()))
		}
	}
	return b.String()
}

// fleetPrefix starts the keys of serve's fleet lists, apart from the
// gateways' (topfleet.Prefix): a descriptor path and a gateway rule of
// the same name are different limits.
const fleetPrefix = topfleet.Prefix + "serve:"

// topClients answers /v1/top from this process's counts, per rule, or,
// for the fleet scope over Redis, from every serve process's last
// published ones. Over the memory store a fleet query answers with the
// local scope.
func (s *Server) topClients(ctx context.Context, q dashboard.TopQuery) (dashboard.TopAnswer, error) {
	now := time.Now()
	names, err := q.Rules(func(yield func(string) bool) {
		for _, r := range s.svc.Rules().rules {
			if !yield(r.stat) {
				return
			}
		}
	})
	if err != nil {
		return dashboard.TopAnswer{}, err
	}
	if q.Scope == dashboard.ScopeFleet && s.fleet != nil {
		tops, err := s.fleet.Read(ctx, names, q.Span, q.N)
		if err != nil {
			return dashboard.TopAnswer{}, fmt.Errorf("fleet: %w", err)
		}
		out := dashboard.TopAnswer{Scope: dashboard.ScopeFleet, Span: q.Span, Rules: []dashboard.TopRule{}}
		for _, t := range tops {
			out.Instances = max(out.Instances, t.Instances)
			out.Rules = append(out.Rules, dashboard.TopRuleOf(t.Rule, t.Kind, q.Span, t.Top))
		}
		return out, nil
	}
	out := dashboard.TopAnswer{Scope: dashboard.ScopeLocal, Span: q.Span, Rules: []dashboard.TopRule{}}
	for _, name := range names {
		for _, kind := range []topk.Kind{topk.Refused, topk.Near} {
			t, ok := s.top.Top(now, name, kind, q.Span, q.N)
			if !ok {
				return dashboard.TopAnswer{}, fmt.Errorf("span %q: want 1m or 1h", q.Span)
			}
			out.Rules = append(out.Rules, dashboard.TopRuleOf(name, kind, q.Span, t))
		}
	}
	return out, nil
}

// storeMode is how c decides shared limits, "memory" for the memory store.
func storeMode(c storeconfig.Config) string {
	if c.IsMemory() {
		return "memory"
	}
	return cmp.Or(c.Mode, storeconfig.DefaultMode)
}

// adminRoutes are the admin listener's pages beside /metrics and the
// health checks: the dashboard, /v1/status and /v1/top. With an admin
// token, /v1/top asks for it (it names clients); /v1/status does with
// ProtectReads.
func (s *Server) adminRoutes() http.Handler {
	guard := adminauth.New(s.proc.Logger, s.proc.Metrics.AdminUnauthorized)
	authorize := func(w http.ResponseWriter, r *http.Request) bool {
		protect := s.o.ProtectReads || (s.o.AdminToken != "" && r.URL.Path == dashboard.TopPath)
		return !protect || guard.Authorize(w, r, s.o.AdminToken)
	}
	return dashboard.New(s.status, s.topClients, dashboard.WithAuthorize(authorize))
}

// status is the dashboard's view of the service: each rule's decisions
// so far, the store, the last load of the configuration.
func (s *Server) status(context.Context) (dashboard.Status, error) {
	snap, err := metrics.Read(s.proc.Registry)
	if err != nil {
		return dashboard.Status{}, err
	}
	st := dashboard.Status{Time: time.Now(), Rules: []dashboard.RuleStatus{}}
	for _, r := range s.svc.Rules().rules {
		n := snap.Decisions[r.stat]
		mode := "enforce"
		if r.shadow {
			mode = "shadow"
		} else if r.quota {
			mode = "quota"
		}
		st.Rules = append(st.Rules, dashboard.RuleStatus{
			Name: r.stat, Mode: mode, Limit: r.describe(),
			Allowed: n[metrics.Allowed], Refused: n[metrics.Limited], Shadow: n[metrics.ShadowLimited], OverLimit: n[metrics.OverLimit],
		})
	}
	// Healthy unless the breaker sends decisions to the failure policy
	// (open) or probes the store (half_open).
	healthy := snap.Breaker == "" || snap.Breaker == "closed"
	st.Store = dashboard.StoreStatus{URL: cmp.Or(s.o.Store.Redacted(), "memory"), Mode: storeMode(s.o.Store), Healthy: healthy, Breaker: snap.Breaker}
	if !healthy {
		st.Store.Detail = "decided by on_error: " + cmp.Or(s.o.Store.OnError, "allow")
	}
	last := s.proc.LastLoad()
	st.Reload = dashboard.ReloadStatus{Time: last.At, OK: last.Err == nil}
	if last.Err != nil {
		st.Reload.Error = last.Err.Error()
	}
	return st, nil
}

// describe says the rule's limit for people: "100 per minute".
func (r *rule) describe() string {
	switch {
	case r.unlimit:
		return "unlimited"
	case r.mult > 1:
		return fmt.Sprintf("%d per %d %ss", r.rpu, r.mult, strings.ToLower(r.unit.String()))
	}
	return fmt.Sprintf("%d per %s", r.rpu, strings.ToLower(r.unit.String()))
}
