package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// BenchmarkSlot is one request's concurrency slot, taken and given back
// (TryAcquire and Release: two store calls), on one key, on the memory
// store and on Redis (two script runs, each its own round trip).
func BenchmarkSlot(b *testing.B) {
	m := memstore.New()
	defer m.Close()
	for _, c := range []struct {
		name  string
		store func(b *testing.B) ratekeeper.Store
	}{
		{"memory", func(*testing.B) ratekeeper.Store { return m }},
		{"redis", func(b *testing.B) ratekeeper.Store { return open(b, redistest.Server(b)) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := ratekeeper.NewConcurrencyLimiter(c.store(b), ratekeeper.Concurrency{Max: 1 << 20, TTL: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p, _, err := l.TryAcquire(ctx, "bench")
					if err != nil || p == nil {
						b.Fatal("refused", err)
					}
					if err := p.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
