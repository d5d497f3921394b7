package memstore_test

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// BenchmarkDecide is one decision on an existing key, for every algorithm,
// by each way a caller reaches the store: a Limiter's Allow and Reserve (the
// Limiter binds itself to the store), the store's own Take, as a wrapping
// store calls it, and TakeAll, as httplimit and rls decide several rules.
// The limit (1000 per millisecond, burst 1000) is asked faster than it
// allows, so the decisions are a mix of allowed and refused. bench/ holds
// the comparisons with other libraries.
func BenchmarkDecide(b *testing.B) {
	const key = "ip:10.0.0.1"
	for _, alg := range ratekeeper.Algorithms {
		l := ratekeeper.Limit{Algorithm: alg, Rate: 1000, Period: time.Millisecond, Burst: 1000}
		b.Run("algo="+string(alg)+"/via=allow", func(b *testing.B) {
			s, lim := benchLimiter(b, l)
			defer s.Close()
			for b.Loop() {
				lim.Allow(ctx, key)
			}
		})
		if alg == ratekeeper.TokenBucket || alg == ratekeeper.LeakyBucket {
			b.Run("algo="+string(alg)+"/via=reserve", func(b *testing.B) {
				s, lim := benchLimiter(b, l)
				defer s.Close()
				for b.Loop() {
					lim.Reserve(ctx, key)
				}
			})
		}
		b.Run("algo="+string(alg)+"/via=take", func(b *testing.B) {
			s, _ := benchLimiter(b, l)
			defer s.Close()
			req := ratekeeper.Request{Key: key, Limit: l, N: 1}
			for b.Loop() {
				s.Take(ctx, req)
			}
		})
	}
	// A calendar window against the epoch one above: a month in Berlin,
	// the boundaries made once per period and limit.
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	cal := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1 << 30, Calendar: ratekeeper.Monthly, Location: berlin, Offset: 14 * 24 * time.Hour}
	b.Run("algo=fixed_window/calendar=monthly/via=allow", func(b *testing.B) {
		s, lim := benchLimiter(b, cal)
		defer s.Close()
		for b.Loop() {
			lim.Allow(ctx, key)
		}
	})
	b.Run("via=takeall", func(b *testing.B) {
		s := memstore.New()
		defer s.Close()
		reqs := []ratekeeper.Request{
			{Key: "user:1", N: 1, Limit: ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1000, Period: time.Millisecond}},
			{Key: "route:/a", N: 1, Limit: ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Millisecond}},
			{Key: "global", N: 1, Limit: ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 1000, Period: time.Millisecond}},
		}
		out := make([]ratekeeper.Decision, len(reqs))
		b.ReportAllocs()
		for b.Loop() {
			s.TakeAll(ctx, reqs, out)
		}
	})
}

// benchLimiter is a store holding key's state and a Limiter of l over it.
func benchLimiter(b *testing.B, l ratekeeper.Limit) (*memstore.Store, *ratekeeper.Limiter) {
	b.Helper()
	s := memstore.New()
	lim, err := ratekeeper.New(s, l)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := lim.Allow(ctx, "ip:10.0.0.1"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	return s, lim
}
