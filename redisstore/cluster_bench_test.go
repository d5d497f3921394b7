package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// BenchmarkTakeCluster: decisions on a three-primary Cluster from 64
// callers at once, on 1,024 keys spread over the primaries, pipelined by
// each key's primary.
func BenchmarkTakeCluster(b *testing.B) {
	s := open(b, redistest.Cluster(b))
	l := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1_000_000, Period: time.Second}
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(32) // 64 callers on 2 cores
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		k := "bench-" + strconv.Itoa(int(next.Add(1)%1024))
		for pb.Next() {
			if _, err := s.Take(ctx, ratekeeper.Request{Key: k, Limit: l, N: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
