package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/server/buildinfo"
	"github.com/ratekeeper/ratekeeper/promlimit"
)

// Results of a decision, the values of the "result" label (httplimit's
// Result constants).
const (
	Allowed       = "allowed"
	Limited       = "limited"
	ShadowLimited = "shadow_limited"
	Queued        = "queued"
	Forbidden     = "forbidden"
	Error         = "error"
	OverLimit     = "over_limit"
)

// Metrics is the set of ratekeeper's metrics on one registry. Its methods
// are safe for concurrent use. A nil *Metrics records nothing, so code can
// run without metrics.
type Metrics struct {
	decisions    *promlimit.Metrics // the middleware's, also rls's
	storeLatency *prometheus.HistogramVec
	storeErrors  *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	lastReload   prometheus.Gauge
	rules        prometheus.Gauge
	connections  *prometheus.CounterVec
	refusedConns prometheus.Counter
	adminRefused prometheus.Counter
	fleetErrors  *prometheus.CounterVec
	reg          prometheus.Registerer
	span         Span // nil: store calls are not traced
}

// Span starts a span around one store call (take, take_all, refund) and
// returns the context for the call and the function that ends the span
// with the call's error.
type Span func(ctx context.Context, call string) (context.Context, func(error))

// TraceStore makes the stores InstrumentStore wraps from now on call span
// around each take, take_all and refund.
func (m *Metrics) TraceStore(span Span) {
	if m != nil {
		m.span = span
	}
}

// New creates the metrics and registers them on reg (which must not be the
// default registry's, by convention: pass a registry you own).
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratekeeper_store_duration_seconds",
			Help:    "Latency of store calls by operation (take, take_all, refund).",
			Buckets: []float64{.00001, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_store_errors_total",
			Help: "Store calls that returned an error, by operation.",
		}, []string{"op"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_config_reloads_total",
			Help: "Configuration reloads by result (success, failure).",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratekeeper_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration was last loaded successfully (Unix seconds).",
		}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratekeeper_config_rules",
			Help: "Rules in the configuration being served.",
		}),
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_gateway_connections_total",
			Help: "Client connections by the server that read them: fast (the gateway's fast path) or net_http (Go's server: every connection with client_transport: standard, else those the fast path handed off, which count under both).",
		}, []string{"server"}),
		reg: reg,
		refusedConns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratekeeper_gateway_connections_refused_total",
			Help: "Client connections closed at once because their address held client.max_conns_per_ip already.",
		}),
		adminRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratekeeper_admin_unauthorized_total",
			Help: "Admin requests refused with 401: the bearer token (admin reset, and reads when protected) was missing or wrong.",
		}),
		fleetErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_top_fleet_errors_total",
			Help: "Errors of the fleet's top lists over Redis: publish (a publish failed) or record (a record read back did not decode, and was skipped).",
		}, []string{"what"}),
	}
	dec, err := promlimit.New(reg)
	if err != nil {
		panic(err) // a fresh registry of the process's own: a programming error
	}
	m.decisions = dec
	for _, what := range []string{"publish", "record"} {
		m.fleetErrors.WithLabelValues(what) // exposed at 0 before the first
	}
	reg.MustRegister(m.storeLatency, m.storeErrors, m.reloads, m.lastReload, m.rules, m.connections, m.refusedConns, m.adminRefused, m.fleetErrors)
	// Both reload series exist from the start at 0: a counter that appears
	// at 1 has no increase() in Prometheus, so the first failed reload
	// would not fire deploy/prometheus/alerts.yml's alert.
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	return m
}

// NewRegistry returns a fresh registry with the Go runtime and process
// collectors and ratekeeper_build_info, for a server's admin endpoint.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo(buildinfo.Read()))
	return r
}

// buildInfo is the ratekeeper_build_info gauge: 1, with the values that
// `ratekeeper version` prints as labels, so that a query can count the
// versions running and join them to other series.
func buildInfo(i buildinfo.Info) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "ratekeeper_build_info",
		Help:        "Always 1; its labels are the module version, the VCS revision (12 characters, or unknown) and the Go release of the binary, as ratekeeper version prints them.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}

// Decision counts one decision for rule with result.
func (m *Metrics) Decision(rule, result string) {
	if m == nil {
		return
	}
	m.decisions.PromCounter(rule, result).Inc()
}

// Decisions returns the decision metrics, for a service that counts in
// them too (rls.NewMetrics); nil when m is nil.
func (m *Metrics) Decisions() *promlimit.Metrics {
	if m == nil {
		return nil
	}
	return m.decisions
}

// Counter is DecisionCounter for httplimit.Metrics, which m satisfies.
func (m *Metrics) Counter(rule, result string) interface{ Inc() } {
	return m.decisions.PromCounter(rule, result)
}

// Units is the counter of the quota units rule charged, for
// httplimit.UnitsMetrics; nil when m is nil.
func (m *Metrics) Units(rule string) interface{ Add(float64) } {
	if m == nil {
		return nil
	}
	return m.decisions.Units(rule)
}

// Bans is the counter of the bans rule started, for
// httplimit.BanMetrics; nil when m is nil.
func (m *Metrics) Bans(rule string) interface{ Inc() } {
	if m == nil {
		return nil
	}
	return m.decisions.Bans(rule)
}

