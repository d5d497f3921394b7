// Package serverstore opens a server's store as storeconfig describes it,
// with the health that the server's metrics show: the one package where
// the servers' process meets the stores.
package serverstore

import (
	"context"
	"log/slog"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/internal/server"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

// Opener opens the store c describes (storeconfig.Open), with its Health.
func Opener(c storeconfig.Config) server.Opener {
	return func(ctx context.Context, logger *slog.Logger) (server.Opened, error) {
		s, closer, err := storeconfig.Open(ctx, c, logger)
		if err != nil {
			return server.Opened{}, err
		}
		return server.Opened{Store: s, Closer: closer, Health: Health(s)}, nil
	}
}

// Health reads the health of a store that storeconfig.Open opened. A
// failsafe store has its fallbacks and circuit breaker; over Redis, the
// shared store's local decisions too. Any other store has none.
func Health(s ratekeeper.Store) metrics.StoreHealth {
	fs, ok := s.(*failsafe.Store)
	if !ok {
		return metrics.StoreHealth{}
	}
	h := metrics.StoreHealth{
		Fallback: func() metrics.FallbackStats {
			st := fs.Stats()
			return metrics.FallbackStats{Errors: st.Errors, Allowed: st.FallbackAllowed, Denied: st.FallbackDenied, Local: st.FallbackLocal}
		},
		Breaker: func() metrics.BreakerStats { return breaker(fs.Stats()) },
	}
	if rs, ok := fs.Primary().(*redisstore.Store); ok {
		h.Shared = func() metrics.SharedStats { return shared(rs) }
	}
	return h
}

// breakerStates are the metrics' names of failsafe's breaker states.
var breakerStates = map[failsafe.BreakerState]string{
	failsafe.Closed:   metrics.BreakerClosed,
	failsafe.Open:     metrics.BreakerOpen,
	failsafe.HalfOpen: metrics.BreakerHalfOpen,
}

func breaker(st failsafe.Stats) metrics.BreakerStats {
	return metrics.BreakerStats{
		State:          breakerStates[st.Breaker],
		Opens:          st.BreakerOpens,
		ShortCircuits:  st.ShortCircuits,
		Timeouts:       st.Timeouts,
		ProbeSuccesses: st.ProbeSuccesses,
		ProbeFailures:  st.ProbeFailures,
	}
}

func shared(rs *redisstore.Store) metrics.SharedStats {
	st := rs.SharedStats()
	return metrics.SharedStats{
		ClockSkews:     rs.ClockSkews(),
		LocalDecisions: st.LocalDecisions,
		DenialHits:     st.DenialHits,
		Syncs:          st.Syncs,
		SyncErrors:     st.SyncErrors,
		Leases:         st.Leases,
		LeaseErrors:    st.LeaseErrors,
		Dropped:        st.Dropped,
	}
}
