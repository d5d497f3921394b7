package jsonmeter

import (
	"math"
	"strconv"
)

// Reading is what a Meter read so far.
type Reading struct {
	// Sum is the sum over the paths of the last value each had, each
	// rounded up to a whole number and at most 1<<53.
	Sum int64
	// Seen is true when a path had a number.
	Seen bool
	// Bad is true when a path had a value other than a number from 0 or
	// null, or a JSON body is not one JSON value within the bounds.
	Bad bool
}

// Meter reads the numbers at its paths from the bytes written to it. The
// zero value reads nothing; a Meter is for one goroutine.
type Meter struct {
	paths  []Path
	events bool
	all    uint8                 // a bit per path
	full   [MaxNesting + 1]uint8 // full[d]: the paths of d keys
	longer [MaxNesting + 1]uint8 // longer[d]: the paths of more than d keys

	doc    scanner
	sse    framing
	last   [MaxPaths]int64
	seen   uint8 // the paths that had a number
	docSaw uint8 // the paths that had a number in this document
	bad    bool
	wrote  bool // a byte was written
}

// New is a Meter of paths (at most MaxPaths). With events, the body is a
// text/event-stream: each event's data is a JSON document, and an event
// whose data is not JSON ([DONE]) is skipped. Else it is one JSON value.
func New(paths []Path, events bool) *Meter {
	m := &Meter{paths: paths[:min(len(paths), MaxPaths)], events: events}
	for i, p := range m.paths {
		m.all |= 1 << i
		for d := range m.full {
			if len(p) == d {
				m.full[d] |= 1 << i
			}
			if len(p) > d {
				m.longer[d] |= 1 << i
			}
		}
	}
	m.startDoc()
	return m
}

// Write reads p. It never fails.
func (m *Meter) Write(p []byte) (int, error) {
	m.wrote = m.wrote || len(p) > 0
	if m.events {
		m.frame(p)
	} else if m.doc.st != stBroken {
		m.feed(p)
		if m.doc.st == stBroken {
			m.bad = true
		}
	}
	return len(p), nil
}

// End says that the body ended: a JSON body must be complete by then,
// or empty (a HEAD request's, a 204). An event stream's unfinished last
// event is dropped.
func (m *Meter) End() {
	if !m.events && m.wrote {
		m.endDoc()
	}
}

// Reading is what m read so far.
func (m *Meter) Reading() Reading {
	r := Reading{Seen: m.seen != 0, Bad: m.bad}
	for i := range m.paths {
		if m.seen&(1<<i) != 0 {
			r.Sum = min(r.Sum+m.last[i], 1<<53)
		}
	}
	return r
}

func (m *Meter) startDoc() {
	m.doc = scanner{cur: m.all}
	m.docSaw = 0
}

// endDoc completes the document: a number at its end is read, and a JSON
// body that is not one whole value is bad.
func (m *Meter) endDoc() {
	if m.doc.st >= stNeg && m.doc.st <= stExp {
		m.endNumber()
	}
	if !m.events && m.doc.st != stEnd {
		m.bad = true
	}
	m.doc.st = stBroken
}

// record is the value v of the number at the paths of mask.
func (m *Meter) record(mask uint8, v int64) {
	for i := range m.paths {
		bit := uint8(1) << i
		if mask&bit == 0 {
			continue
		}
		if m.docSaw&bit != 0 {
			v = max(v, m.last[i]) // a key given twice: the larger
		}
		m.last[i] = v
		m.docSaw |= bit
		m.seen |= bit
	}
}

// number is the value of a number token: rounded up, at most 1<<53; ok is
// false for a negative one.
func number(b []byte) (v int64, ok bool) {
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !math.IsInf(f, 0) && f != 0 {
		return 0, false
	}
	switch {
	case f < 0:
		return 0, false
	case f >= 1<<53:
		return 1 << 53, true
	}
	return int64(math.Ceil(f)), true
}
