package algo

import (
	"math/rand/v2"
	"testing"
)

// Replaying the admitted requests of a timeline with Add, each at its own
// instant, rebuilds exactly the state the decisions left: what sync mode
// relies on when it sends an instance's admissions to the shared state.
func TestAddRebuildsTheDecidedState(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for run := range 300 {
		l := Limit{Rate: 1 + rng.Int64N(20), Period: 1 + rng.Int64N(3*second)}
		l.Burst = l.Rate + rng.Int64N(5)
		if rng.IntN(2) == 0 {
			l.Offset = rng.Int64N(l.Period)
		}
		p := l.prepared()
		var (
			w, wa Window
			s, sa Sliding
			b, ba Bucket
			now   = rng.Int64N(10 * second)
		)
		for range 200 {
			now += rng.Int64N(l.Period/l.Rate*2 + 1)
			n := 1 + rng.Int64N(min(3, l.Rate)) // a cost above the limit is refused before the algorithms
			var r Result
			if w, r = w.Fixed(&l, now, n); r.Allowed {
				var ok bool
				if wa, ok = wa.Add(&l, now, now, n); !ok {
					t.Fatalf("run %d: Add dropped a request of the current window", run)
				}
			}
			if s, r = s.SlidingWindow(&l, now, n); r.Allowed {
				sa, _ = sa.Add(&l, now, now, n)
			}
			if r = b.Apply(&p, Metered, now, n); r.Allowed {
				ba, _ = ba.Add(&l, now, now, n)
			}
			// The states may differ while one is merely unrolled: compare
			// what each would decide for no request now.
			if _, x := w.Fixed(&l, now, 0); x != func() Result { _, y := wa.Fixed(&l, now, 0); return y }() {
				t.Fatalf("run %d at %d: fixed window %+v, rebuilt %+v", run, now, w, wa)
			}
			if _, x := s.SlidingWindow(&l, now, 0); x != func() Result { _, y := sa.SlidingWindow(&l, now, 0); return y }() {
				t.Fatalf("run %d at %d: sliding window %+v, rebuilt %+v", run, now, s, sa)
			}
			if b != ba {
				t.Fatalf("run %d at %d: bucket %+v, rebuilt %+v", run, now, b, ba)
			}
		}
	}
}

// Add counts past the limit, drops what an ended window counted, and
// takes back a negative count.
func TestAddEdges(t *testing.T) {
	l := &Limit{Rate: 10, Period: second}
	w, ok := Window{}.Add(l, 0, 0, 25)
	if !ok || w.Count != 25 {
		t.Fatalf("25 into an empty window: %+v, %v", w, ok)
	}
	if _, ok := w.Add(l, second, 0, 1); ok {
		t.Error("a request from an ended window was counted")
	}
	if w2, _ := w.Add(l, 0, 0, -30); w2.Count != 0 {
		t.Errorf("taking back more than counted left %d", w2.Count)
	}
	if w2, ok := w.Add(l, 0, 2*second, 1); !ok || w2.Count != 1 || w2.End != 3*second {
		t.Errorf("a request from a later window (a clock ahead): %+v, %v", w2, ok)
	}

	s, _ := Sliding{}.Add(l, 0, 0, 4)
	s, ok = s.Add(l, second, 0, 3) // now one window on: the request counts as the previous window's
	if !ok || s.Prev != 7 || s.Cur != 0 {
		t.Errorf("a late request of the previous window: %+v, %v", s, ok)
	}
	if _, ok := s.Add(l, 3*second, 0, 1); ok {
		t.Error("a request two windows old was counted")
	}

	b, _ := Bucket{}.Add(l, 0, 0, 25)
	p := l.prepared()
	if r := b.Apply(&p, Metered, 0, 0); r.Remaining != 0 {
		t.Errorf("a bucket over capacity reports %d remaining", r.Remaining)
	}
	if b2, _ := (Bucket{}).Add(l, 10*second, 0, 5); b2.Tail >= 10*second {
		t.Errorf("water poured long ago has not drained: %+v", b2)
	}
}

// A record MergeAdds makes of two adds pours the same water on every
// bucket, at every instant, as the two adds did; and two pours the first of
// which drained before the second do not merge.
func TestMergeAddsIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	merged := 0
	for run := range 20000 {
		l := Limit{Rate: 1 + rng.Int64N(7), Period: 1 + rng.Int64N(second)}
		l.Burst = l.Rate
		step := l.Period/l.Rate + 1
		a1 := rng.Int64N(4 * step)
		a2 := a1 + rng.Int64N(4*step) - step // sometimes earlier: a clock that stepped back
		n1, n2 := rng.Int64N(7)-2, rng.Int64N(7)-2
		at, ok := MergeAdds(&l, a1, n1, a2, n2)
		if !ok {
			continue
		}
		merged++
		for range 20 {
			b := Bucket{Tail: rng.Int64N(8 * step), Frac: rng.Int64N(l.Rate)}
			now := rng.Int64N(8 * step)
			two, _ := b.Add(&l, now, a1, n1)
			two, _ = two.Add(&l, now, a2, n2)
			one, _ := b.Add(&l, now, at, n1+n2)
			if two != one {
				t.Fatalf("run %d: %+v: %d at %d then %d at %d (now %d) on %+v gives %+v; merged at %d, %+v",
					run, l, n1, a1, n2, a2, now, b, two, at, one)
			}
		}
	}
	if merged < 5000 {
		t.Fatalf("only %d of 20000 pairs merged: the test checks too little", merged)
	}
	// DESIGN's bucket, 3 per minute: 3 poured at 0 s have drained by 60 s,
	// and merged at 60 s they counted again (the flake of sync mode's
	// conformance timelines).
	l := Limit{Rate: 3, Period: 60 * second, Burst: 3}
	if _, ok := MergeAdds(&l, 0, 3, 60*second+1, 1); ok {
		t.Fatal("3 poured at 0 s merged with 1 a microsecond after they drained")
	}
	if at, ok := MergeAdds(&l, 0, 3, 60*second, 1); !ok || at != 0 {
		t.Fatalf("3 poured at 0 s and 1 at 60 s: merged %v at %d, want at 0", ok, at)
	}
}
