package redisstore

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// TestInvalidLimitBesideValid: a limit with no period and no calendar is
// refused with an error that names the period, and never reaches a script.
// Calls beside it, in TakeAll or in one run of many.lua, decide as alone.
func TestInvalidLimitBesideValid(t *testing.T) {
	s := openURL(t, redistest.Server(t))
	bad := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1}
	good := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Period: time.Hour}
	tag := fmt.Sprintf("badlimit-%d", time.Now().UnixNano())
	reqs := []ratekeeper.Request{{Key: tag + ":bad", Limit: bad, N: 1}, {Key: tag + ":good", Limit: good, N: 1}}
	if _, err := s.TakeAll(t.Context(), reqs, make([]ratekeeper.Decision, 2)); err == nil || !strings.Contains(err.Error(), "period") {
		t.Fatalf("TakeAll with a limit without period: %v, want an error naming the period", err)
	}
	const callers, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for g := range callers {
		wg.Go(func() {
			for i := range each {
				key := fmt.Sprintf("%s:%d:%d", tag, g, i)
				if g%2 == 0 {
					if _, err := s.Take(t.Context(), ratekeeper.Request{Key: key, Limit: bad, N: 1}); err == nil || !strings.Contains(err.Error(), "period") {
						errs <- fmt.Errorf("a limit without period: %v, want an error naming the period", err)
					}
					continue
				}
				// A fresh key: allowed, and nothing left.
				if d, err := s.Take(t.Context(), ratekeeper.Request{Key: key, Limit: good, N: 1}); err != nil || !d.Allowed || d.Remaining != 0 {
					errs <- fmt.Errorf("a valid call beside invalid ones: %+v %v, want allowed with 0 left", d, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestLimitCacheByZoneName: calendar limits equal but for a time zone
// loaded afresh (as each reload does) share one cached argument.
func TestLimitCacheByZoneName(t *testing.T) {
	s := openURL(t, redistest.Server(t))
	key := fmt.Sprintf("zonecache-%d", time.Now().UnixNano())
	for range 3 {
		berlin, err := time.LoadLocation("Europe/Berlin")
		if err != nil {
			t.Fatal(err)
		}
		l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 10, Calendar: ratekeeper.Daily, Location: berlin}
		if _, err := s.Take(t.Context(), ratekeeper.Request{Key: key, Limit: l, N: 1}); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	s.limits.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d cached limit arguments for one limit loaded three times, want 1", n)
	}
}
