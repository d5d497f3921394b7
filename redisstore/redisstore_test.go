package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// open opens a store on url whose keys outlive the fake clocks' timelines.
func open(t testing.TB, url string, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := redisstore.Open(ctx, url, append([]redisstore.Option{redisstore.WithMinTTL(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	s := open(t, redistest.Server(t))
	storetest.Run(t, func(t *testing.T) ratekeeper.Store { return s })
}

// TestConformanceCluster runs the suite on Redis Cluster, where the
// pipeliner sends a batch as a pipeline of one script run per decision.
func TestConformanceCluster(t *testing.T) {
	s := open(t, redistest.Cluster(t))
	storetest.Run(t, func(t *testing.T) ratekeeper.Store { return s })
}

func TestConformanceNoAutoPipeline(t *testing.T) {
	s := open(t, redistest.Server(t), redisstore.WithAutoPipeline(false))
	storetest.Run(t, func(t *testing.T) ratekeeper.Store { return s })
}

func TestDifferential(t *testing.T) {
	s := open(t, redistest.Server(t))
	seeds := 40
	if testing.Short() {
		seeds = 5
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		m := memstore.New(memstore.WithJanitorInterval(0))
		storetest.DifferentialFunc(t, m, s, seed, 2000, sameDecision)
		m.Close()
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
}

// One instance in sync mode decides exactly as Redis would: what it reads
// back plus what it admitted is the whole count.
func TestConformanceSync(t *testing.T) {
	s := open(t, redistest.Server(t), redisstore.WithMode(redisstore.Sync, 0), redisstore.WithPrefix("rk-sync:"))
	storetest.Run(t, func(t *testing.T) ratekeeper.Store { return s })
}

// sameDecision compares a Redis store's decision with the memory store's:
// equal, except that a refusal answered by the denial cache reports
// Remaining as it was when the refusal was cached, which may be less than
// there is now (a bucket refilled a little, a window's old requests weigh
// less), never more.
func sameDecision(want, got ratekeeper.Decision) bool {
	if !want.Allowed && !got.Allowed && got.Remaining <= want.Remaining {
		got.Remaining = want.Remaining
	}
	return want == got
}