// BadOffsets is the counter of rule's requests whose offset header was
// bad, for httplimit.OffsetMetrics; nil when m is nil.
func (m *Metrics) BadOffsets(rule string) interface{ Inc() } {
	if m == nil {
		return nil
	}
	return m.decisions.BadOffsets(rule)
}

// DecisionCounter returns the counter of rule's decisions with result, so
// that hot paths can look it up once per rule instead of per request.
// It returns nil when m is nil; Inc on it then must be skipped (see Inc).
func (m *Metrics) DecisionCounter(rule, result string) prometheus.Counter {
	if m == nil {
		return nil
	}
	return m.decisions.PromCounter(rule, result)
}

// ForgetRule drops the decision series of a rule that no longer exists
// (after a reload), so that dashboards do not show it forever.
func (m *Metrics) ForgetRule(rule string) {
	if m == nil {
		return
	}
	m.decisions.ForgetRule(rule)
}

// ConnectionCounter returns the counter of client connections read by
// server ("fast" or "net_http"); nil when m is nil.
func (m *Metrics) ConnectionCounter(server string) prometheus.Counter {
	if m == nil {
		return nil
	}
	return m.connections.WithLabelValues(server)
}

// AdminUnauthorized counts an admin request refused with 401.
func (m *Metrics) AdminUnauthorized() {
	if m != nil {
		m.adminRefused.Inc()
	}
}

// ConnectionsRefused returns the counter of client connections refused
// for the per-address cap; nil when m is nil.
func (m *Metrics) ConnectionsRefused() prometheus.Counter {
	if m == nil {
		return nil
	}
	return m.refusedConns
}

// FleetError counts an error of the fleet's top lists: "publish" or
// "record".
func (m *Metrics) FleetError(what string) {
	if m != nil {
		m.fleetErrors.WithLabelValues(what).Inc()
	}
}

// Inc increments c unless it is nil (from a nil *Metrics).
func Inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

// QueueDelay records how long a queued request was held.
func (m *Metrics) QueueDelay(d time.Duration) {
	if m == nil {
		return
	}
	m.decisions.QueueDelay(d)
}

// Reload counts a configuration reload and, when it succeeded, records the
// time and the number of rules now served.
func (m *Metrics) Reload(ok bool, rules int) {
	if m == nil {
		return
	}
	if !ok {
		m.reloads.WithLabelValues("failure").Inc()
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.lastReload.SetToCurrentTime()
	m.rules.Set(float64(rules))
}

// Loaded records the first configuration's load, which is not a reload.
func (m *Metrics) Loaded(rules int) {
	if m == nil {
		return
	}
	m.lastReload.SetToCurrentTime()
	m.rules.Set(float64(rules))
}

// InstrumentStore wraps s so that every call's latency lands in the store
// latency histogram and every error in the store errors counter. A
// BatchStore stays a BatchStore, a ConcurrencyStore a ConcurrencyStore. A
// nil m returns s itself.
func (m *Metrics) InstrumentStore(s ratekeeper.Store) ratekeeper.Store {
	if m == nil {
		return s
	}
	is := instrumented{
		s:        s,
		span:     m.span,
		take:     m.storeLatency.WithLabelValues("take"),
		takeAll:  m.storeLatency.WithLabelValues("take_all"),
		refund:   m.storeLatency.WithLabelValues("refund"),
		takeErr:  m.storeErrors.WithLabelValues("take"),
		allErr:   m.storeErrors.WithLabelValues("take_all"),
		refundEr: m.storeErrors.WithLabelValues("refund"),
	}
	var out ratekeeper.Store = &is
	if b, ok := s.(ratekeeper.BatchStore); ok {
		out = &instrumentedBatch{instrumented: is, b: b}
	}
	if cs, ok := s.(ratekeeper.ConcurrencyStore); ok {
		return m.instrumentSlots(out, cs)
	}
	return out
}

type instrumented struct {
	s                         ratekeeper.Store
	span                      Span
	take, takeAll, refund     prometheus.Observer
	takeErr, allErr, refundEr prometheus.Counter
}

func (s *instrumented) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	ctx, end := s.traced(ctx, "take")
	t := time.Now()
	d, err := s.s.Take(ctx, req)
	s.take.Observe(time.Since(t).Seconds())
	if err != nil {
		s.takeErr.Inc()
	}
	end(err)
	return d, err
}

// traced starts the span of a call, if store calls are traced.
func (s *instrumented) traced(ctx context.Context, call string) (context.Context, func(error)) {
	if s.span == nil {
		return ctx, func(error) {}
	}
	return s.span(ctx, call)
}

func (s *instrumented) Refund(ctx context.Context, req ratekeeper.Request, d ratekeeper.Decision) error {
	ctx, end := s.traced(ctx, "refund")
	t := time.Now()
	err := s.s.Refund(ctx, req, d)
	s.refund.Observe(time.Since(t).Seconds())
	if err != nil {
		s.refundEr.Inc()
	}
	end(err)
	return err
}

type instrumentedBatch struct {
	instrumented
	b ratekeeper.BatchStore
}

func (s *instrumentedBatch) TakeAll(ctx context.Context, reqs []ratekeeper.Request, out []ratekeeper.Decision) (bool, error) {
	ctx, end := s.traced(ctx, "take_all")
	t := time.Now()
	ok, err := s.b.TakeAll(ctx, reqs, out)
	s.takeAll.Observe(time.Since(t).Seconds())
	if err != nil {
		s.allErr.Inc()
	}
	end(err)
	return ok, err
}
