package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/shared"
)

// The scripts' add and lease ops answer what the engine's model of them
// does, to the microsecond, over random sequences that mix them with
// decisions: the simulations that prove the modes' bounds run on the model.
func TestSharedOpsMatchTheModel(t *testing.T) {
	server := redistest.Server(t)
	for _, tc := range []struct {
		name string
		url  string
		opts []Option
	}{
		{"standalone", server, nil},
		{"unpipelined", server, []Option{WithAutoPipeline(false), WithPrefix("rk-np:")}},
		{"cluster", redistest.Cluster(t), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := Open(ctx, tc.url, append(tc.opts, WithMinTTL(time.Hour))...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			matchModel(t, remote{s})
		})
	}
}

func matchModel(t *testing.T, r remote) {
	ctx := context.Background()
	limits := []ratekeeper.Limit{
		{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: time.Second},
		{Algorithm: ratekeeper.FixedWindow, Rate: 7, Period: 3 * time.Second, Stagger: true},
		{Algorithm: ratekeeper.SlidingWindow, Rate: 10, Period: time.Second},
		{Algorithm: ratekeeper.SlidingWindow, Rate: 13, Period: 700 * time.Millisecond, Stagger: true},
		{Algorithm: ratekeeper.TokenBucket, Rate: 3, Period: time.Second, Burst: 8},
		{Algorithm: ratekeeper.LeakyBucket, Rate: 100, Period: time.Second, Burst: 10},
	}
	for li, l := range limits {
		for seed := range uint64(8) {
			rng := rand.New(rand.NewPCG(seed, uint64(li)))
			m := shared.NewModel()
			key := fmt.Sprintf("shared-diff-%d-%d", li, seed)
			now := int64(1_700_000_000_000_000) + rng.Int64N(int64(time.Second/time.Microsecond))
			for step := range 300 {
				now += rng.Int64N(int64(l.Period/time.Microsecond) / 4)
				it := shared.Item{Key: key, Limit: l, Now: now}
				var op string
				switch rng.IntN(3) {
				case 0:
					op = "add"
					it.N = rng.Int64N(12) - 3
					it.At = now - rng.Int64N(2*int64(l.Period/time.Microsecond))
				case 1:
					op = "lease"
					it.N = 1 + rng.Int64N(int64(l.Capacity()))
					it.Min = 1 + rng.Int64N(it.N)
				default:
					op = "take"
				}
				if op == "take" {
					req := ratekeeper.Request{Key: key, Limit: l, N: 1 + rng.IntN(2), Now: time.UnixMicro(now)}
					got, err := r.Take(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					want, _ := m.Take(ctx, req)
					if got != want {
						t.Fatalf("%s seed %d step %d: take: Redis %+v, model %+v", l, seed, step, got, want)
					}
					continue
				}
				got, want := []shared.Item{it}, []shared.Item{it}
				call, mcall := r.Add, m.Add
				if op == "lease" {
					call, mcall = r.Lease, m.Lease
				}
				if err := call(ctx, got); err != nil || got[0].Err != nil {
					t.Fatalf("%s: %v %v", op, err, got[0].Err)
				}
				mcall(ctx, want)
				if got[0] != want[0] {
					t.Fatalf("%s seed %d step %d: %s %+v:\nRedis %+v\nmodel %+v", l, seed, step, op, it, got[0], want[0])
				}
			}
		}
	}
}
