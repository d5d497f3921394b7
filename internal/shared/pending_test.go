package shared

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// Water an instance poured and that drained before its next pour reaches
// the remote as it was: drained. Merged into the next pour's record, it
// counted again at the later instant, and the decisions after the sync
// read a bucket that much fuller than the requests left it (sync mode's
// conformance timelines failed a few runs in a thousand under load, when
// the loop's sync fell between two decisions at 60 s).
func TestPendingKeepsDrainedWater(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, time.January, 5, 0, 0, 0, 0, time.UTC)
	for _, a := range []ratekeeper.Algorithm{ratekeeper.TokenBucket, ratekeeper.LeakyBucket} {
		t.Run(string(a), func(t *testing.T) {
			// 16 per minute: a unit drains in 3.75 s, and the early sync
			// comes at 2 unsent.
			l := ratekeeper.Limit{Algorithm: a, Rate: 16, Period: time.Minute}
			s := New(NewModel(), Sync, time.Hour, WithoutLoop())
			defer s.Close()
			take := func(at time.Duration) ratekeeper.Decision {
				t.Helper()
				d, err := s.Take(ctx, ratekeeper.Request{Key: "k", Limit: l, N: 1, Now: start.Add(at)})
				if err != nil || !d.Allowed {
					t.Fatalf("request at %v: %+v, %v", at, d, err)
				}
				return d
			}
			take(0)                                   // drained by 3.75 s
			take(time.Minute)                         // syncs: two unsent
			d := take(time.Minute + time.Microsecond) // decided on what the sync read back
			if d.Remaining != 14 {
				t.Fatalf("third request: %d remaining, want 14 (the first request's water drained a minute ago)", d.Remaining)
			}
		})
	}
}

// Requests that carry their own instants sync at the latest one given; a
// count admitted at a later instant (the clock stepped back since) is sent
// at its own, not clipped back to the remote's now, where its water would
// have drained that much earlier (sync mode's token_bucket/clock_steps_back
// timeline failed a few runs in a thousand, when the loop's sync fell after
// the step back).
func TestPendingAfterTheClockStepsBack(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, time.January, 5, 0, 0, 0, 0, time.UTC)
	l := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 16, Period: time.Minute} // 3.75 s a unit
	s := New(NewModel(), Sync, time.Hour, WithoutLoop())
	defer s.Close()
	for _, at := range []time.Duration{10 * time.Second, 9 * time.Second} { // the second syncs: two unsent
		if d, err := s.Take(ctx, ratekeeper.Request{Key: "k", Limit: l, N: 1, Now: start.Add(at)}); err != nil || !d.Allowed {
			t.Fatalf("request at %v: %+v, %v", at, d, err)
		}
	}
	at := 10*time.Second + time.Microsecond
	d, err := s.Take(ctx, ratekeeper.Request{Key: "k", Limit: l, N: 1, Now: start.Add(at)})
	if want := 3*3750*time.Millisecond - time.Microsecond; err != nil || d.ResetAfter != want {
		t.Fatalf("request at %v: %+v, %v; want ResetAfter %v (three units poured at 10 s)", at, d, err, want)
	}
}

// midFlight is a remote that runs during, before applying them, the first
// add call whose items carry a count: an instance deciding while its
// sync is in flight.
type midFlight struct {
	*Model
	during func()
	done   *bool
}

func (m midFlight) Add(ctx context.Context, items []Item) error {
	if !*m.done && len(items) > 0 && items[0].N != 0 {
		*m.done = true
		m.during()
	}
	return m.Model.Add(ctx, items)
}

// A count admitted while a sync is in flight, after the instant the remote
// read the state at, is added to the state read back at its own instant,
// as the remote will count it when it is sent: clipped back to the read's
// instant, its water drained early, and the instance admitted past what
// the others' admissions explain (TestSharedModesAcrossProcesses' buckets
// went past their bound in about one loaded run in ten).
func TestPendingAfterTheStateReadBack(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, time.January, 5, 0, 0, 0, 0, time.UTC)
	for _, a := range []ratekeeper.Algorithm{ratekeeper.TokenBucket, ratekeeper.LeakyBucket} {
		t.Run(string(a), func(t *testing.T) {
			// One unit a second; early syncs only at 10 unsent.
			l := ratekeeper.Limit{Algorithm: a, Rate: 60, Period: time.Minute, Burst: 80}
			var s *Store
			take := func(at time.Duration) ratekeeper.Decision {
				t.Helper()
				d, err := s.Take(ctx, ratekeeper.Request{Key: "k", Limit: l, N: 1, Now: start.Add(at)})
				if err != nil || !d.Allowed {
					t.Errorf("request at %v: %+v, %v", at, d, err)
				}
				return d
			}
			done := false
			s = New(midFlight{NewModel(), func() { take(5 * time.Second) }, &done}, Sync, time.Hour, WithoutLoop())
			defer s.Close()
			take(0)   // reads the empty bucket; one unsent
			s.Flush() // sends it at 0, while a second is admitted at 5 s
			if !done {
				t.Fatal("no admission during the sync")
			}
			// The unit of 0 drained at 1 s; the one of 5 s drains until 6 s.
			d := take(5*time.Second + time.Microsecond)
			if want := int(l.Capacity()) - 2; d.Remaining != want {
				t.Fatalf("third request: %d remaining, want %d (the second request's water poured at 5 s, not at 0)", d.Remaining, want)
			}
		})
	}
}
