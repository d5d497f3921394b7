package ratekeeper_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// rateOnly is a Store that holds no slots.
type rateOnly struct{ ratekeeper.Store }

func TestConcurrencyNeedsSlotStore(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	_, err := ratekeeper.NewConcurrencyLimiter(rateOnly{s}, ratekeeper.Concurrency{Max: 1})
	if !errors.Is(err, ratekeeper.ErrNoSlots) {
		t.Fatalf("err = %v, want ErrNoSlots", err)
	}
	if _, err := ratekeeper.NewConcurrencyLimiter(s, ratekeeper.Concurrency{Max: 1}); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrencyValidate(t *testing.T) {
	for _, c := range []struct {
		c  ratekeeper.Concurrency
		ok bool
	}{
		{ratekeeper.Concurrency{Max: 1}, true},
		{ratekeeper.Concurrency{Max: 10, TTL: 3 * time.Millisecond, RetryAfter: time.Millisecond}, true},
		{ratekeeper.Concurrency{Max: 0}, false},
		{ratekeeper.Concurrency{Max: 1, TTL: 2 * time.Millisecond}, false},
		{ratekeeper.Concurrency{Max: 1, TTL: 1500 * time.Microsecond}, false},
		{ratekeeper.Concurrency{Max: 1, TTL: 3500 * time.Microsecond}, false},
		{ratekeeper.Concurrency{Max: 1, TTL: -time.Second}, false},
		{ratekeeper.Concurrency{Max: 1, RetryAfter: -time.Second}, false},
	} {
		if err := c.c.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c.c, err)
		}
	}
	if got, want := (ratekeeper.Concurrency{Max: 10}).String(), "concurrency 10 ttl 30s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// bubble runs f in a synctest bubble with a memory store and a limiter of
// c made inside it, so that their timers are the bubble's.
func bubble(t *testing.T, c ratekeeper.Concurrency, f func(t *testing.T, s *memstore.Store, l *ratekeeper.ConcurrencyLimiter)) {
	synctest.Test(t, func(t *testing.T) {
		s := memstore.New()
		defer s.Close()
		l, err := ratekeeper.NewConcurrencyLimiter(s, c)
		if err != nil {
			t.Fatal(err)
		}
		f(t, s, l)
	})
}

func TestTryAcquireRelease(t *testing.T) {
	bubble(t, ratekeeper.Concurrency{Max: 2, RetryAfter: 200 * time.Millisecond}, func(t *testing.T, s *memstore.Store, l *ratekeeper.ConcurrencyLimiter) {
		ctx := context.Background()
		p1, d, err := l.TryAcquire(ctx, "k")
		if err != nil || p1 == nil || !d.Allowed || d.Remaining != 1 || d.Limit != 2 || d.RetryAfter != 0 {
			t.Fatalf("first: %v %+v %v", p1, d, err)
		}
		p2, d, _ := l.TryAcquire(ctx, "k")
		if p2 == nil || d.Remaining != 0 {
			t.Fatalf("second: %+v", d)
		}
		p3, d, err := l.TryAcquire(ctx, "k")
		if err != nil || p3 != nil || d.Allowed || d.RetryAfter != 200*time.Millisecond || d.ResetAfter != 0 {
			t.Fatalf("third: %v %+v %v", p3, d, err)
		}
		if err := p3.Release(ctx); err != nil { // nil: harmless
			t.Fatal(err)
		}
		if p, _, _ := l.TryAcquire(ctx, "other"); p == nil {
			t.Fatal("another key is refused")
		} else {
			defer p.Release(ctx)
		}
		if err := p1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p1.Release(ctx); err != nil { // twice: harmless
			t.Fatal(err)
		}
		if n := s.InFlight("k", time.Time{}); n != 1 {
			t.Fatalf("in flight %d after a double release, want 1", n)
		}
		p4, d, _ := l.TryAcquire(ctx, "k")
		if p4 == nil {
			t.Fatalf("after release: %+v", d)
		}
		if p, _, _ := l.TryAcquire(ctx, "k"); p != nil {
			t.Fatal("a double release freed two slots")
		}
		p2.Release(ctx)
		p4.Release(ctx)
	})
}

