// Package storetest is the conformance suite every ratekeeper Store runs:
// the same timelines, on a manual clock, with the same decisions demanded to
// the microsecond. A store passes by calling Run from its tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) ratekeeper.Store { return mystore.New() })
//	}
//
// Differential runs two stores over the same random timelines and demands
// identical decisions.
package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// Clock is a manual Clock for timelines. Its zero value reads the zero Time;
// it is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t, backwards too.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Op is what a Step asks the Limiter.
type Op int

// The operations a Step can perform.
const (
	Allow   Op = iota // AllowN
	Reserve           // ReserveN
	Peek              // Limiter.Peek: AllowN with n == 0, allowed iff one would be
	Cancel            // Cancel the latest allowed ReserveN of this key
	Refund            // Refund the latest allowed AllowN of this key
	Reset             // Limiter.Reset (timelines with one need a ratekeeper.Resetter)
)

func (o Op) String() string {
	return [...]string{"allow", "reserve", "peek", "cancel", "refund", "reset"}[o]
}

// Step is one request of a timeline and the decision it must get.
type Step struct {
	At   time.Duration // since the timeline's start
	Op   Op
	Key  string // "" means "k"
	N    int    // 0 means 1 (use Op Peek to ask without taking)
	Want Want
}

// Want is the decision a Step must get. Every field is compared.
type Want struct {
	Allowed    bool
	Remaining  int
	RetryAfter time.Duration
	ResetAfter time.Duration
	Delay      time.Duration
}

// Timeline is a limit and the steps that exercise it.
type Timeline struct {
	Name  string
	Limit ratekeeper.Limit
	// Start is the instant At counts from; the zero Time means Epoch.
	Start time.Time
	Steps []Step
}

// Epoch is where timelines start unless they say otherwise: a Monday,
// 2026-01-05 00:00:00 UTC, aligned to every window from a microsecond to a
// week.
var Epoch = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// Run runs every timeline of Timelines against a fresh store from newStore
// and fails on the first decision that differs from the timeline's. A store
// that is a ratekeeper.Binder runs every timeline twice: bound, as a Limiter
// uses it, and through Store.Take alone (see Unbound). A store that is not a
// ratekeeper.Resetter skips the timelines that reset.
func Run(t *testing.T, newStore func(t *testing.T) ratekeeper.Store) {
	t.Helper()
	RunTimelines(t, newStore, Timelines())
}

// RunTimelines is Run over tls alone: for a store that refuses some
// limits, which then says so in a test of its own.
func RunTimelines(t *testing.T, newStore func(t *testing.T) ratekeeper.Store, tls []Timeline) {
	t.Helper()
	for _, tl := range tls {
		t.Run(tl.Name, func(t *testing.T) {
			s := newStore(t)
			if _, ok := s.(ratekeeper.Resetter); !ok && tl.resets() {
				t.Skipf("%T is not a ratekeeper.Resetter", s)
			}
			RunTimeline(t, s, tl)
			if _, ok := s.(ratekeeper.Binder); ok {
				RunTimeline(t, Unbound(newStore(t)), tl)
			}
		})
	}
}

// resets reports whether tl has a Reset step.
func (tl Timeline) resets() bool {
	for _, st := range tl.Steps {
		if st.Op == Reset {
			return true
		}
	}
	return false
}

// Unbound hides a store's Bind method (and every other method beyond
// ratekeeper.Store and ratekeeper.Resetter), so that Limiters use its Take.
func Unbound(s ratekeeper.Store) ratekeeper.Store {
	if r, ok := s.(ratekeeper.Resetter); ok {
		return unboundResetter{r}
	}
	return unbound{s}
}

type unbound struct{ ratekeeper.Store }

type unboundResetter struct{ ratekeeper.Resetter }

