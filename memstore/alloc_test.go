package memstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// TestNoAllocsOnExistingKey: a decision on a key the store already holds
// allocates nothing, for every algorithm, for Allow and Reserve, whether it
// is allowed (the state changes) or refused, and whether the time comes from
// the Limiter's clock or from the store's own.
func TestNoAllocsOnExistingKey(t *testing.T) {
	ctx := context.Background()
	const rate = 10
	for _, alg := range ratekeeper.Algorithms {
		for _, op := range []string{"Allow", "Reserve"} {
			for _, clocked := range []bool{true, false} {
				name := string(alg) + "/" + op + "/store_clock"
				if clocked {
					name = string(alg) + "/" + op + "/limiter_clock"
				}
				t.Run(name, func(t *testing.T) {
					clock := storetest.NewClock(storetest.Epoch)
					s := New(WithJanitorInterval(0))
					defer s.Close()
					l := ratekeeper.Limit{Algorithm: alg, Rate: rate, Period: time.Second}
					var opts []ratekeeper.Option
					if clocked {
						opts = append(opts, ratekeeper.WithClock(clock))
					}
					lim, err := ratekeeper.New(s, l, opts...)
					if err != nil {
						t.Fatal(err)
					}
					call := lim.Allow
					if op == "Reserve" {
						call = lim.Reserve
					}
					const key = "client:42"
					// Fill the key's state to its largest (the sliding log
					// grows its ring up to Rate entries).
					for range rate {
						if _, err := call(ctx, key); err != nil {
							t.Fatal(err)
						}
					}
					var allowed, refused int
					decide := func() {
						d, err := call(ctx, key)
						if err != nil {
							t.Fatal(err)
						}
						if d.Allowed {
							allowed++
						} else {
							refused++
						}
					}
					if a := testing.AllocsPerRun(100, decide); a != 0 {
						t.Errorf("spent key: %v allocations per decision, want 0", a)
					}
					if clocked {
						// Pace at half the rate: every decision is
						// allowed and changes the state.
						advance := func() {
							clock.Advance(2 * l.Period / rate)
							decide()
						}
						clock.Advance(2 * l.Period) // past every window
						before := allowed
						if a := testing.AllocsPerRun(100, advance); a != 0 {
							t.Errorf("allowed decisions: %v allocations per decision, want 0", a)
						}
						if allowed-before < 100 {
							t.Errorf("only %d of %d paced decisions allowed: the allowed path went untested", allowed-before, 101)
						}
					}
					if refused == 0 && !(alg == ratekeeper.TokenBucket && op == "Reserve") {
						t.Errorf("no decision refused: the refused path went untested")
					}
				})
			}
		}
	}
}

// TestStoreClockFollowsWallClock: without WithClock the store decides at the
// system time, read through its monotonic anchor, and re-anchors when the
// wall clock has stepped away.
func TestStoreClockFollowsWallClock(t *testing.T) {
	s := New(WithJanitorInterval(0))
	defer s.Close()
	before := time.Now().UnixMicro()
	got := s.now(time.Time{})
	after := time.Now().UnixMicro()
	// The anchor's two clock reads are a few ns apart: allow 2µs.
	const slack = 2
	if got < before-slack || got > after+slack {
		t.Fatalf("store time %d outside [%d, %d]", got, before, after)
	}

	// An anchor an hour off, as if the wall clock had stepped by an hour
	// since New: reanchor must notice and follow it.
	a := newAnchor()
	a.wall -= time.Hour.Nanoseconds()
	s.anchor.Store(a)
	if d := time.Now().UnixMicro() - s.now(time.Time{}); d < time.Hour.Microseconds()-1000 {
		t.Fatalf("the stepped anchor is only %dµs behind", d)
	}
	s.reanchor()
	before = time.Now().UnixMicro()
	got = s.now(time.Time{})
	after = time.Now().UnixMicro()
	if got < before-slack || got > after+slack {
		t.Fatalf("after reanchor the store time %d is outside [%d, %d]", got, before, after)
	}

	// A drift within maxDrift keeps the anchor.
	kept := s.anchor.Load()
	s.reanchor()
	if s.anchor.Load() != kept {
		t.Error("reanchor replaced an anchor that agrees with the wall clock")
	}

	// A store with its own clock never reads the system time.
	clock := storetest.NewClock(storetest.Epoch)
	own := New(WithJanitorInterval(0), WithClock(clock))
	defer own.Close()
	if got, want := own.now(time.Time{}), storetest.Epoch.UnixMicro(); got != want {
		t.Errorf("store with a clock decides at %d, want %d", got, want)
	}
	// A request's own time wins over both.
	at := storetest.Epoch.Add(time.Minute)
	if got, want := s.now(at), at.UnixMicro(); got != want {
		t.Errorf("request time: %d, want %d", got, want)
	}
}

// TestPrepareSlotsCompareWholeLimit: limits that share a slot of the
// prepared cache (same numbers, algorithm names of one length) each get
// their own preparation.
func TestPrepareSlotsCompareWholeLimit(t *testing.T) {
	s := New()
	defer s.Close()
	// Two limits of different algorithms in one slot, found rather than
	// assumed, so that the test cannot pass by skipping.
	fixed := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Period: time.Second}
	bucket := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Period: time.Second}
	for bucket.Rate = 1; bucket.Rate < 1<<16 && recentSlot(&bucket) != recentSlot(&fixed); bucket.Rate++ {
	}
	if recentSlot(&fixed) != recentSlot(&bucket) {
		t.Fatal("no token bucket limit shares the fixed window's slot")
	}
	for range 3 {
		if k := s.prepare(&fixed).kind(false); k != kindFixed {
			t.Fatalf("fixed window prepared as kind %d", k)
		}
		if k := s.prepare(&bucket).kind(false); k != kindMeter {
			t.Fatalf("token bucket prepared as kind %d", k)
		}
	}
}
