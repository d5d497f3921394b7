// Package promlimit reports the decisions of the httplimit middleware to
// Prometheus, on a registry the caller gives. Its series are the ones the
// gateway exports: ratekeeper_decisions_total{rule,result},
// ratekeeper_queue_delay_seconds, ratekeeper_cost_units_total{rule},
// ratekeeper_bans_total{rule} and ratekeeper_bad_offsets_total{rule}.
//
//	reg := prometheus.NewRegistry()
//	pm, err := promlimit.New(reg)
//	...
//	mw, err := httplimit.New(store, set, httplimit.WithMetrics(pm))
package promlimit

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is httplimit.Metrics on Prometheus (it does not import
// httplimit, so that the gateway's own metrics can build on it). It is
// safe for concurrent use.
type Metrics struct {
	decisions  *prometheus.CounterVec
	queueDelay prometheus.Histogram
	units      *prometheus.CounterVec
	bans       *prometheus.CounterVec
	badOffsets *prometheus.CounterVec
}

// New creates the metrics and registers them on reg. It fails, rather
// than panics, when reg has them already.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_decisions_total",
			Help: "Rate limit decisions by rule and result (allowed, limited, shadow_limited, queued, forbidden, error, over_limit).",
		}, []string{"rule", "result"}),
		queueDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratekeeper_queue_delay_seconds",
			Help:    "How long queued requests were held before proceeding.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		units: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_cost_units_total",
			Help: "Quota units charged to requests, by rule, for rules whose cost is not always 1 (a fixed cost, or one read from a request or response header).",
		}, []string{"rule"}),
		bans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_bans_total",
			Help: "Bans started by rule: each refusal that banned a key (a rule's ban) counts once.",
		}, []string{"rule"}),
		badOffsets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekeeper_bad_offsets_total",
			Help: "Requests whose offset_header, from a trusted proxy, held no offset of the limit (malformed, negative or too long): the limit's own offset applied.",
		}, []string{"rule"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.queueDelay, m.units, m.bans, m.badOffsets} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Counter returns the counter of rule's decisions with result.
func (m *Metrics) Counter(rule, result string) interface{ Inc() } {
	return m.PromCounter(rule, result)
}

// PromCounter is Counter as a prometheus.Counter, for callers that read it.
func (m *Metrics) PromCounter(rule, result string) prometheus.Counter {
	return m.decisions.WithLabelValues(rule, result)
}

// ForgetRule drops the series of a rule that no longer exists (after a
// reload), so that dashboards do not show it forever.
func (m *Metrics) ForgetRule(rule string) {
	m.decisions.DeletePartialMatch(prometheus.Labels{"rule": rule})
	m.units.DeleteLabelValues(rule)
	m.bans.DeleteLabelValues(rule)
	m.badOffsets.DeleteLabelValues(rule)
}

// BadOffsets returns the counter of rule's requests whose offset header
// was bad (httplimit.OffsetMetrics).
func (m *Metrics) BadOffsets(rule string) interface{ Inc() } {
	return m.badOffsets.WithLabelValues(rule)
}

// Bans returns the counter of the bans rule started
// (httplimit.BanMetrics).
func (m *Metrics) Bans(rule string) interface{ Inc() } {
	return m.bans.WithLabelValues(rule)
}

// Units returns the counter of the quota units rule charged
// (httplimit.UnitsMetrics).
func (m *Metrics) Units(rule string) interface{ Add(float64) } {
	return m.units.WithLabelValues(rule)
}

// QueueDelay records how long a queued request was held.
func (m *Metrics) QueueDelay(d time.Duration) { m.queueDelay.Observe(d.Seconds()) }
