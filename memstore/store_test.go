package memstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

var ctx = context.Background()

func limiter(t *testing.T, s ratekeeper.Store, l ratekeeper.Limit, c ratekeeper.Clock) *ratekeeper.Limiter {
	t.Helper()
	lim, err := ratekeeper.New(s, l, ratekeeper.WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestShardingChangesNothing: one shard or many, the decisions are the same.
func TestShardingChangesNothing(t *testing.T) {
	one := memstore.New(memstore.WithShards(1))
	many := memstore.New(memstore.WithShards(512))
	defer one.Close()
	defer many.Close()
	for seed := uint64(1); seed <= 5; seed++ {
		storetest.Differential(t, one, many, seed, 2000)
	}
}

// TestMaxKeysBoundsMemory: a flood of distinct keys never holds more than
// the cap, evicts idle keys first, and counts the evictions it forces.
func TestMaxKeysBoundsMemory(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	s := memstore.New(memstore.WithShards(4), memstore.WithMaxKeys(100), memstore.WithJanitorInterval(0), memstore.WithClock(clock))
	defer s.Close()
	lim := limiter(t, s, ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Period: time.Minute}, clock)
	for i := 0; i < 10_000; i++ {
		if d, err := lim.Allow(ctx, fmt.Sprintf("flood:%d", i)); err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v %v", i, d, err)
		}
		if n := s.Len(); n > 100 {
			t.Fatalf("after %d keys the store holds %d, cap 100", i+1, n)
		}
	}
	if s.Evictions() == 0 {
		t.Fatal("a flood of live keys past the cap forced no eviction")
	}
	// Once the windows have passed, new keys push out idle ones: no forced
	// eviction.
	clock.Advance(time.Minute)
	before := s.Evictions()
	for i := 0; i < 1000; i++ {
		lim.Allow(ctx, fmt.Sprintf("later:%d", i))
	}
	if got := s.Evictions() - before; got > 1000-100+25 {
		t.Fatalf("%d forced evictions among 1000 new keys when 100 idle keys were there to take", got)
	}
}

// TestSweepRemovesIdleKeysOnly: the janitor's sweep drops a key once its
// state is back to fresh, and not before.
func TestSweepRemovesIdleKeysOnly(t *testing.T) {
	for _, alg := range ratekeeper.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			s := memstore.New(memstore.WithJanitorInterval(0), memstore.WithClock(clock))
			defer s.Close()
			lim := limiter(t, s, ratekeeper.Limit{Algorithm: alg, Rate: 2, Period: time.Second}, clock)
			d, _ := lim.Allow(ctx, "k")
			s.Sweep()
			if s.Len() != 1 {
				t.Fatalf("a key in use was swept (len %d)", s.Len())
			}
			clock.Advance(d.ResetAfter)
			s.Sweep()
			if s.Len() != 0 {
				t.Fatalf("key still held %v after its reset-after", d.ResetAfter)
			}
		})
	}
}

// TestJanitorRunsAndStops: the janitor sweeps on its own, and Close stops it
// (twice is fine).
func TestJanitorRunsAndStops(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	s := memstore.New(memstore.WithJanitorInterval(time.Millisecond), memstore.WithClock(clock))
	lim := limiter(t, s, ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1, Period: time.Second}, clock)
	lim.Allow(ctx, "k")
	clock.Advance(time.Hour)
	deadline := time.Now().Add(10 * time.Second)
	for s.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the janitor never swept the idle key")
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	s.Close()
	s.Close()
}

// TestTakeAllIsAllOrNothing: when one limit refuses, the others keep their
// quota, exactly.
func TestTakeAllIsAllOrNothing(t *testing.T) {
	clock := storetest.NewClock(storetest.Epoch)
	s := memstore.New(memstore.WithClock(clock))
	defer s.Close()
	perUser := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 10, Period: time.Second}
	global := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 3, Period: time.Second}
	reqs := func(user string) []ratekeeper.Request {
		return []ratekeeper.Request{
			{Key: "user:" + user, Limit: perUser, N: 1},
			{Key: "global", Limit: global, N: 1},
		}
	}
	out := make([]ratekeeper.Decision, 2)
	for i := 0; i < 3; i++ {
		if ok, err := ratekeeper.TakeAll(ctx, s, reqs("a"), out); !ok || err != nil {
			t.Fatalf("request %d: %v %v", i, ok, err)
		}
	}
	ok, err := ratekeeper.TakeAll(ctx, s, reqs("a"), out)
	if ok || err != nil || out[1].Allowed || !out[0].Allowed {
		t.Fatalf("4th request: ok=%v err=%v decisions %+v; want the global limit to refuse", ok, err, out)
	}
	lim := limiter(t, s, perUser, clock)
	if d, _ := lim.AllowN(ctx, "user:a", 0); d.Remaining != 7 {
		t.Fatalf("user a has %d left; the refused request must not have used any (want 7)", d.Remaining)
	}
}

// TestConcurrentAdmissionIsExact: many goroutines on one key, under -race,
// admit exactly the limit.
func TestConcurrentAdmissionIsExact(t *testing.T) {
	for _, alg := range ratekeeper.Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Epoch)
			s := memstore.New(memstore.WithShards(2))
			defer s.Close()
			lim := limiter(t, s, ratekeeper.Limit{Algorithm: alg, Rate: 100, Period: time.Hour}, clock)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Go(func() {
					for i := 0; i < 50; i++ {
						d, err := lim.Allow(ctx, "hot")
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := admitted.Load(); got != 100 {
				t.Fatalf("admitted %d of 400 concurrent requests, limit 100", got)
			}
		})
	}
}

// TestDefaultClockReadUnderLock: many goroutines on a fast leaky bucket with
// the store's own clock. A clock read before the lock would let a preempted
// caller decide in the past and be refused for waits that are already over.
func TestDefaultClockReadUnderLock(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	lim, err := ratekeeper.New(s, ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 1_000_000, Period: time.Second, Burst: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var worst atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for i := 0; i < 2000; i++ {
				d, err := lim.Allow(ctx, "fast")
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed && int64(d.RetryAfter) > worst.Load() {
					worst.Store(int64(d.RetryAfter))
				}
			}
		})
	}
	wg.Wait()
	// At a million per second with room for 1000, a refusal can only ever
	// ask for about a millisecond.
	if w := time.Duration(worst.Load()); w > 1100*time.Microsecond {
		t.Fatalf("a refusal asked to wait %v; decisions were made at stale instants", w)
	}
}
