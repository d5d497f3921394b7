package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// SlotOp is what a SlotStep asks a ConcurrencyStore.
type SlotOp int

// The operations a SlotStep can perform.
const (
	Acquire SlotOp = iota // AcquireSlot
	Refresh               // RefreshSlot
	Release               // ReleaseSlot
)

func (o SlotOp) String() string { return [...]string{"acquire", "refresh", "release"}[o] }

// SlotStep is one call of a slot timeline and what it must answer: for
// Acquire, Allowed and Remaining; for Refresh, Allowed is whether the slot
// was still held; Release answers nothing.
type SlotStep struct {
	At        time.Duration // since the timeline's start
	Op        SlotOp
	Key       string // "" means "k"
	ID        string
	Allowed   bool
	Remaining int
}

// SlotTimeline is a sequence of slot calls with one Max and TTL.
type SlotTimeline struct {
	Name  string
	Max   int
	TTL   time.Duration
	Steps []SlotStep
}

// SlotTimelines are the timelines every ConcurrencyStore must answer alike.
func SlotTimelines() []SlotTimeline {
	return []SlotTimeline{
		{Name: "max-and-release", Max: 2, TTL: 10 * sec, Steps: []SlotStep{
			{At: 0, Op: Acquire, ID: "a", Allowed: true, Remaining: 1},
			{At: 0, Op: Acquire, ID: "b", Allowed: true, Remaining: 0},
			{At: 0, Op: Acquire, Key: "other", ID: "a", Allowed: true, Remaining: 1},
			{At: 1 * sec, Op: Acquire, ID: "c", Allowed: false},
			{At: 1 * sec, Op: Release, ID: "a"},
			{At: 1 * sec, Op: Release, ID: "a"}, // twice: harmless
			{At: 1 * sec, Op: Release, ID: "never-held"},
			{At: 1 * sec, Op: Acquire, ID: "c", Allowed: true, Remaining: 0},
			{At: 1 * sec, Op: Acquire, ID: "d", Allowed: false},
			// Acquiring a slot already held holds it still.
			{At: 1 * sec, Op: Acquire, ID: "c", Allowed: true, Remaining: 0},
		}},
		{Name: "expiry", Max: 2, TTL: 10 * sec, Steps: []SlotStep{
			{At: 0, Op: Acquire, ID: "a", Allowed: true, Remaining: 1},
			{At: 1 * sec, Op: Acquire, ID: "b", Allowed: true, Remaining: 0},
			// a expires at 10s: still held a microsecond before.
			{At: 10*sec - time.Microsecond, Op: Acquire, ID: "c", Allowed: false},
			{At: 10 * sec, Op: Acquire, ID: "c", Allowed: true, Remaining: 0},
			{At: 10 * sec, Op: Refresh, ID: "a", Allowed: false}, // gone: not taken again
			{At: 10 * sec, Op: Acquire, ID: "d", Allowed: false},
			// b, refreshed just before its end, lives 10s from then.
			{At: 11*sec - time.Microsecond, Op: Refresh, ID: "b", Allowed: true},
			{At: 20 * sec, Op: Acquire, ID: "d", Allowed: true, Remaining: 0}, // c went at 20s
			{At: 21*sec - 2*time.Microsecond, Op: Acquire, ID: "e", Allowed: false},
			{At: 21*sec - time.Microsecond, Op: Acquire, ID: "e", Allowed: true, Remaining: 0},
			{At: 21 * sec, Op: Refresh, ID: "b", Allowed: false},
		}},
		{Name: "one", Max: 1, TTL: 3 * time.Millisecond, Steps: []SlotStep{
			{At: 0, Op: Acquire, ID: "a", Allowed: true, Remaining: 0},
			{At: time.Millisecond, Op: Refresh, ID: "a", Allowed: true},
			{At: 3 * time.Millisecond, Op: Acquire, ID: "b", Allowed: false},
			{At: 4 * time.Millisecond, Op: Acquire, ID: "b", Allowed: true, Remaining: 0},
			{At: 4 * time.Millisecond, Op: Release, ID: "b"},
			{At: 4 * time.Millisecond, Op: Acquire, ID: "c", Allowed: true, Remaining: 0},
		}},
	}
}

