package ratekeeper_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

func TestLimitValidate(t *testing.T) {
	const day = 24 * time.Hour
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		limit ratekeeper.Limit
		want  string // "" means valid
	}{
		{ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 2, Period: time.Second}, ""},
		{ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 5, Period: 7 * 24 * time.Hour}, ""},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: 24 * time.Hour}, ""},
		{ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 10000, Period: time.Second}, ""},
		{ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 1, Period: time.Second, Burst: 100}, ""},
		{ratekeeper.Limit{Rate: 1, Period: time.Second}, "algorithm is missing"},
		{ratekeeper.Limit{Algorithm: "gcra", Rate: 1, Period: time.Second}, `unknown algorithm "gcra"`},
		{ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 0, Period: time.Second}, "rate must be positive"},
		{ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: -3, Period: time.Second}, "rate must be positive"},
		{ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1}, "period must be positive"},
		{ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1, Period: 1500 * time.Nanosecond}, "whole number of microseconds"},
		{ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1, Period: time.Second, Burst: -1}, "burst must not be negative"},
		{ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 2_000_000, Period: time.Second}, "more than one request per microsecond"},
		{ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1, Period: 365 * 24 * time.Hour, Burst: 1_000_000}, "too large to count exactly"},
		{ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 1_000_000, Period: 30 * 24 * time.Hour}, "too large for the sliding window counter"},
		{ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 100_000_000, Period: time.Hour}, "sliding log of 100000000 entries"},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: ratekeeper.Monthly, Location: berlin, Offset: 30*day + 9*time.Hour}, ""},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: ratekeeper.Daily, Offset: 23*time.Hour + 59*time.Minute}, ""},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: ratekeeper.Yearly, Offset: 364 * day}, ""},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: "fortnightly"}, `unknown calendar "fortnightly"`},
		{ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 10, Calendar: ratekeeper.Daily}, "sliding_window cannot follow the calendar"},
		{ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 10, Calendar: ratekeeper.Daily}, "token_bucket cannot follow the calendar"},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: time.Hour, Calendar: ratekeeper.Daily}, "has no period"},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: ratekeeper.Daily, Stagger: true}, "cannot be staggered"},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: ratekeeper.Daily, Offset: 24 * time.Hour}, "less than 24h0m0s"},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: ratekeeper.Weekly, Offset: 7 * day}, "less than 168h0m0s"},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: ratekeeper.Monthly, Offset: 31 * day}, "less than 744h0m0s"},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: ratekeeper.Monthly, Offset: -time.Hour}, "at least 0"},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: ratekeeper.Daily, Offset: time.Nanosecond}, "whole number of microseconds"},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: time.Hour, Location: berlin}, "need a calendar"},
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: time.Hour, Offset: time.Hour}, "need a calendar"},
	}
	for _, tt := range tests {
		err := tt.limit.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tt.limit, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want one containing %q", tt.limit, err, tt.want)
		}
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	if _, err := ratekeeper.New(nil, ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1, Period: time.Second}); err == nil {
		t.Error("New with a nil store: no error")
	}
	s := memstore.New()
	defer s.Close()
	if _, err := ratekeeper.New(s, ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket}); err == nil {
		t.Error("New with an invalid limit: no error")
	}
}

func TestCostOutOfRange(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	lim, err := ratekeeper.New(s, ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 10, Period: time.Second, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, n := range []int{6, -1} {
		if _, err := lim.AllowN(ctx, "k", n); !errors.Is(err, ratekeeper.ErrCost) {
			t.Errorf("AllowN(%d): error %v, want ErrCost", n, err)
		}
		if _, err := lim.ReserveN(ctx, "k", n); !errors.Is(err, ratekeeper.ErrCost) {
			t.Errorf("ReserveN(%d): error %v, want ErrCost", n, err)
		}
		if err := lim.WaitN(ctx, "k", n); !errors.Is(err, ratekeeper.ErrCost) {
			t.Errorf("WaitN(%d): error %v, want ErrCost", n, err)
		}
	}
	if d, err := lim.AllowN(ctx, "k", 5); err != nil || !d.Allowed {
		t.Errorf("AllowN(5) at the capacity: %+v, %v; want allowed", d, err)
	}
}

// newLimiter returns a Limiter on a fresh memory store, closed at cleanup.
// Inside a synctest bubble the store's janitor and the system clock are the
// bubble's.
func newLimiter(t *testing.T, l ratekeeper.Limit) *ratekeeper.Limiter {
	t.Helper()
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	lim, err := ratekeeper.New(s, l)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestWaitPacesEveryAlgorithm: a worker that waits before each of 25 items
// loses none, and finishes exactly when the algorithm lets the last through.
func TestWaitPacesEveryAlgorithm(t *testing.T) {
	tests := []struct {
		limit ratekeeper.Limit
		want  time.Duration // when the 25th item may proceed
	}{
		// A full bucket of 5, then one every 100 ms: 20 more take 2 s.
		{ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 10, Period: time.Second, Burst: 5}, 2 * time.Second},
		// The queue gives every item its own slot: 24 intervals.
		{ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 10, Period: time.Second, Burst: 5}, 2400 * time.Millisecond},
		// Windows of 10: items 21..25 go in the third window, at 2 s.
		{ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Period: time.Second}, 2 * time.Second},
		// The log admits 10 at once, and 10 more a window (plus 1 µs) later.
		{ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 10, Period: time.Second}, 2*time.Second + 2*time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(string(tt.limit.Algorithm), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := newLimiter(t, tt.limit)
				start := time.Now()
				for i := 0; i < 25; i++ {
					if err := lim.Wait(context.Background(), "worker"); err != nil {
						t.Fatalf("item %d: %v", i, err)
					}
				}
				if got := time.Since(start); got != tt.want {
					t.Fatalf("25 items took %v, want %v", got, tt.want)
				}
			})
		})
	}
}

