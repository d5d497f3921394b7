package topk

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// checkBounds fails unless every entry's true count lies within its
// bounds, every key counted more than floor is in entries, and the floor
// is at most total/k.
func checkBounds(t *testing.T, entries []Entry, floor uint64, truth map[string]uint64, total uint64, k int) {
	t.Helper()
	held := map[string]bool{}
	for _, e := range entries {
		held[e.Key] = true
		c := truth[e.Key]
		if e.Err > e.Count || c < e.Count-e.Err || c > e.Count {
			t.Fatalf("%q counted %d, reported %d±%d", e.Key, c, e.Count, e.Err)
		}
		if e.Err > total/uint64(k) {
			t.Fatalf("%q's error %d is over total/k = %d", e.Key, e.Err, total/uint64(k))
		}
	}
	for key, c := range truth {
		if !held[key] && c > floor {
			t.Fatalf("%q counted %d, over the floor %d, is not reported", key, c, floor)
		}
	}
}

// zipf returns n keys of a skewed stream (a few heavy clients, a long
// tail) with their costs, and the true counts.
func zipf(seed uint64, n int) ([]string, []uint64, map[string]uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	z := rand.NewZipf(rng, 1.2, 1, 5000)
	keys, costs := make([]string, n), make([]uint64, n)
	truth := map[string]uint64{}
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%d", z.Uint64())
		costs[i] = 1 + rng.Uint64N(3)
		truth[keys[i]] += costs[i]
	}
	return keys, costs, truth
}

func TestSketchBounds(t *testing.T) {
	for _, k := range []int{1, 10, 100, 1000} {
		for seed := range uint64(5) {
			keys, costs, truth := zipf(seed, 20000)
			s := NewSketch(k)
			var total uint64
			for i, key := range keys {
				s.Add(key, costs[i])
				total += costs[i]
			}
			if s.Total() != total {
				t.Fatalf("k=%d: Total %d, added %d", k, s.Total(), total)
			}
			var sum uint64
			es := s.Entries()
			for _, e := range es {
				sum += e.Count
			}
			if sum != total || len(es) > k {
				t.Fatalf("k=%d: %d counters summing to %d, added %d", k, len(es), sum, total)
			}
			checkBounds(t, es, s.Floor(), truth, total, k)
		}
	}
}

// The heaviest client of a skewed stream is found first, its count exact
// to within the stated bound.
func TestSketchFindsTheHeaviest(t *testing.T) {
	s := NewSketch(50)
	rng := rand.New(rand.NewPCG(9, 9))
	for i := range 100000 {
		if i%4 == 0 {
			s.Add("abuser", 1)
		} else {
			s.Add(fmt.Sprintf("c%d", rng.IntN(20000)), 1)
		}
	}
	top := s.Entries()[0]
	if top.Key != "abuser" || top.Count-top.Err > 25000 || top.Count < 25000 {
		t.Fatalf("first: %+v; want abuser, 25000 within its error", top)
	}
}

func TestMergeBounds(t *testing.T) {
	for _, k := range []int{5, 50, 500} {
		for seed := range uint64(5) {
			keys, costs, truth := zipf(seed+100, 30000)
			rng := rand.New(rand.NewPCG(seed, 2))
			parts := make([]*Sketch, 1+rng.IntN(6))
			for i := range parts {
				parts[i] = NewSketch(k)
			}
			var total uint64
			for i, key := range keys {
				// Parts of unequal sizes and mixes: slices of time, or
				// gateways of a fleet.
				parts[min(rng.IntN(len(parts)+2), len(parts)-1)].Add(key, costs[i])
				total += costs[i]
			}
			sums := make([]Summary, len(parts))
			for i, p := range parts {
				sums[i] = p.Summary()
			}
			for _, limit := range []int{1, k / 2, k, 10 * k} {
				es, floor := Merge(limit, sums...)
				if len(es) > limit {
					t.Fatalf("Merge(%d) returned %d", limit, len(es))
				}
				checkBounds(t, es, floor, truth, total, k)
			}
		}
	}
}

func TestWindowSlides(t *testing.T) {
	start := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	w := NewWindow(10, time.Minute, 6) // slices of 10 s
	w.Add(start, "a", 5)
	w.Add(start.Add(15*time.Second), "b", 3)
	top := func(at time.Duration) map[string]uint64 {
		got := map[string]uint64{}
		for _, e := range w.Top(start.Add(at), 10).Entries {
			got[e.Key] = e.Count
		}
		return got
	}
	if got := top(59 * time.Second); got["a"] != 5 || got["b"] != 3 {
		t.Fatalf("at 59 s: %v; want a 5, b 3", got)
	}
	if got := top(60 * time.Second); got["a"] != 0 || got["b"] != 3 {
		t.Fatalf("at 60 s: %v; want b 3 alone (a's slice has left the span)", got)
	}
	// Slice 6 takes the slot of slice 0, whose counts it forgets.
	w.Add(start.Add(60*time.Second), "c", 1)
	if got := top(60 * time.Second); got["b"] != 3 || got["c"] != 1 || len(got) != 2 {
		t.Fatalf("at 60 s: %v; want b 3, c 1", got)
	}
	// A clock that steps back counts in the latest slice, not an old one.
	w.Add(start.Add(5*time.Second), "d", 2)
	if got := top(65 * time.Second); got["d"] != 2 {
		t.Fatalf("after a step back: %v; want d 2", got)
	}
	if got := top(140 * time.Second); len(got) != 0 {
		t.Fatalf("two minutes later: %v; want nothing", got)
	}
	if tp := w.Top(start.Add(60*time.Second), 10); tp.Total != 6 || tp.Bound != 0 {
		t.Fatalf("Top: total %d, bound %d; want 6, 0", tp.Total, tp.Bound)
	}
}

// FuzzSketch drives a small Sketch with arbitrary adds: its bounds hold
// whatever the stream.
func FuzzSketch(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0, 0, 1, 7, 7, 7, 7})
	f.Add([]byte{255, 254, 253, 1, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const k = 4
		s := NewSketch(k)
		truth := map[string]uint64{}
		var total uint64
		for _, op := range ops {
			key, n := fmt.Sprint(op%16), uint64(op>>4)
			s.Add(key, n)
			if n > 0 {
				truth[key] += n
				total += n
			}
		}
		checkBounds(t, s.Entries(), s.Floor(), truth, total, k)
		es, floor := Merge(2, s.Summary(), s.Summary())
		double := map[string]uint64{}
		for key, c := range truth {
			double[key] = 2 * c
		}
		checkBounds(t, es, floor, double, 2*total, k)
	})
}

// The refused path's cost: one client hammering, and a crowd of distinct
// keys (each evicts the smallest counter).
func BenchmarkWindowAdd(b *testing.B) {
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("203.0.113.%d/%d", i%256, i)
	}
	now := time.Now()
	b.Run("one_key", func(b *testing.B) {
		w := NewWindow(200, time.Minute, 6)
		for b.Loop() {
			w.Add(now, keys[0], 1)
		}
	})
	b.Run("crowd", func(b *testing.B) {
		w := NewWindow(200, time.Minute, 6)
		i := 0
		for b.Loop() {
			w.Add(now, keys[i&4095], 1)
			i++
		}
	})
}