// A waiter is woken by a release of its limiter at once, without waiting
// out RetryAfter.
func TestAcquireWakesOnRelease(t *testing.T) {
	bubble(t, ratekeeper.Concurrency{Max: 1, RetryAfter: time.Hour}, func(t *testing.T, _ *memstore.Store, l *ratekeeper.ConcurrencyLimiter) {
		ctx := context.Background()
		p, _, _ := l.TryAcquire(ctx, "k")
		start := time.Now()
		got := make(chan *ratekeeper.Permit)
		go func() {
			q, _, err := l.Acquire(ctx, "k")
			if err != nil {
				t.Error(err)
			}
			got <- q
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("Acquire returned while the slot was held")
		default:
		}
		p.Release(ctx)
		q := <-got
		if q == nil || time.Since(start) != 0 {
			t.Fatalf("woken after %v: %v", time.Since(start), q)
		}
		q.Release(ctx)
	})
}

// A slot freed by another limiter (another process) is found at the next
// ask, RetryAfter later.
func TestAcquirePollsForOthers(t *testing.T) {
	bubble(t, ratekeeper.Concurrency{Max: 1, RetryAfter: 250 * time.Millisecond}, func(t *testing.T, s *memstore.Store, l *ratekeeper.ConcurrencyLimiter) {
		ctx := context.Background()
		other, _ := ratekeeper.NewConcurrencyLimiter(s, l.Concurrency())
		p, _, _ := other.TryAcquire(ctx, "k")
		start := time.Now()
		go func() {
			time.Sleep(100 * time.Millisecond)
			p.Release(ctx)
		}()
		q, _, err := l.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 250*time.Millisecond {
			t.Fatalf("acquired after %v, want 250ms", d)
		}
		q.Release(ctx)
	})
}

func TestAcquireContext(t *testing.T) {
	bubble(t, ratekeeper.Concurrency{Max: 1, RetryAfter: 100 * time.Millisecond}, func(t *testing.T, _ *memstore.Store, l *ratekeeper.ConcurrencyLimiter) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		p, _, _ := l.TryAcquire(ctx, "k")
		defer p.Release(ctx)
		start := time.Now()
		q, _, err := l.Acquire(ctx, "k")
		if q != nil || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second {
			t.Fatalf("Acquire: %v %v after %v", q, err, time.Since(start))
		}
	})
}

// A held permit is refreshed, so its slot outlives many TTLs; once it is
// released the refresher stops (the bubble ends only when it has).
func TestPermitRefreshed(t *testing.T) {
	bubble(t, ratekeeper.Concurrency{Max: 1, TTL: 3 * time.Second}, func(t *testing.T, s *memstore.Store, l *ratekeeper.ConcurrencyLimiter) {
		ctx := context.Background()
		p, _, _ := l.TryAcquire(ctx, "k")
		time.Sleep(time.Minute)
		if q, _, _ := l.TryAcquire(ctx, "k"); q != nil {
			t.Fatal("the held slot expired")
		}
		if p.Lost() {
			t.Fatal("Lost while refreshed")
		}
		p.Release(ctx)
		if q, _, _ := l.TryAcquire(ctx, "k"); q == nil {
			t.Fatal("refused after release")
		} else {
			q.Release(ctx)
		}
	})
}

// A permit whose lease expired (the store's clock went past it before a
// refresh: a store unreachable for longer than the TTL) is marked lost at
// its next refresh, and refreshed no more.
func TestPermitLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := storetest.NewClock(storetest.Epoch)
		s := memstore.New(memstore.WithClock(clock))
		defer s.Close()
		l, _ := ratekeeper.NewConcurrencyLimiter(s, ratekeeper.Concurrency{Max: 1, TTL: 3 * time.Second})
		ctx := context.Background()
		p, _, _ := l.TryAcquire(ctx, "k")
		clock.Advance(3 * time.Second)
		time.Sleep(time.Second + time.Millisecond) // the first refresh
		if !p.Lost() {
			t.Fatal("not Lost after its lease expired")
		}
		if q, _, _ := l.TryAcquire(ctx, "k"); q == nil {
			t.Fatal("the expired slot is still held")
		} else {
			q.Release(ctx)
		}
		p.Release(ctx)
	})
}
