package topfleet

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ratekeeper/ratekeeper/internal/topk"
)

// version is the record's format; a record of another is skipped.
const version = 1

// maxTotal bounds a summary's total, so that the sums over
// WithMaxInstances summaries cannot overflow.
const maxTotal = 1 << 48

// record is what one instance publishes for one rule: its summary for
// each kind and span, as of At (Unix milliseconds).
type record struct {
	V    int    `json:"v"`
	Rule string `json:"rule"`
	At   int64  `json:"at"`
	Tops []part `json:"tops"`
}

// part is one kind and span of a record: a topk summary and its error
// bound, which no entry's error exceeds.
type part struct {
	Kind  string `json:"kind"`
	Span  string `json:"span"`
	Bound uint64 `json:"bound"`
	topk.Summary
}

// encode renders r in at most maxBytes, dropping the lightest entries of
// every part, and raising its floor to theirs, until it fits.
func encode(r record, maxBytes int) ([]byte, error) {
	for {
		b, err := json.Marshal(r)
		if err != nil || len(b) <= maxBytes {
			return b, err
		}
		shrunk := false
		for i := range r.Tops {
			p := &r.Tops[i]
			if n := len(p.Entries); n > 0 {
				keep := n / 2
				p.Floor = max(p.Floor, p.Entries[keep].Count)
				p.Bound = max(p.Bound, p.Floor)
				p.Entries = p.Entries[:keep]
				shrunk = true
			}
		}
		if !shrunk {
			return nil, fmt.Errorf("rule %q: %d bytes without entries, over %d", r.Rule, len(b), maxBytes)
		}
	}
}

// decode reads a record that rule's key held, and checks every bound: at
// most maxBytes, maxEntries per part, each kind and span once, and counts
// that a summary can hold.
func decode(b []byte, rule string, maxBytes, maxEntries int) (record, error) {
	var r record
	if len(b) > maxBytes {
		return r, fmt.Errorf("%d bytes, over %d", len(b), maxBytes)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, err
	}
	switch {
	case r.V != version:
		return r, fmt.Errorf("version %d, want %d", r.V, version)
	case r.Rule != rule:
		return r, fmt.Errorf("rule %q, want %q", r.Rule, rule)
	case len(r.Tops) > len(kinds())*len(topk.Spans()):
		return r, fmt.Errorf("%d summaries, over %d", len(r.Tops), len(kinds())*len(topk.Spans()))
	}
	seen := map[[2]string]bool{}
	for _, p := range r.Tops {
		if err := p.check(maxEntries); err != nil {
			return r, fmt.Errorf("%s over %s: %w", p.Kind, p.Span, err)
		}
		if seen[[2]string{p.Kind, p.Span}] {
			return r, fmt.Errorf("%s over %s: twice", p.Kind, p.Span)
		}
		seen[[2]string{p.Kind, p.Span}] = true
	}
	return r, nil
}

// check holds p to what a summary can be: a known kind and span, at most
// maxEntries distinct keys, and errors, counts, floor and bound within
// the total.
func (p part) check(maxEntries int) error {
	if _, ok := kindOf(p.Kind); !ok || !knownSpan(p.Span) {
		return errors.New("unknown kind or span")
	}
	if len(p.Entries) > maxEntries {
		return fmt.Errorf("%d entries, over %d", len(p.Entries), maxEntries)
	}
	if p.Total > maxTotal || p.Floor > p.Total || p.Bound > p.Total {
		return fmt.Errorf("total %d, floor %d, bound %d out of bounds", p.Total, p.Floor, p.Bound)
	}
	keys := make(map[string]bool, len(p.Entries))
	for _, e := range p.Entries {
		if e.Err > e.Count || e.Count > p.Total || e.Err > p.Bound {
			return fmt.Errorf("entry %q: count %d, error %d out of bounds", e.Key, e.Count, e.Err)
		}
		if keys[e.Key] {
			return fmt.Errorf("entry %q twice", e.Key)
		}
		keys[e.Key] = true
	}
	return nil
}

// kinds are the kinds every record holds.
func kinds() [2]topk.Kind { return [2]topk.Kind{topk.Refused, topk.Near} }

func kindOf(s string) (topk.Kind, bool) {
	for _, k := range kinds() {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

func knownSpan(name string) bool {
	for _, s := range topk.Spans() {
		if s.Name == name {
			return true
		}
	}
	return false
}
