package topk

import (
	"sync"
	"time"
)

// Window counts keys over a recent span of time, in slices: one Sketch of k
// counters per slice, merged when asked. It holds at most slices·k keys.
// An answer covers the slice now falls in and the slices-1 before it. A
// Window is safe for concurrent use.
type Window struct {
	mu     sync.Mutex
	k      int
	slice  int64 // ns
	ring   []slot
	latest int64 // the latest slice counted in
}

type slot struct {
	n  int64 // the slice's number: its start over its length
	sk *Sketch
}

// NewWindow returns a Window over span in n slices (at least one) of k
// counters each.
func NewWindow(k int, span time.Duration, n int) *Window {
	n = max(n, 1)
	w := &Window{k: max(k, 1), slice: max(int64(span)/int64(n), 1), ring: make([]slot, n)}
	for i := range w.ring {
		w.ring[i] = slot{n: -1, sk: NewSketch(k)}
	}
	return w
}

// Span is the time an answer covers.
func (w *Window) Span() time.Duration { return time.Duration(w.slice * int64(len(w.ring))) }

// Add counts n more of key at now. A now earlier than a slice counted in
// already (a clock stepped back) counts in the latest slice.
func (w *Window) Add(now time.Time, key string, n uint64) {
	w.mu.Lock()
	s := w.slotAt(now)
	s.sk.Add(key, n)
	w.mu.Unlock()
}

// slotAt is the slot counting now's slice, emptied if it held an older
// one. w is locked.
func (w *Window) slotAt(now time.Time) *slot {
	n := max(now.UnixNano()/w.slice, w.latest)
	w.latest = n
	s := &w.ring[n%int64(len(w.ring))]
	if s.n != n {
		s.n = n
		s.sk.Reset()
	}
	return s
}

// Top is what a Window counted over its span.
type Top struct {
	Entries []Entry // the heaviest keys, heaviest first
	Floor   uint64  // the most any key not in Entries may have counted
	Total   uint64  // every count added over the span
	Bound   uint64  // the most any Count exceeds the key's true count: Total/k
}

// Top returns the limit heaviest keys counted over the span ending at now.
func (w *Window) Top(now time.Time, limit int) Top {
	w.mu.Lock()
	cur := max(now.UnixNano()/w.slice, w.latest)
	parts := make([]Summary, 0, len(w.ring))
	var t Top
	for _, s := range w.ring {
		if s.n > cur-int64(len(w.ring)) && s.n <= cur {
			parts = append(parts, s.sk.Summary())
			t.Total += s.sk.Total()
		}
	}
	w.mu.Unlock()
	t.Entries, t.Floor = Merge(max(limit, 0), parts...)
	t.Bound = t.Total / uint64(w.k)
	return t
}
