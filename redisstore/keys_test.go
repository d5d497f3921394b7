package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestTTL checks that on the server's clock every key lives no longer than
// its state needs (rounded up to the millisecond).
func TestTTL(t *testing.T) {
	url := redistest.Server(t)
	ctx := context.Background()
	s, err := redisstore.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.Client()
	for _, tt := range []struct {
		limit ratekeeper.Limit
		n     int
		max   time.Duration // what the state needs after n requests
	}{
		{ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 10, Period: time.Second}, 3, 300 * time.Millisecond},
		{ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 10, Period: time.Second, Burst: 5}, 2, 200 * time.Millisecond},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: 200 * time.Millisecond}, 1, 200 * time.Millisecond},
		{ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 10, Period: 200 * time.Millisecond}, 1, 400 * time.Millisecond},
		{ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 10, Period: 300 * time.Millisecond}, 4, 300 * time.Millisecond},
	} {
		lim, _ := ratekeeper.New(s, tt.limit)
		key := "ttl:" + string(tt.limit.Algorithm)
		for i := 0; i < tt.n; i++ {
			if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v %v", tt.limit, d, err)
			}
		}
		ttl, err := c.PTTL(ctx, s.Key(key, tt.limit.Algorithm)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > tt.max+time.Millisecond {
			t.Errorf("%s: TTL %v, want in (0, %v]", tt.limit, ttl, tt.max)
		}
	}
}

// TestSlidingLogMembers logs many requests in one microsecond: each gets its
// own entry, and the log never holds more than the limit, even when refused
// requests are logged.
func TestSlidingLogMembers(t *testing.T) {
	s := open(t, redistest.Server(t))
	ctx := context.Background()
	at := time.Unix(1_800_000_000, 123456000)
	for _, penalty := range []bool{false, true} {
		l := ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 50, Period: time.Minute, LogRejected: penalty}
		key := "members"
		if penalty {
			key += ":penalty"
		}
		req := ratekeeper.Request{Key: key, Limit: l, N: 1, Now: at}
		allowed := 0
		for i := 0; i < 80; i++ {
			d, err := s.Take(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				allowed++
			}
		}
		size, err := s.Client().StrLen(ctx, s.Key(key, l.Algorithm)).Result()
		if err != nil {
			t.Fatal(err)
		}
		n := size / 8 // one 8-byte instant per entry
		if allowed != 50 || n != 50 {
			t.Errorf("penalty %v: %d allowed, %d entries; want 50 and 50", penalty, allowed, n)
		}
	}
}

// TestNoScript: after SCRIPT FLUSH (as after a restart or failover) the
// scripts are loaded again and decisions go on.
func TestNoScript(t *testing.T) {
	for _, pipelined := range []bool{true, false} {
		s := open(t, redistest.Server(t), redisstore.WithAutoPipeline(pipelined))
		ctx := context.Background()
		lim, _ := ratekeeper.New(s, ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 3, Period: time.Hour})
		for i := 0; i < 2; i++ {
			if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if d, err := lim.Allow(ctx, "noscript"); err != nil || !d.Allowed || d.Remaining != 2-i {
				t.Fatalf("pipelined %v, after SCRIPT FLUSH: %+v %v", pipelined, d, err)
			}
		}
	}
}

func TestKeys(t *testing.T) {
	s, err := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redisstore.WithPrefix("app:"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for key, want := range map[string]string{
		"user:42":       "app:{user:42}:tb",
		"user:{42}:a":   "app:user:{42}:a:tb",
		"odd{}key":      "app:{odd{}key}:tb",
		"a}b":           "app:{a}b}:tb",
		"":              "app:{}:tb",
		"{tenant}:user": "app:{tenant}:user:tb",
	} {
		if got := s.Key(key, ratekeeper.TokenBucket); got != want {
			t.Errorf("Key(%q) = %q, want %q", key, got, want)
		}
	}
	if _, err := redisstore.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redisstore.WithPrefix("{x}")); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Fatalf("bad prefix: %v", err)
	}
}

// TestManyIsolatesErrors: decisions coalesced into one script run (many.lua)
// each get their own reply; a key holding another type fails its own call
// only.
func TestManyIsolatesErrors(t *testing.T) {
	s := open(t, redistest.Server(t))
	ctx := context.Background()
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1000, Period: time.Hour}
	if err := s.Client().LPush(ctx, s.Key("wrongtype", l.Algorithm), "x").Err(); err != nil {
		t.Fatal(err)
	}
	lim, _ := ratekeeper.New(s, l)
	const callers, rounds = 32, 20
	errs := make(chan error, callers*rounds)
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				key := fmt.Sprintf("good:%d", g)
				if g == 0 {
					key = "wrongtype"
				}
				d, err := lim.Allow(ctx, key)
				switch {
				case g == 0 && (err == nil || !strings.Contains(err.Error(), "WRONGTYPE")):
					errs <- fmt.Errorf("wrong type key, round %d: %+v %v", r, d, err)
				case g != 0 && (err != nil || !d.Allowed || d.Remaining != 1000-r-1):
					errs <- fmt.Errorf("key %s, round %d: %+v %v", key, r, d, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
