package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

func TestConcurrencyConformance(t *testing.T) {
	storetest.RunConcurrency(t, func(t *testing.T) ratekeeper.Store {
		s := memstore.New()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// Sweep drops the leases that expired on keys nobody asks about again
// (an instance's leaked permits), and the keys with them.
func TestSweepSlots(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(clock), memstore.WithJanitorInterval(0))
	defer s.Close()
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if d, err := s.AcquireSlot(ctx, ratekeeper.SlotRequest{Key: "k", ID: id, Max: 2, TTL: time.Second}); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}
	if n := s.InFlight("k", time.Time{}); n != 2 {
		t.Fatalf("in flight %d, want 2", n)
	}
	clock.Advance(time.Second)
	if n := s.InFlight("k", time.Time{}); n != 0 {
		t.Fatalf("in flight %d after the TTL, want 0", n)
	}
	s.Sweep()
	// Nothing left to find: a fresh key acquires as if it had never been used.
	if d, _ := s.AcquireSlot(ctx, ratekeeper.SlotRequest{Key: "k", ID: "c", Max: 2, TTL: time.Second}); d.Remaining != 1 {
		t.Fatalf("after Sweep: %+v", d)
	}
}