// RunTimeline runs one timeline against s. Keys are prefixed with a random
// run id, so stores that outlive a test (a shared Redis) start clean.
func RunTimeline(t *testing.T, s ratekeeper.Store, tl Timeline) {
	t.Helper()
	start := tl.Start
	if start.IsZero() {
		start = Epoch
	}
	clock := NewClock(start)
	lim, err := ratekeeper.New(s, tl.Limit, ratekeeper.WithClock(clock))
	if err != nil {
		t.Fatalf("%s: %v", tl.Name, err)
	}
	ctx := context.Background()
	prefix := fmt.Sprintf("storetest:%x:%s:", rand.Uint64(), tl.Name)
	type taken struct {
		n int
		d ratekeeper.Decision
	}
	lastAllow := map[string]taken{}
	lastReserve := map[string]taken{}
	for i, st := range tl.Steps {
		clock.Set(start.Add(st.At))
		key := st.Key
		if key == "" {
			key = "k"
		}
		key = prefix + key
		n := st.N
		if n == 0 {
			n = 1
		}
		var d ratekeeper.Decision
		switch st.Op {
		case Allow:
			d, err = lim.AllowN(ctx, key, n)
			if err == nil && d.Allowed {
				lastAllow[key] = taken{n, d}
			}
		case Reserve:
			d, err = lim.ReserveN(ctx, key, n)
			if err == nil && d.Allowed {
				lastReserve[key] = taken{n, d}
			}
		case Peek:
			d, err = lim.Peek(ctx, key)
		case Reset:
			if err = lim.Reset(ctx, key); err != nil {
				t.Fatalf("%s step %d (%s at %v): %v", tl.Name, i, st.Op, st.At, err)
			}
			continue
		case Refund, Cancel:
			var tk taken
			if st.Op == Refund {
				tk = lastAllow[key]
				err = lim.Refund(ctx, key, tk.n, tk.d)
			} else {
				tk = lastReserve[key]
				err = lim.Cancel(ctx, key, tk.n, tk.d)
			}
			if err != nil {
				t.Fatalf("%s step %d (%s at %v): %v", tl.Name, i, st.Op, st.At, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s step %d (%s at %v): %v", tl.Name, i, st.Op, st.At, err)
		}
		got := Want{d.Allowed, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay}
		if got != st.Want {
			t.Fatalf("%s step %d (%s n=%d at %v, %s):\n got %+v\nwant %+v", tl.Name, i, st.Op, n, st.At, tl.Limit, got, st.Want)
		}
		if d.Limit != tl.Limit.Capacity() {
			t.Fatalf("%s step %d: Limit = %d, want %d", tl.Name, i, d.Limit, tl.Limit.Capacity())
		}
		if want := clock.Now(); !d.At.Equal(want) && tl.Limit.Algorithm != ratekeeper.SlidingLog {
			t.Fatalf("%s step %d: At = %v, want %v", tl.Name, i, d.At, want)
		}
	}
}

// Differential runs the same random timelines against want and got:
// every algorithm, calendar windows too, random limits, costs, keys and
// gaps, and clocks that sometimes step back. It fails on the first
// decision where they differ. Each store is used through a Limiter on its
// own manual clock showing the same instants.
func Differential(t *testing.T, want, got ratekeeper.Store, seed uint64, steps int) {
	t.Helper()
	DifferentialFunc(t, want, got, seed, steps, func(w, g ratekeeper.Decision) bool { return w == g })
}

// DifferentialFunc is Differential with its own comparison of two
// decisions (their At cleared). It is for a store that may answer some
// fields differently by design: a denial cache, which reports a refusal's
// Remaining as it was when the refusal was cached.
func DifferentialFunc(t *testing.T, want, got ratekeeper.Store, seed uint64, steps int, same func(want, got ratekeeper.Decision) bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ctx := context.Background()
	prefix := fmt.Sprintf("difftest:%x:", rand.Uint64())
	for round := 0; round < max(1, steps/200); round++ {
		lim, now, period := RandomLimit(rng), Epoch, time.Duration(0)
		if rng.IntN(4) == 0 {
			lim, now, period = RandomCalendarLimit(rng)
		}
		cw, cg := NewClock(Epoch), NewClock(Epoch)
		lw, err := ratekeeper.New(want, lim, ratekeeper.WithClock(cw))
		if err != nil {
			t.Fatal(err)
		}
		lg, err := ratekeeper.New(got, lim, ratekeeper.WithClock(cg))
		if err != nil {
			t.Fatal(err)
		}
		if period == 0 {
			now = now.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))).Truncate(time.Microsecond))
			period = lim.Period
		}
		for i := 0; i < 200; i++ {
			switch r := rng.IntN(100); {
			case r < 3: // the clock steps back
				now = now.Add(-time.Duration(rng.Int64N(int64(period))).Truncate(time.Microsecond))
			case r < 50:
				now = now.Add(time.Duration(rng.Int64N(int64(period)/int64(max(1, lim.Rate))*2 + 1)).Truncate(time.Microsecond))
			case r < 60:
				now = now.Add(time.Duration(rng.Int64N(int64(period) * 3)).Truncate(time.Microsecond))
			}
			cw.Set(now)
			cg.Set(now)
			key := fmt.Sprintf("%sr%d:k%d", prefix, round, rng.IntN(3))
			n := 1 + rng.IntN(lim.Capacity())
			if rng.IntN(4) > 0 {
				n = 1
			}
			if rng.IntN(20) == 0 {
				n = 0
			}
			reserve := rng.IntN(3) == 0
			var dw, dg ratekeeper.Decision
			var ew, eg error
			if reserve {
				dw, ew = lw.ReserveN(ctx, key, n)
				dg, eg = lg.ReserveN(ctx, key, n)
			} else {
				dw, ew = lw.AllowN(ctx, key, n)
				dg, eg = lg.AllowN(ctx, key, n)
			}
			if ew != nil || eg != nil {
				t.Fatalf("round %d step %d: errors %v / %v", round, i, ew, eg)
			}
			atW, atG := dw.At, dg.At
			if !dw.At.Equal(dg.At) {
				t.Fatalf("round %d step %d (%s, key %s, n=%d, reserve %v, at %v): At %v vs %v", round, i, lim, key, n, reserve, now, dw.At, dg.At)
			}
			dw.At, dg.At = time.Time{}, time.Time{}
			if !same(dw, dg) {
				t.Fatalf("round %d step %d (%s, key %s, n=%d, reserve %v, at %v):\nwant %+v\n got %+v", round, i, lim, key, n, reserve, now, dw, dg)
			}
			if dw.Allowed && n > 0 && rng.IntN(15) == 0 {
				dw.At, dg.At = atW, atG
				if reserve {
					ew, eg = lw.Cancel(ctx, key, n, dw), lg.Cancel(ctx, key, n, dg)
				} else {
					ew, eg = lw.Refund(ctx, key, n, dw), lg.Refund(ctx, key, n, dg)
				}
				if ew != nil || eg != nil {
					t.Fatalf("round %d step %d: refund errors %v / %v", round, i, ew, eg)
				}
			}
		}
	}
}

// RandomLimit draws a valid limit of a random algorithm, with rates that
// often do not divide their period.
func RandomLimit(rng *rand.Rand) ratekeeper.Limit {
	periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 3 * time.Second, time.Minute, time.Hour, 24 * time.Hour}
	l := ratekeeper.Limit{
		Algorithm: ratekeeper.Algorithms[rng.IntN(len(ratekeeper.Algorithms))],
		Rate:      1 + rng.IntN(20),
		Period:    periods[rng.IntN(len(periods))],
	}
	if rng.IntN(2) == 0 {
		l.Burst = 1 + rng.IntN(30)
	}
	l.Stagger = rng.IntN(4) == 0
	l.LogRejected = rng.IntN(4) == 0
	if l.Validate() != nil {
		l.Rate, l.Burst = 1, 0
	}
	return l
}
