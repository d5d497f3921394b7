package metrics

import (
	"context"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// instrumentSlots adds the ConcurrencyStore methods of cs to the
// instrumented store s, timed and counted as op acquire_slot,
// refresh_slot and release_slot. A BatchStore stays a BatchStore.
func (m *Metrics) instrumentSlots(s ratekeeper.Store, cs ratekeeper.ConcurrencyStore) ratekeeper.Store {
	sl := slots{
		cs:         cs,
		acquire:    m.storeLatency.WithLabelValues("acquire_slot"),
		refresh:    m.storeLatency.WithLabelValues("refresh_slot"),
		release:    m.storeLatency.WithLabelValues("release_slot"),
		acquireErr: m.storeErrors.WithLabelValues("acquire_slot"),
		refreshErr: m.storeErrors.WithLabelValues("refresh_slot"),
		releaseErr: m.storeErrors.WithLabelValues("release_slot"),
	}
	if b, ok := s.(ratekeeper.BatchStore); ok {
		return &batchWithSlots{b, sl}
	}
	return &withSlots{s, sl}
}

type withSlots struct {
	ratekeeper.Store
	slots
}

type batchWithSlots struct {
	ratekeeper.BatchStore
	slots
}

type slots struct {
	cs                                 ratekeeper.ConcurrencyStore
	acquire, refresh, release          interface{ Observe(float64) }
	acquireErr, refreshErr, releaseErr interface{ Inc() }
}

func (s *slots) AcquireSlot(ctx context.Context, req ratekeeper.SlotRequest) (ratekeeper.Decision, error) {
	t := time.Now()
	d, err := s.cs.AcquireSlot(ctx, req)
	s.acquire.Observe(time.Since(t).Seconds())
	if err != nil {
		s.acquireErr.Inc()
	}
	return d, err
}

func (s *slots) RefreshSlot(ctx context.Context, req ratekeeper.SlotRequest, d ratekeeper.Decision) (bool, error) {
	t := time.Now()
	ok, err := s.cs.RefreshSlot(ctx, req, d)
	s.refresh.Observe(time.Since(t).Seconds())
	if err != nil {
		s.refreshErr.Inc()
	}
	return ok, err
}

func (s *slots) ReleaseSlot(ctx context.Context, req ratekeeper.SlotRequest, d ratekeeper.Decision) error {
	t := time.Now()
	err := s.cs.ReleaseSlot(ctx, req, d)
	s.release.Observe(time.Since(t).Seconds())
	if err != nil {
		s.releaseErr.Inc()
	}
	return err
}
