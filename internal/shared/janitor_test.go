package shared

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// A key's first request is counted, however the loop's turns fall around
// it: the loop found the new entry idle (never used) between its first
// sync and its decision, dropped it, and the decision then counted into the
// dropped entry, never sent (TestPeekReset, sync mode: a key read fresh
// after a request). Statistical: the loop turns every 100 µs.
func TestFirstRequestNotLostToTheLoop(t *testing.T) {
	ctx := context.Background()
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 3, Period: time.Hour}
	m := NewModel()
	s := New(m, Sync, 100*time.Microsecond)
	const keys = 20000
	for i := range keys {
		if d, err := s.Take(ctx, ratekeeper.Request{Key: fmt.Sprint(i), Limit: l, N: 1}); err != nil || !d.Allowed {
			t.Fatalf("key %d: %+v, %v", i, d, err)
		}
	}
	s.Close() // sends what is unsent
	lost := 0
	for i := range keys {
		if m.State(fmt.Sprint(i), l).Window.Count != 1 {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d keys' first request never reached the remote", lost, keys)
	}
}
