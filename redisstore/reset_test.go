package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestPeekReset runs Peek and Reset on standalone Redis, Sentinel and Cluster, in
// every mode, for every algorithm the modes decide locally and the sliding
// log: a spent key peeks refused with a wait and takes nothing; a reset
// admits its next request (the denial cache and the local state forgotten
// too) and leaves another key's count as it was.
func TestPeekReset(t *testing.T) {
	servers := map[string]string{"standalone": redistest.Server(t), "cluster": redistest.Cluster(t), "sentinel": redistest.Sentinel(t)}
	for name, url := range servers {
		for _, mode := range []redisstore.Mode{redisstore.Exact, redisstore.Sync, redisstore.Lease} {
			t.Run(fmt.Sprintf("%s/%s", name, mode), func(t *testing.T) {
				s := open(t, url, redisstore.WithMode(mode, 50*time.Millisecond))
				for _, a := range ratekeeper.Algorithms {
					t.Run(string(a), func(t *testing.T) { peekReset(t, s, a, mode) })
				}
			})
		}
	}
}

func peekReset(t *testing.T, s *redisstore.Store, a ratekeeper.Algorithm, mode redisstore.Mode) {
	ctx := context.Background()
	lim, err := ratekeeper.New(s, ratekeeper.Limit{Algorithm: a, Rate: 3, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	run := fmt.Sprintf("peekreset:%d:", time.Now().UnixNano())
	k, other := run+"k", run+"other"
	// admit takes one request that must pass. (In sync mode a bucket is
	// decided on an estimate of Redis's clock, which never goes back: a
	// request is never refused for the water of one admitted after it.)
	admit := func(what string) {
		t.Helper()
		if d, err := lim.Allow(ctx, k); err != nil || !d.Allowed {
			t.Fatalf("%s: %+v, %v", what, d, err)
		}
	}
	for i := 0; i < 3; i++ {
		admit(fmt.Sprintf("request %d", i))
	}
	if d, err := lim.Allow(ctx, k); err != nil || d.Allowed {
		t.Fatalf("4th request: %+v, %v; want refused", d, err)
	}
	for i := 0; i < 2; i++ { // a peek takes nothing, so twice is the same
		d, err := lim.Peek(ctx, k)
		if err != nil || d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 {
			t.Fatalf("peek %d of a spent key: %+v, %v; want refused with a wait", i, d, err)
		}
	}
	if d, err := lim.Allow(ctx, other); err != nil || !d.Allowed {
		t.Fatalf("other: %+v, %v", d, err)
	}
	before, err := lim.Peek(ctx, other)
	if err != nil || before.Remaining != 2 {
		t.Fatalf("other after one request: %+v, %v; want 2 left", before, err)
	}
	if err := lim.Reset(ctx, k); err != nil {
		t.Fatal(err)
	}
	d, err := lim.Peek(ctx, k)
	if err != nil || !d.Allowed || d.Remaining != 3 || d.RetryAfter != 0 {
		t.Fatalf("peek after reset: %+v, %v; want fresh", d, err)
	}
	for i := 0; i < 3; i++ {
		admit(fmt.Sprintf("request %d after reset", i))
	}
	// other's count is as it was.
	after, err := lim.Peek(ctx, other)
	if err != nil || after.Remaining != before.Remaining {
		t.Fatalf("other's remaining went from %d to %d across k's reset (%v)", before.Remaining, after.Remaining, err)
	}
	if err := lim.Reset(ctx, run+"never-used"); err != nil {
		t.Fatalf("reset of a key without state: %v", err)
	}
}
