package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// TestClusterDeadPrimaryHoldsNoOtherCalls: on a Cluster whose one primary
// stops answering (CLIENT PAUSE), calls batched with that primary's calls
// still get the other primaries' answers at once. With one pipeline for a
// whole batch they waited out their deadline beside the paused primary's
// and failed, which opened the live primaries' circuit breakers too and
// made the p99 the timeout while a primary was down (bench/faults).
func TestClusterDeadPrimaryHoldsNoOtherCalls(t *testing.T) {
	s := open(t, redistest.Cluster(t))
	ctx := context.Background()
	limit := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1000000, Period: time.Second}
	req := func(k string) ratekeeper.Request { return ratekeeper.Request{Key: k, Limit: limit, N: 1} }
	byPart := map[string][]string{}
	for i := 0; i < 2000; i++ {
		k := fmt.Sprintf("hol-%d", i)
		if p := s.Part(req(k)); p != "" && len(byPart[p]) < 8 {
			byPart[p] = append(byPart[p], k)
		}
	}
	if len(byPart) != 3 {
		t.Fatalf("keys on %d primaries, want 3", len(byPart))
	}
	var victim string
	for p := range byPart {
		victim = p
		break
	}
	node := redis.NewClient(&redis.Options{Addr: victim})
	defer node.Close()
	if err := node.Do(ctx, "CLIENT", "PAUSE", 3000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	defer node.Do(ctx, "CLIENT", "UNPAUSE")
	const deadline = 500 * time.Millisecond
	var wg sync.WaitGroup
	type outcome struct {
		key  string
		took time.Duration
		err  error
	}
	results := make(chan outcome, 64)
	// Many callers at once, so that calls for every primary share batches.
	for round := 0; round < 3; round++ {
		for p, keys := range byPart {
			for _, k := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					_, err := s.TakeBy(ctx, req(k), start.Add(deadline))
					if p != victim {
						results <- outcome{k, time.Since(start), err}
					}
				}()
			}
		}
		wg.Wait()
	}
	close(results)
	n := 0
	for o := range results {
		n++
		if o.err != nil || o.took > deadline/2 {
			t.Errorf("%s on a live primary: %v after %v, beside a paused one", o.key, o.err, o.took)
		}
	}
	if n == 0 {
		t.Fatal("no call on a live primary")
	}
}