// RunConcurrency runs every SlotTimeline against a store from newStore,
// which must be a ratekeeper.ConcurrencyStore, and fails on the first
// answer that differs. It then checks that many goroutines acquiring and
// releasing through a ConcurrencyLimiter never hold more than Max.
func RunConcurrency(t *testing.T, newStore func(t *testing.T) ratekeeper.Store) {
	t.Helper()
	for _, tl := range SlotTimelines() {
		t.Run(tl.Name, func(t *testing.T) {
			cs, ok := newStore(t).(ratekeeper.ConcurrencyStore)
			if !ok {
				t.Fatal("not a ratekeeper.ConcurrencyStore")
			}
			RunSlotTimeline(t, cs, tl)
		})
	}
	t.Run("never-above-max", func(t *testing.T) {
		NeverAboveMax(t, newStore(t), 4, 32, 200)
	})
}

// RunSlotTimeline runs one slot timeline against s. Keys are prefixed with
// a random run id, so stores that outlive a test start clean.
func RunSlotTimeline(t *testing.T, s ratekeeper.ConcurrencyStore, tl SlotTimeline) {
	t.Helper()
	ctx := context.Background()
	prefix := fmt.Sprintf("storetest:%x:%s:", rand.Uint64(), tl.Name)
	for i, st := range tl.Steps {
		key := st.Key
		if key == "" {
			key = "k"
		}
		req := ratekeeper.SlotRequest{Key: prefix + key, ID: st.ID, Max: tl.Max, TTL: tl.TTL, Now: Epoch.Add(st.At)}
		var d ratekeeper.Decision
		var err error
		switch st.Op {
		case Acquire:
			d, err = s.AcquireSlot(ctx, req)
			if err == nil && (d.Allowed != st.Allowed || d.Remaining != st.Remaining || d.Limit != tl.Max || !d.At.Equal(req.Now) || d.RetryAfter != 0 || d.ResetAfter != 0) {
				t.Fatalf("%s step %d (%s %s %s at %v): got %+v, want allowed %v remaining %d", tl.Name, i, st.Op, key, st.ID, st.At, d, st.Allowed, st.Remaining)
			}
		case Refresh:
			var held bool
			held, err = s.RefreshSlot(ctx, req, ratekeeper.Decision{Allowed: true})
			if err == nil && held != st.Allowed {
				t.Fatalf("%s step %d (%s %s %s at %v): held %v, want %v", tl.Name, i, st.Op, key, st.ID, st.At, held, st.Allowed)
			}
		case Release:
			err = s.ReleaseSlot(ctx, req, ratekeeper.Decision{Allowed: true})
		}
		if err != nil {
			t.Fatalf("%s step %d (%s at %v): %v", tl.Name, i, st.Op, st.At, err)
		}
	}
}

// NeverAboveMax runs goroutines that each acquire (waiting) and release a
// slot of one key rounds times, through a ConcurrencyLimiter on store. It
// fails if more than limit are ever held at once, or if any round fails.
func NeverAboveMax(t *testing.T, store ratekeeper.Store, limit, goroutines, rounds int) {
	t.Helper()
	lim, err := ratekeeper.NewConcurrencyLimiter(store, ratekeeper.Concurrency{Max: limit, TTL: time.Minute, RetryAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("storetest:%x:race", rand.Uint64())
	var in, peak atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				p, _, err := lim.Acquire(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				n := in.Add(1)
				for {
					old := peak.Load()
					if n <= old || peak.CompareAndSwap(old, n) {
						break
					}
				}
				in.Add(-1)
				if err := p.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := peak.Load(); got > int64(limit) || got < 1 {
		t.Fatalf("peak in flight %d, limit %d", got, limit)
	}
}
