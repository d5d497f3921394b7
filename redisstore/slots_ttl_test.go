package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// A key's slots live at least WithMinTTL, as every other key does: Redis
// expires keys on its own clock, whatever instant the requests carry, and a
// timeline on a fake clock with a lease of 3 ms lost its slots whenever 3 ms
// passed between two of its calls (TestConcurrencyConformance/one, under
// load).
func TestSlotsLiveTheMinTTL(t *testing.T) {
	ctx := context.Background()
	s := open(t, redistest.Server(t), redisstore.WithMinTTL(time.Minute))
	req := ratekeeper.SlotRequest{Key: "slots-min-ttl", ID: "a", Max: 1, TTL: 3 * time.Millisecond, Now: time.UnixMicro(1_700_000_000_000_000)}
	key := s.SlotKey(req.Key)
	lives := func(after string) {
		t.Helper()
		ttl, err := s.Client().PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < 50*time.Second {
			t.Errorf("after %s with a lease of %v, the slots' key lives %v; want the min TTL, a minute", after, req.TTL, ttl)
		}
	}
	if _, err := s.AcquireSlot(ctx, req); err != nil {
		t.Fatal(err)
	}
	lives("acquire")
	if err := s.Client().PExpire(ctx, key, time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RefreshSlot(ctx, req, ratekeeper.Decision{Allowed: true}); err != nil {
		t.Fatal(err)
	}
	lives("refresh")
}
