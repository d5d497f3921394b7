package ratekeeper_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// A user may create at most 2 posts per second: the third request in the
// same instant is refused, and the decision says for how long.
func ExampleLimiter_Allow() {
	store := memstore.New()
	defer store.Close()
	clock := storetest.NewClock(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC))
	posts, err := ratekeeper.New(store,
		ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 2, Period: time.Second},
		ratekeeper.WithClock(clock))
	if err != nil {
		panic(err)
	}
	for i := 0; i < 3; i++ {
		d, err := posts.Allow(context.Background(), "user:42")
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	clock.Advance(500 * time.Millisecond)
	d, _ := posts.Allow(context.Background(), "user:42")
	fmt.Printf("after 500ms: allowed=%v\n", d.Allowed)
	// Output:
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=500ms
	// after 500ms: allowed=true
}

// The leaky bucket's queue: five requests at once against a queue of two at
// one per second. The first proceeds now, two wait their slots, the rest are
// refused.
func ExampleLimiter_Reserve() {
	store := memstore.New()
	defer store.Close()
	clock := storetest.NewClock(time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC))
	queue, err := ratekeeper.New(store,
		ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 1, Period: time.Second, Burst: 2},
		ratekeeper.WithClock(clock))
	if err != nil {
		panic(err)
	}
	for i := 0; i < 5; i++ {
		d, _ := queue.Reserve(context.Background(), "customer:7")
		if d.Allowed {
			fmt.Printf("request %d: proceed after %v\n", i+1, d.Delay)
		} else {
			fmt.Printf("request %d: refused, retry after %v\n", i+1, d.RetryAfter)
		}
	}
	// Output:
	// request 1: proceed after 0s
	// request 2: proceed after 1s
	// request 3: proceed after 2s
	// request 4: refused, retry after 1s
	// request 5: refused, retry after 1s
}

// A worker sends at most 5 notifications per second to a customer's server
// and loses none: Wait blocks until each may go.
func ExampleLimiter_Wait() {
	store := memstore.New()
	defer store.Close()
	pace, err := ratekeeper.New(store,
		ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 5, Period: time.Second, Burst: 10})
	if err != nil {
		panic(err)
	}
	start := time.Now()
	for i := 0; i < 3; i++ {
		if err := pace.Wait(context.Background(), "customer:7"); err != nil {
			panic(err)
		}
		// send(notification[i])
	}
	fmt.Println("3 sent, paced:", time.Since(start) >= 400*time.Millisecond)
	// Output:
	// 3 sent, paced: true
}
