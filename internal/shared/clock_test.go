package shared

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// stamped is a Model whose clock, for the calls that do not give one, is
// the test's: the instant at which the remote ran them.
type stamped struct {
	*Model
	at *time.Time
}

func (s stamped) Add(ctx context.Context, items []Item) error {
	for i := range items {
		if items[i].Now == 0 {
			items[i].Now = s.at.UnixMicro()
		}
	}
	return s.Model.Add(ctx, items)
}

// A sync-mode decision never runs at an instant earlier than one the store
// decided at already, whatever the remote's clock says next (a failover to a
// server whose clock is a little behind; an offset learned from a slower
// round trip). Decided earlier, a bucket read the water of a request
// admitted after that instant: another key's Remaining one unit low
// (TestPeekReset, sync mode, on the buckets). A step back larger than a
// call's bound is the remote's clock changing: the estimate follows it.
func TestEstimateNeverGoesBack(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		next time.Duration // the remote's clock at k's sync, from start
		at   time.Duration // the instant other's peek is decided at
		left int           // other's Remaining then
	}{
		{"a little behind", time.Millisecond, 10 * time.Millisecond, 2},
		{"changed by 10 s", -10 * time.Second, -10 * time.Second, 1},
	} {
		for _, a := range []ratekeeper.Algorithm{ratekeeper.TokenBucket, ratekeeper.LeakyBucket} {
			t.Run(c.name+"/"+string(a), func(t *testing.T) {
				l := ratekeeper.Limit{Algorithm: a, Rate: 3, Period: time.Hour}
				remote := start.Add(10 * time.Millisecond) // the remote runs 10 ms ahead
				clock := &stepClock{start}
				s := New(stamped{NewModel(), &remote}, Sync, time.Second, WithoutLoop(), WithClock(clock))
				defer s.Close()
				first, err := s.Take(ctx, ratekeeper.Request{Key: "other", Limit: l, N: 1})
				if err != nil || !first.Allowed || first.Remaining != 2 {
					t.Fatalf("other's request: %+v, %v; want allowed, 2 left", first, err)
				}
				remote = start.Add(c.next)
				clock.t = clock.t.Add(time.Millisecond)
				if d, err := s.Take(ctx, ratekeeper.Request{Key: "k", Limit: l, N: 1}); err != nil || !d.Allowed {
					t.Fatalf("k's request, which syncs k: %+v, %v", d, err)
				}
				peek, err := s.Take(ctx, ratekeeper.Request{Key: "other", Limit: l, N: 0})
				if want := start.Add(c.at); err != nil || peek.Remaining != c.left || !peek.At.Equal(want) {
					t.Errorf("other's peek after k's sync read the remote's clock at %v: %+v, %v; want %d left at %v",
						remote, peek, err, c.left, want)
				}
			})
		}
	}
}

// The estimate keeps the offset of the answer with the shortest round trip:
// a slow answer's offset is off by up to half its round trip. An answer
// that cannot agree with it means the remote's clock changed; an old one
// gives way to any.
func TestLearnKeepsTheShortestRoundTrip(t *testing.T) {
	s := New(NewModel(), Sync, time.Second, WithoutLoop())
	defer s.Close()
	s.learn(0, 10, 5) // offset 0, ±5 µs
	for _, c := range []struct {
		name              string
		sent, recv, stamp int64
		want              int64
	}{
		{"a slow answer, stamped late in its round trip", 100, 300, 290, 0},
		{"a slow answer, stamped early", 400, 600, 410, 0},
		{"the remote's clock moved by a minute", 700, 900, 800 + 60e6, 60e6},
		{"a faster answer", 1000, 1004, 1002 + 60e6 + 1, 60e6 + 1},
		{"after clockAge, any answer", 1000 + clockAge.Microseconds() + 1, 1000 + clockAge.Microseconds() + 201, 1000 + clockAge.Microseconds() + 101 + 60e6 + 90, 60e6 + 90},
	} {
		s.learn(c.sent, c.recv, c.stamp)
		if got := s.offset.Load(); got != c.want {
			t.Fatalf("%s: offset %d, want %d", c.name, got, c.want)
		}
	}
}
