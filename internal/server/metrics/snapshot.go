package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Snapshot is what the dashboard shows of a process's metrics, read from
// its registry as plain figures.
type Snapshot struct {
	// Decisions are each rule's cumulative decisions by result (Allowed,
	// Limited, ShadowLimited...).
	Decisions map[string]map[string]uint64
	// Breaker is the store's circuit breaker state ("closed", "open",
	// "half_open"); empty for a store without one.
	Breaker string
	// Reloads counts the configuration's reloads by result ("success",
	// "failure"); LastReload is the last successful one's time (zero if
	// none).
	Reloads    map[string]uint64
	LastReload time.Time
}

// Read returns the Snapshot of the metrics g gathers.
func Read(g prometheus.Gatherer) (Snapshot, error) {
	mfs, err := g.Gather()
	s := Snapshot{Decisions: map[string]map[string]uint64{}, Reloads: map[string]uint64{}}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "ratekeeper_decisions_total":
				r := labels["rule"]
				if s.Decisions[r] == nil {
					s.Decisions[r] = map[string]uint64{}
				}
				s.Decisions[r][labels["result"]] = uint64(m.GetCounter().GetValue())
			case "ratekeeper_store_breaker_state":
				if m.GetGauge().GetValue() == 1 {
					s.Breaker = labels["state"]
				}
			case "ratekeeper_config_reloads_total":
				s.Reloads[labels["result"]] = uint64(m.GetCounter().GetValue())
			case "ratekeeper_config_last_reload_success_timestamp_seconds":
				if v := m.GetGauge().GetValue(); v > 0 {
					s.LastReload = time.Unix(0, int64(v*1e9))
				}
			}
		}
	}
	return s, err
}
