package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// A bucket's key that sync mode writes lives for the stale bound after its
// water has drained: counts arrive up to that late, at the instants they
// were admitted. Expired when its water drained, a late count started an
// empty bucket at its instant and the water it stacked on was lost; every
// instance then under-counted, and TestSharedModesAcrossProcesses/sync/
// leaky_bucket went past its bound (the key held a third of the water the
// admissions replayed). A window's key is not kept: a late count for an
// ended window is dropped anyway.
func TestSyncKeepsBucketKeys(t *testing.T) {
	ctx := context.Background()
	url := redistest.Server(t)
	// The loop never syncs on its own here: Flush does. The stale bound is
	// max(1 s, 10 periods).
	const period = time.Hour
	for _, byLimit := range []bool{false, true} {
		for _, a := range []ratekeeper.Algorithm{ratekeeper.TokenBucket, ratekeeper.LeakyBucket, ratekeeper.FixedWindow} {
			// 4 a millisecond: one request's water drains in 250 µs.
			l := ratekeeper.Limit{Algorithm: a, Rate: 4000, Period: time.Second, Burst: 100}
			if a == ratekeeper.FixedWindow {
				l = ratekeeper.Limit{Algorithm: a, Rate: 100, Period: 100 * time.Millisecond}
			}
			mode := Sync
			if byLimit {
				mode = Exact
			}
			s, err := Open(ctx, url, WithMode(mode, period))
			if err != nil {
				t.Fatal(err)
			}
			if byLimit {
				if _, err := s.Take(ctx, ratekeeper.Request{Key: "warm", Limit: l, N: 1}); err != nil { // caches the limit's arguments
					t.Fatal(err)
				}
				if err := s.SetLimitModes(map[ratekeeper.Limit]Mode{l: Sync}); err != nil {
					t.Fatal(err)
				}
			}
			key := "keep-" + string(a)
			if byLimit {
				key += "-by-limit"
			}
			if d, err := s.Take(ctx, ratekeeper.Request{Key: key, Limit: l, N: 1}); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v, %v", key, d, err)
			}
			s.shared.Flush() // sends the count, from a goroutine of its own
			for deadline := time.Now().Add(10 * time.Second); s.shared.Stats().Syncs < 2; {
				if time.Now().After(deadline) {
					t.Fatalf("%s: the count was not sent within 10 s", key)
				}
				time.Sleep(time.Millisecond) // polling, with a deadline
			}
			ttl, err := s.client.PTTL(ctx, s.Key(key, a)).Result()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case a == ratekeeper.FixedWindow && ttl > l.Period:
				t.Errorf("%s: the key lives %v, past its window's end", key, ttl)
			case a != ratekeeper.FixedWindow && ttl < 900*time.Millisecond:
				t.Errorf("%s: the key lives %v after a sync, want the stale bound, not until its water drains", key, ttl)
			}
			s.Close()
		}
	}
}
