package redisstore_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
)

// TestCalendarServerClock: with no instant of its own, a calendar window's
// decision is the server's, at its TIME, and equals the memory store's at
// that instant: the same counts, and a reset at the next local midnight
// to the µs. Alone and in TakeAll.
func TestCalendarServerClock(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, redistest.Server(t))
	m := memstore.New(memstore.WithJanitorInterval(0))
	defer m.Close()
	key := fmt.Sprintf("cal-server-clock-%d", time.Now().UnixNano())
	for _, l := range []ratekeeper.Limit{
		{Algorithm: ratekeeper.FixedWindow, Rate: 3, Calendar: ratekeeper.Daily, Location: berlin},
		{Algorithm: ratekeeper.FixedWindow, Rate: 3, Calendar: ratekeeper.Monthly, Offset: 14 * 24 * time.Hour},
	} {
		for i := range 5 {
			req := ratekeeper.Request{Key: key + string(l.Calendar), Limit: l, N: 1}
			got, err := s.Take(t.Context(), req)
			if err != nil {
				t.Fatalf("%s take %d: %v", l, i, err)
			}
			req.Now = got.At
			want, err := m.Take(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("%s take %d:\n got %+v\nwant %+v", l, i, got, want)
			}
		}
	}
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Calendar: ratekeeper.Daily}
	next := func(at time.Time) time.Duration {
		y, mo, d := at.UTC().Date()
		return time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC).Sub(at)
	}
	reqs := []ratekeeper.Request{
		{Key: key + "all-epoch", Limit: ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Period: 1000 * time.Hour}, N: 1},
		{Key: key + "all-cal", Limit: l, N: 1},
	}
	out := make([]ratekeeper.Decision, 2)
	for i, want := range []bool{true, false} {
		all, err := s.TakeAll(t.Context(), reqs, out)
		if err != nil || all != want {
			t.Fatalf("take all %d: %v %v, want %v", i, all, err, want)
		}
		if d := out[1]; d.ResetAfter != next(d.At) || d.Remaining != 0 {
			t.Fatalf("take all %d: calendar %+v, want reset in %v", i, d, next(d.At))
		}
	}
	if d, err := s.Take(t.Context(), reqs[0]); err != nil || d.Remaining != 3 {
		t.Fatalf("epoch key after a refused batch: %+v %v, want its one take given back", d, err)
	}
}

// TestCalendarPipelined: concurrent calls of calendar and epoch windows,
// which the pipeliner runs together in many.lua, each count to their own
// limit exactly.
func TestCalendarPipelined(t *testing.T) {
	for _, url := range []string{redistest.Server(t), redistest.Cluster(t)} {
		s := open(t, url)
		at := time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC)
		limits := []ratekeeper.Limit{
			{Algorithm: ratekeeper.FixedWindow, Rate: 7, Calendar: ratekeeper.Monthly},
			{Algorithm: ratekeeper.FixedWindow, Rate: 5, Period: time.Hour},
			{Algorithm: ratekeeper.FixedWindow, Rate: 9, Calendar: ratekeeper.Yearly, Offset: 59 * 24 * time.Hour},
			{Algorithm: ratekeeper.TokenBucket, Rate: 4, Period: time.Hour},
		}
		prefix := fmt.Sprintf("cal-pipe-%d-", time.Now().UnixNano())
		var mu sync.Mutex
		allowed := make([]int, len(limits))
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 24 {
					k := (g + i) % len(limits)
					req := ratekeeper.Request{Key: prefix + fmt.Sprint(k), Limit: limits[k], N: 1, Now: at}
					d, err := s.Take(t.Context(), req)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						allowed[k]++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		for k, l := range limits {
			if allowed[k] != l.Rate {
				t.Errorf("%s: %d allowed of 96, want %d", l, allowed[k], l.Rate)
			}
		}
	}
}

// TestCalendarLease: two instances in lease mode share a monthly quota in
// Europe/Berlin: together they never admit more than it, a refusal waits
// for the next local month, and the next month starts fresh.
func TestCalendarLease(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	url := redistest.Server(t)
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: ratekeeper.Monthly, Location: berlin}
	a := open(t, url, redisstore.WithMode(redisstore.Lease, 0))
	b := open(t, url, redisstore.WithMode(redisstore.Lease, 0))
	key := fmt.Sprintf("cal-lease-%d", time.Now().UnixNano())
	next := time.Date(2026, 11, 1, 0, 0, 0, 0, berlin) // after October's 25-hour day
	for _, month := range []time.Time{next.Add(-time.Hour), next} {
		allowed := 0
		for i := range 40 {
			s := []*redisstore.Store{a, b}[i%2]
			at := month.Add(time.Duration(i) * time.Millisecond)
			d, err := s.Take(t.Context(), ratekeeper.Request{Key: key, Limit: l, N: 1, Now: at})
			if err != nil {
				t.Fatalf("%v take %d: %v", month, i, err)
			}
			if d.Allowed {
				allowed++
				continue
			}
			end := time.Date(month.Year(), month.Month()+1, 1, 0, 0, 0, 0, berlin)
			if month.Before(next) {
				end = next
			}
			if d.RetryAfter != end.Sub(at) {
				t.Fatalf("%v take %d: retry after %v, want %v (the next local month)", month, i, d.RetryAfter, end.Sub(at))
			}
		}
		t.Logf("%v: %d allowed of 40", month, allowed)
		if allowed > l.Rate || allowed == 0 {
			t.Fatalf("%v: %d allowed, want 1 to %d", month, allowed, l.Rate)
		}
	}
}

// TestCalendarSyncServerClock: an instance in sync mode on the servers'
// clocks admits a daily quota exactly, and its syncs count it in Redis,
// where an exact instance sees it spent until the next UTC midnight.
func TestCalendarSyncServerClock(t *testing.T) {
	url := redistest.Server(t)
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Calendar: ratekeeper.Daily}
	key := fmt.Sprintf("cal-sync-%d", time.Now().UnixNano())
	s := open(t, url, redisstore.WithMode(redisstore.Sync, 0))
	allowed := 0
	for i := range 8 {
		d, err := s.Take(t.Context(), ratekeeper.Request{Key: key, Limit: l, N: 1})
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if err := s.Close(); err != nil { // sends what is unsent
		t.Fatal(err)
	}
	exact := open(t, url)
	d, err := exact.Take(t.Context(), ratekeeper.Request{Key: key, Limit: l})
	if err != nil {
		t.Fatal(err)
	}
	y, m, day := d.At.UTC().Date()
	midnight := time.Date(y, m, day+1, 0, 0, 0, 0, time.UTC)
	if allowed != l.Rate || d.Remaining != 0 || d.RetryAfter != midnight.Sub(d.At) {
		t.Fatalf("%d allowed, then %+v; want %d, then none left until %v", allowed, d, l.Rate, midnight)
	}
}
