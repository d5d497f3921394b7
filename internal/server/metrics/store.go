package metrics

import "github.com/prometheus/client_golang/prometheus"

// StoreHealth reads a store's health at each scrape. A nil field exposes
// none of its series. The package that opens the store fills it, so that
// these metrics know no store.
type StoreHealth struct {
	// Fallback reads the on_error policy's counters.
	Fallback func() FallbackStats
	// Breaker reads the circuit breaker's state and counters.
	Breaker func() BreakerStats
	// Shared reads the counters of a shared store's local decisions.
	Shared func() SharedStats
}

// FallbackStats is what a failing-over store reports about its fallbacks:
// how many calls failed, and what was decided instead.
type FallbackStats struct {
	// Errors is how many calls to the primary store failed or timed out.
	Errors uint64
	// Allowed is how many decisions failed open (allowed without the store).
	Allowed uint64
	// Denied is how many decisions failed closed.
	Denied uint64
	// Local is how many decisions the local in-memory fallback made.
	Local uint64
}

// BreakerStats are a store's circuit breaker: its state and its counters.
type BreakerStats struct {
	// State is the state the breaker is in: one of BreakerClosed,
	// BreakerOpen and BreakerHalfOpen.
	State string
	// Opens is how many times the breaker opened.
	Opens uint64
	// ShortCircuits is how many calls the open breaker sent straight to
	// the on_error policy.
	ShortCircuits uint64
	// Timeouts is how many calls ran out of the store timeout.
	Timeouts uint64
	// ProbeSuccesses and ProbeFailures count the open breaker's probes by
	// result.
	ProbeSuccesses, ProbeFailures uint64
}

// The values of BreakerStats.State, as the state label shows them.
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half_open"
)

// SharedStats are the counters of a shared store's local decisions.
type SharedStats struct {
	// LocalDecisions counts decisions made without a call to the remote.
	LocalDecisions uint64
	// DenialHits counts refusals answered by the denial cache.
	DenialHits uint64
	// Syncs and SyncErrors count the calls that sent counts (sync mode).
	Syncs, SyncErrors uint64
	// Leases and LeaseErrors count the calls that leased quota.
	Leases, LeaseErrors uint64
	// Dropped counts admitted requests whose count never reached the
	// remote.
	Dropped uint64
	// ClockSkews counts calendar calls made again because this host's
	// clock was a calendar period or more from the remote's.
	ClockSkews uint64
}

// CollectStore registers a collector for each field of h that is not nil.
// Each reads its stats at every scrape. Call it once per Metrics.
func (m *Metrics) CollectStore(h StoreHealth) {
	if m == nil {
		return
	}
	if h.Fallback != nil {
		m.reg.MustRegister(&fallbackCollector{h.Fallback})
	}
	if h.Breaker != nil {
		m.reg.MustRegister(&breakerCollector{h.Breaker})
	}
	if h.Shared != nil {
		m.reg.MustRegister(&sharedCollector{h.Shared})
	}
}

// counter sends the counter d with value v and labels on ch.
func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

var (
	fallbackErrorsDesc = prometheus.NewDesc("ratekeeper_store_fallback_errors_total",
		"Calls to the primary store that failed or timed out, so that the on_error policy decided.", nil, nil)
	fallbackDecisionsDesc = prometheus.NewDesc("ratekeeper_store_fallback_decisions_total",
		"Decisions made by the on_error policy instead of the store, by action (allow = fail open, deny, local).", []string{"action"}, nil)
)

// fallbackCollector exposes a store's fallbacks.
type fallbackCollector struct{ stats func() FallbackStats }

func (c *fallbackCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- fallbackErrorsDesc
	ch <- fallbackDecisionsDesc
}

func (c *fallbackCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	counter(ch, fallbackErrorsDesc, s.Errors)
	counter(ch, fallbackDecisionsDesc, s.Allowed, "allow")
	counter(ch, fallbackDecisionsDesc, s.Denied, "deny")
	counter(ch, fallbackDecisionsDesc, s.Local, "local")
}

