package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// A cancel may reach Redis before the acquire it cancels (they go on
// different connections): the acquire then takes nothing, whatever comes
// between, until the slot's TTL has passed; after the acquire, it frees
// the slot. A timeline on one key, at instants the requests carry.
func TestSlotCancelTimeline(t *testing.T) {
	s := openURL(t, redistest.Server(t))
	ctx := context.Background()
	key := fmt.Sprintf("cancel:%x", rand.Uint64())
	t0 := time.Now()
	const ttl = 10 * time.Second
	for i, step := range []struct {
		at      time.Duration
		op, id  string
		max     int
		allowed bool // acquire: granted; refresh: still held
	}{
		{0, "c", "x", 1, true},
		{time.Second, "a", "x", 1, false}, // cancelled first: not taken
		{time.Second, "r", "x", 1, true},  // a release leaves the cancel
		{time.Second, "a", "x", 1, false},
		{time.Second, "f", "x", 1, false},
		{time.Second, "a", "y", 1, true}, // a cancel holds no slot
		{time.Second, "c", "y", 1, true}, // after its acquire: frees it
		{time.Second, "a", "z", 1, true},
		{ttl, "a", "x", 2, true}, // the cancel has expired
	} {
		req := ratekeeper.SlotRequest{Key: key, ID: step.id, Max: step.max, TTL: ttl, Now: t0.Add(step.at)}
		allowed, _, _, err := s.slots(ctx, step.op, req)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if allowed != step.allowed {
			t.Fatalf("step %d (%s %s at +%v): allowed %v, want %v", i, step.op, step.id, step.at, allowed, step.allowed)
		}
	}
}

// While Redis does not answer, cancels wait in a bounded queue (the rest
// are dropped), each attempt is bounded, and one that failed is tried
// again, paused, until it is answered or its slot's TTL has passed; close
// ends the one goroutine. In a bubble: the waits are fake time.
func TestCancelsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var tries, answered atomic.Int64
		var down atomic.Bool
		down.Store(true)
		c := newCancels(func(ctx context.Context, req ratekeeper.SlotRequest) error {
			tries.Add(1)
			if down.Load() {
				<-ctx.Done() // a stopped Redis: the attempt runs out
				return ctx.Err()
			}
			answered.Add(1)
			return nil
		})
		for i := range 3 * maxCancels {
			c.add(ratekeeper.SlotRequest{Key: "k", ID: strconv.Itoa(i), Max: 1, TTL: time.Minute})
		}
		synctest.Wait()
		if n := len(c.queue); n > maxCancels {
			t.Fatalf("%d cancels wait, more than %d", n, maxCancels)
		}
		time.Sleep(10 * time.Second) // Redis stays down for 10 s
		if n := tries.Load(); n > 10*int64(time.Second/cancelTry)+2 {
			t.Fatalf("%d attempts in 10 s of a Redis that does not answer", n)
		}
		down.Store(false)
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := answered.Load(); n < maxCancels-1 || n > maxCancels+1 {
			t.Fatalf("%d cancels answered once Redis was back, want the %d that waited", n, maxCancels)
		}
		// Down again: cancels are given up once their slots' TTL has passed.
		down.Store(true)
		for i := range 10 {
			c.add(ratekeeper.SlotRequest{Key: "k", ID: "short" + strconv.Itoa(i), Max: 1, TTL: 3 * time.Second})
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		before := tries.Load()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := tries.Load(); n != before || len(c.queue) != 0 {
			t.Fatalf("%d more attempts and %d waiting after the slots' TTL", n-before, len(c.queue))
		}
		c.close() // the bubble fails the test if the goroutine outlives it
	})
}