// TestWaitSlidingWindowNeverOverRate: the sliding window counter admits an
// estimate, so check what it promises rather than an instant: 30 waits all
// succeed, and no fixed window holds more than the limit.
func TestWaitSlidingWindowNeverOverRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, ratekeeper.Limit{Algorithm: ratekeeper.SlidingWindow, Rate: 10, Period: time.Second})
		start := time.Now()
		perWindow := map[int64]int{}
		for i := 0; i < 30; i++ {
			if err := lim.Wait(context.Background(), "worker"); err != nil {
				t.Fatal(err)
			}
			perWindow[time.Now().Unix()]++
		}
		for w, n := range perWindow {
			if n > 10 {
				t.Errorf("window %d admitted %d, limit 10", w, n)
			}
		}
		if time.Since(start) > 4*time.Second {
			t.Errorf("30 items at 10/s took %v", time.Since(start))
		}
	})
}

// TestWaitConcurrentWorkersShareTheQueue: ten goroutines wait on one leaky
// bucket queue; each proceeds in its own slot, one per 100 ms.
func TestWaitConcurrentWorkersShareTheQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 10, Period: time.Second, Burst: 3})
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		var wg sync.WaitGroup
		for i := 0; i < 10; i++ {
			wg.Go(func() {
				if err := lim.Wait(context.Background(), "shared"); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				at = append(at, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		seen := map[time.Duration]bool{}
		for _, d := range at {
			if d%(100*time.Millisecond) != 0 || seen[d] {
				t.Fatalf("proceed times %v: want distinct multiples of 100ms", at)
			}
			seen[d] = true
		}
		if len(at) != 10 || !seen[900*time.Millisecond] {
			t.Fatalf("proceed times %v: want 10 slots from 0 to 900ms", at)
		}
	})
}

// TestWaitCancelGivesThePlaceBack: a waiter whose context is cancelled
// returns at once with the context's error, and its queue slot goes to the
// next caller.
func TestWaitCancelGivesThePlaceBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, ratekeeper.Limit{Algorithm: ratekeeper.LeakyBucket, Rate: 1, Period: time.Second, Burst: 2})
		ctx := context.Background()
		if err := lim.Wait(ctx, "k"); err != nil { // slot 0: proceeds now
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { done <- lim.Wait(cctx, "k") }() // slot 1 s
		time.Sleep(300 * time.Millisecond)          // fake time: the waiter is parked
		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled Wait returned %v", err)
			}
		default:
			t.Fatal("cancelled Wait did not return at once")
		}
		d, err := lim.Reserve(ctx, "k")
		if err != nil || !d.Allowed || d.Delay != 700*time.Millisecond {
			t.Fatalf("after the cancel, Reserve = %+v, %v; want the freed slot at 1 s (delay 700ms)", d, err)
		}
	})
}

// TestWaitDeadlineTooShort: a wait longer than the context's deadline fails
// at once, wraps context.DeadlineExceeded, and takes nothing.
func TestWaitDeadlineTooShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := newLimiter(t, ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1, Period: time.Second})
		ctx := context.Background()
		if err := lim.Wait(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := lim.Wait(dctx, "k")
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 0 {
			t.Fatalf("Wait = %v after %v; want an immediate deadline error", err, time.Since(start))
		}
		time.Sleep(time.Second)
		if d, _ := lim.Allow(ctx, "k"); !d.Allowed {
			t.Fatalf("the refused wait kept its token: %+v", d)
		}
	})
}
