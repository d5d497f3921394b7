package memstore_test

import (
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// TestCalendarDaily: a daily window in New York is the local date, 23 hours
// on the spring-forward day; refusals point at the next local midnight to
// the µs, and each new date starts fresh. Keys count apart.
func TestCalendarDaily(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	midnight := time.Date(2024, 3, 10, 0, 0, 0, 0, ny)
	next := time.Date(2024, 3, 11, 0, 0, 0, 0, ny)
	if next.Sub(midnight) != 23*time.Hour {
		t.Fatalf("the test's day is %v long, want 23h", next.Sub(midnight))
	}
	clock := storetest.NewClock(midnight.Add(time.Hour))
	s := memstore.New(memstore.WithClock(clock), memstore.WithJanitorInterval(0))
	defer s.Close()
	lim := limiter(t, s, ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 3, Calendar: ratekeeper.Daily, Location: ny}, clock)
	for i := range 3 {
		if d, err := lim.Allow(ctx, "a"); err != nil || !d.Allowed || d.Remaining != 2-i {
			t.Fatalf("request %d: %+v %v", i, d, err)
		}
	}
	clock.Set(next.Add(-time.Microsecond))
	d, err := lim.Allow(ctx, "a")
	if err != nil || d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("last µs of the day: %+v %v, want refused for 1µs", d, err)
	}
	if d, err := lim.Allow(ctx, "b"); err != nil || !d.Allowed || d.ResetAfter != time.Microsecond {
		t.Fatalf("another key: %+v %v, want its own count, reset at midnight", d, err)
	}
	clock.Set(next)
	d, err = lim.Allow(ctx, "a")
	if err != nil || !d.Allowed || d.Remaining != 2 || d.ResetAfter != 24*time.Hour {
		t.Fatalf("next date: %+v %v, want a fresh 24h window", d, err)
	}
}
