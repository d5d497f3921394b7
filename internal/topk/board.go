package topk

import (
	"sync"
	"time"
)

// Kind is what a key was counted for.
type Kind int

const (
	Refused Kind = iota // a request refused
	Near                // a request admitted with at most a tenth of the limit left
	kinds
)

func (k Kind) String() string {
	if k == Near {
		return "near"
	}
	return "refused"
}

// Span is one of the recent spans a Board answers for.
type Span struct {
	Name   string        // "1m", "1h"
	Length time.Duration // what an answer covers
	Slices int           // of Length each
}

// Spans are the spans every Board keeps: the last minute in slices of 15
// s, the last hour in slices of 15 min.
func Spans() []Span {
	return []Span{{"1m", time.Minute, 4}, {"1h", time.Hour, 4}}
}

// Board keeps, per rule, the keys counted for each Kind over each Span: at
// most len(Spans)·Slices·k keys per rule and kind. It is safe for
// concurrent use.
type Board struct {
	k     int
	mu    sync.RWMutex
	rules map[string]*[kinds][]*Window // a rule's windows, by kind and span
}

// NewBoard returns an empty Board of k counters per window slice.
func NewBoard(k int) *Board {
	return &Board{k: max(k, 1), rules: map[string]*[kinds][]*Window{}}
}

// K is the counters per window slice.
func (b *Board) K() int { return b.k }

// Add counts n of key for kind under rule at now.
func (b *Board) Add(now time.Time, rule string, kind Kind, key string, n uint64) {
	for _, w := range b.windows(rule)[kind] {
		w.Add(now, key, n)
	}
}

func (b *Board) windows(rule string) *[kinds][]*Window {
	b.mu.RLock()
	ws := b.rules[rule]
	b.mu.RUnlock()
	if ws != nil {
		return ws
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ws = b.rules[rule]; ws == nil {
		ws = new([kinds][]*Window)
		for k := range ws {
			for _, s := range Spans() {
				ws[k] = append(ws[k], NewWindow(b.k, s.Length, s.Slices))
			}
		}
		b.rules[rule] = ws
	}
	return ws
}

// Rules returns the rules counted for so far.
func (b *Board) Rules() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make([]string, 0, len(b.rules))
	for r := range b.rules {
		out = append(out, r)
	}
	return out
}

// Top returns rule's n heaviest keys for kind over the span named span
// ending at now, and false if the Board keeps no such span.
func (b *Board) Top(now time.Time, rule string, kind Kind, span string, n int) (Top, bool) {
	for i, s := range Spans() {
		if s.Name == span {
			b.mu.RLock()
			ws := b.rules[rule]
			b.mu.RUnlock()
			if ws == nil {
				return Top{}, true
			}
			return ws[kind][i].Top(now, n), true
		}
	}
	return Top{}, false
}

// Forget drops the rules not in keep (a reload removed them).
func (b *Board) Forget(keep map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for r := range b.rules {
		if !keep[r] {
			delete(b.rules, r)
		}
	}
}