var (
	breakerStateDesc = prometheus.NewDesc("ratekeeper_store_breaker_state",
		"The store's circuit breaker: 1 for the state it is in (closed: calls go to Redis; open: to the on_error policy; half_open: a probe is testing Redis), 0 for the others.", []string{"state"}, nil)
	breakerOpensDesc = prometheus.NewDesc("ratekeeper_store_breaker_opens_total",
		"Times the store's circuit breaker opened after consecutive failures.", nil, nil)
	shortCircuitsDesc = prometheus.NewDesc("ratekeeper_store_breaker_short_circuits_total",
		"Calls the open circuit breaker sent straight to the on_error policy without asking Redis.", nil, nil)
	timeoutsDesc = prometheus.NewDesc("ratekeeper_store_timeouts_total",
		"Calls to Redis that ran out of the store timeout (counted in ratekeeper_store_fallback_errors_total too).", nil, nil)
	probesDesc = prometheus.NewDesc("ratekeeper_store_breaker_probes_total",
		"Probes of Redis by the open circuit breaker, by result: success (it closed) or failure (it stayed open for another cool-down).", []string{"result"}, nil)
)

// breakerCollector exposes a store's circuit breaker.
type breakerCollector struct{ stats func() BreakerStats }

func (c *breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{breakerStateDesc, breakerOpensDesc, shortCircuitsDesc, timeoutsDesc, probesDesc} {
		ch <- d
	}
}

func (c *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for _, state := range []string{BreakerClosed, BreakerOpen, BreakerHalfOpen} {
		v := 0.0
		if st.State == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(breakerStateDesc, prometheus.GaugeValue, v, state)
	}
	counter(ch, breakerOpensDesc, st.Opens)
	counter(ch, shortCircuitsDesc, st.ShortCircuits)
	counter(ch, timeoutsDesc, st.Timeouts)
	counter(ch, probesDesc, st.ProbeSuccesses, "success")
	counter(ch, probesDesc, st.ProbeFailures, "failure")
}

var (
	localDecisionsDesc = prometheus.NewDesc("ratekeeper_store_local_decisions_total",
		"Decisions of a shared store made locally, without a call to Redis (sync and lease modes).", nil, nil)
	denialHitsDesc = prometheus.NewDesc("ratekeeper_store_denial_cache_hits_total",
		"Refusals answered by the denial cache, without a call to Redis.", nil, nil)
	syncsDesc = prometheus.NewDesc("ratekeeper_store_syncs_total",
		"Calls that sent local counts to Redis and read back the shared ones (sync mode), by result.", []string{"result"}, nil)
	leasesDesc = prometheus.NewDesc("ratekeeper_store_leases_total",
		"Calls that leased quota from Redis (lease mode), by result.", []string{"result"}, nil)
	droppedDesc = prometheus.NewDesc("ratekeeper_store_sync_dropped_total",
		"Admitted requests whose count never reached Redis: their window ended while Redis did not answer.", nil, nil)
	clockSkewsDesc = prometheus.NewDesc("ratekeeper_store_clock_skews_total",
		"Calendar window calls made twice because this host's clock was a calendar period or more from the Redis server's.", nil, nil)
)

// sharedCollector exposes a shared store's local decisions.
type sharedCollector struct{ stats func() SharedStats }

func (c *sharedCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{localDecisionsDesc, denialHitsDesc, syncsDesc, leasesDesc, droppedDesc, clockSkewsDesc} {
		ch <- d
	}
}

func (c *sharedCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	counter(ch, localDecisionsDesc, st.LocalDecisions)
	counter(ch, denialHitsDesc, st.DenialHits)
	counter(ch, syncsDesc, st.Syncs-st.SyncErrors, "success")
	counter(ch, syncsDesc, st.SyncErrors, "failure")
	counter(ch, leasesDesc, st.Leases-st.LeaseErrors, "success")
	counter(ch, leasesDesc, st.LeaseErrors, "failure")
	counter(ch, droppedDesc, st.Dropped)
	counter(ch, clockSkewsDesc, st.ClockSkews)
}
