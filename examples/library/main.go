// Command library shows the ratekeeper library at work, in real time: a user
// allowed 2 posts per second hits the limit, and a worker paced at 5 per
// second sends 10 notifications and loses none.
//
//	go run ./examples/library
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

func main() {
	ctx := context.Background()
	store := memstore.New()
	defer store.Close()

	posts, err := ratekeeper.New(store, ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 2, Period: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("user:42 creates a post every 150 ms; the limit is 2 per second:")
	start := time.Now()
	for i := 1; i <= 10; i++ {
		d, err := posts.Allow(ctx, "user:42")
		if err != nil {
			log.Fatal(err)
		}
		at := time.Since(start).Round(10 * time.Millisecond)
		if d.Allowed {
			fmt.Printf("  %5v  post %2d  201 Created      remaining %d\n", at, i, d.Remaining)
		} else {
			fmt.Printf("  %5v  post %2d  429 Too Many     retry after %v\n", at, i, d.RetryAfter.Round(time.Millisecond))
		}
		time.Sleep(150 * time.Millisecond)
	}

	pace, err := ratekeeper.New(store, ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 5, Period: time.Second, Burst: 10})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("\na worker sends 10 notifications to customer:7 at most 5 per second (Wait, nothing lost):")
	start = time.Now()
	for i := 1; i <= 10; i++ {
		if err := pace.Wait(ctx, "customer:7"); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("  %5v  sent notification %d\n", time.Since(start).Round(10*time.Millisecond), i)
	}
}
