package redisstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// A store made with New on a Cluster client that has not read the slots
// yet (a gateway started while Redis does not answer: storeconfig starts
// anyway) routes no call by loading them outside the call's bound, and
// routes by them once it has them. Before,
// batcherFor and Part loaded the slots (CLUSTER SLOTS on every node in
// turn) in the caller's context, which TakeBy's deadline is not part of,
// and Part in none at all: a TakeBy bounded by 200 ms, and the failsafe
// store's Part before it, waited as long as the nodes did not answer.
func TestRoutingKeepsTheDeadlineWithoutSlots(t *testing.T) {
	url := redistest.Cluster(t)
	fresh := func() *Store {
		client, err := NewClient(url)
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(client)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(); client.Close() })
		return s
	}
	taker, parter := fresh(), fresh()
	ctx := context.Background()
	const hang = 3 * time.Second
	for _, a := range taker.Client().(*redis.ClusterClient).Options().Addrs {
		n := redis.NewClient(&redis.Options{Addr: a})
		err := n.Do(ctx, "CLIENT", "PAUSE", hang.Milliseconds(), "ALL").Err()
		n.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	req := ratekeeper.Request{Key: "k", Limit: ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1_000_000, Period: time.Second}, N: 1}
	const deadline, slack = 200 * time.Millisecond, 300 * time.Millisecond
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		_, err := taker.TakeBy(ctx, req, start.Add(deadline))
		if took := time.Since(start); took > deadline+slack {
			t.Errorf("TakeBy bounded by %v, on hung nodes: %v after %v", deadline, err, took)
		}
	})
	wg.Go(func() {
		start := time.Now()
		part := parter.Part(req)
		if took := time.Since(start); took > slack {
			t.Errorf("Part, on hung nodes: %q after %v", part, took)
		}
	})
	wg.Wait()
	// Once the nodes answer, both route by the slots again.
	for end := time.Now().Add(hang + 10*time.Second); ; {
		_, err1 := taker.Take(ctx, req)
		_, err2 := parter.Take(ctx, req)
		if err1 == nil && err2 == nil && taker.Part(req) != "" && parter.Part(req) != "" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("not routed by the slots once the nodes answer: %v, %v", err1, err2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := taker.Take(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, ok := taker.pipe.nodes.Load(taker.Part(req)); !ok {
		t.Error("no batcher of the key's primary once the nodes answer")
	}
}
