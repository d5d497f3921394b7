package algo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

const second = int64(1_000_000)

var debugTimeline = false

// kind is one way of asking an algorithm.
type kind int

const (
	meter kind = iota // token bucket Allow, leaky bucket Allow
	debt              // token bucket Reserve
	queue             // leaky bucket Reserve
	fixed
	sliding
	slog
)

func (k kind) String() string {
	return [...]string{"meter", "debt", "queue", "fixed", "sliding", "log"}[k]
}

// state is one key's state for any kind, so tests can drive them alike.
type state struct {
	b Bucket
	w Window
	s Sliding
	g *Log
}

func newState() *state { return &state{g: new(Log)} }

func (st *state) clone() *state {
	c := *st
	c.g = st.g.Clone()
	return &c
}

func (st *state) take(k kind, l Limit, now, n int64) Result {
	var r Result
	switch k {
	case meter:
		// Every metered step also checks Apply's way for one request, on
		// the figures Params precomputes, against the general meter.
		b, p := st.b, l.prepared()
		r = b.Apply(&p, Metered, now, n)
		was := st.b
		if want := st.b.meter(&p, now, n); r != want || b != st.b {
			panic(fmt.Sprintf("Apply(%+v, Metered, %d, %d) on %+v = %+v, %+v; the general meter says %+v, %+v", l, now, n, was, r, b, want, st.b))
		}
	case debt:
		r = st.b.Apply(&l, Debited, now, n)
	case queue:
		r = st.b.Apply(&l, Queued, now, n)
	case fixed:
		st.w, r = st.w.Fixed(&l, now, n)
	case sliding:
		st.s, r = st.s.SlidingWindow(&l, now, n)
	case slog:
		r = st.g.SlidingLog(&l, now, n)
	}
	return r
}

func capacity(k kind, l Limit) int64 {
	if k == meter || k == debt || k == queue {
		return l.Burst
	}
	return l.Rate
}

// TestNoDriftOverLongRuns asks greedily for a million simulated seconds,
// jumping exactly by RetryAfter after each refusal: integer arithmetic must
// admit exactly what the rate allows, to the request.
func TestNoDriftOverLongRuns(t *testing.T) {
	l := Limit{Rate: 3, Period: second, Burst: 3}.prepared() // a token every 333333⅓ µs
	var b Bucket
	admitted := int64(0)
	const horizon = 1_000_000 * second
	for now := int64(0); now <= horizon; {
		r := b.Apply(&l, Metered, now, 1)
		if r.Allowed {
			admitted++
			continue
		}
		if r.RetryAfter <= 0 {
			t.Fatalf("refused at %d with RetryAfter %d", now, r.RetryAfter)
		}
		now += r.RetryAfter
	}
	// The full bucket plus every token refilled by the horizon.
	if want := l.Burst + horizon*l.Rate/l.Period; admitted != want {
		t.Fatalf("admitted %d over %d s, want %d", admitted, horizon/second, want)
	}
}

// TestStaggerMovesWindows checks that an offset shifts window edges.
func TestStaggerMovesWindows(t *testing.T) {
	l := Limit{Rate: 1, Period: 60 * second, Offset: 15 * second}
	var w Window
	w, r := w.Fixed(&l, 10*second, 1)
	if !r.Allowed || r.ResetAfter != 5*second {
		t.Fatalf("first: %+v, want allowed with reset 5s (window ends at 15s)", r)
	}
	if _, r = w.Fixed(&l, 15*second-1, 1); r.Allowed || r.RetryAfter != 1 {
		t.Fatalf("at 15s-1µs: %+v, want refused for 1µs", r)
	}
	if _, r = w.Fixed(&l, 15*second, 1); !r.Allowed {
		t.Fatalf("at 15s: %+v, want allowed (new window)", r)
	}
	if Offset("client-a", 60*second) == Offset("client-b", 60*second) {
		t.Fatal("two keys got the same offset; the hash is not spreading them")
	}
	if o := Offset("x", 7); o < 0 || o >= 7 {
		t.Fatalf("offset %d outside [0, 7)", o)
	}
}

// FuzzInvariants drives random timelines through every algorithm and checks
// what each promises: never more than its limit in any window it promises,
// Remaining within 0..Limit, RetryAfter exact to the microsecond (the same
// request passes at now+RetryAfter and not a microsecond earlier), and a
// clock that steps back never makes a decision more permissive than at the
// latest instant seen.
func FuzzInvariants(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint16(3), uint32(1000), uint16(0))
	f.Add(uint64(2), uint8(1), uint16(10), uint32(1000), uint16(5))
	f.Add(uint64(3), uint8(2), uint16(2), uint32(1000), uint16(2))
	f.Add(uint64(4), uint8(3), uint16(5), uint32(60000), uint16(0))
	f.Add(uint64(5), uint8(4), uint16(7), uint32(60000), uint16(0))
	f.Add(uint64(6), uint8(5), uint16(2), uint32(60000), uint16(0))
	f.Add(uint64(7), uint8(4), uint16(100), uint32(7), uint16(0))
	f.Add(uint64(8), uint8(0), uint16(7), uint32(3), uint16(40))
	f.Add(uint64(9), uint8(5), uint16(1), uint32(1), uint16(0))
	f.Fuzz(func(t *testing.T, seed uint64, k8 uint8, rate uint16, periodMs uint32, burst uint16) {
		k := kind(k8 % 6)
		l := Limit{
			Rate:   int64(rate%500) + 1,
			Period: (int64(periodMs%3_600_000) + 1) * 1000,
			Burst:  int64(burst % 500),
		}
		if l.Burst == 0 {
			l.Burst = l.Rate
		}
		if l.Rate > l.Period { // the buckets allow at most one per µs
			l.Rate = l.Period
		}
		rng := rand.New(rand.NewPCG(seed, uint64(k8)))
		if k == fixed || k == sliding {
			l.Offset = rng.Int64N(l.Period)
		}
		if k == slog {
			l.LogRejected = rng.IntN(3) == 0
		}
		checkTimeline(t, k, l, rng)
	})
}

type event struct{ at, n, proceed int64 }

func checkTimeline(t *testing.T, k kind, l Limit, rng *rand.Rand) {
	st := newState()
	now := int64(rng.Int64N(1 << 40))
	latest := int64(math.MinInt64) // the latest instant the state has seen
	var admitted []event
	interval := max(1, l.Period/l.Rate)
	for i := 0; i < 300; i++ {
		switch r := rng.IntN(100); {
		case r < 4:
			now -= rng.Int64N(l.Period + 1) // the clock steps back
		case r < 60:
			now += rng.Int64N(2*interval + 1)
		case r < 70:
			now += rng.Int64N(3*l.Period + 1)
		}
		n := int64(1)
		if rng.IntN(4) == 0 {
			n = 1 + rng.Int64N(capacity(k, l))
		}
		if rng.IntN(25) == 0 {
			n = 0
		}

		if now < latest && n > 0 {
			// Stepping back never makes a decision more permissive.
			back := st.clone().take(k, l, now, n)
			ahead := st.clone().take(k, l, latest, n)
			if back.Allowed && !ahead.Allowed {
				t.Fatalf("%s %+v: at %d (clock stepped back from %d) allowed n=%d that the latest instant refuses", k, l, now, latest, n)
			}
		}
		before := st.clone()
		next := st.clone()
		r := next.take(k, l, now, n)
		if debugTimeline {
			t.Logf("step %d now=%d n=%d -> %+v", i, now, n, r)
		}
		// Commit as the stores do: only what takes something (or logs a
		// penalty) changes the state.
		if n > 0 && (r.Allowed || (k == slog && l.LogRejected)) {
			st = next
			latest = max(latest, now)
		}
		if r.Remaining < 0 || r.Remaining > r.Limit || r.Limit != capacity(k, l) {
			t.Fatalf("%s %+v step %d: remaining %d outside 0..%d (limit %d)", k, l, i, r.Remaining, capacity(k, l), r.Limit)
		}
		if (n > 0 && r.Allowed != (r.RetryAfter == 0)) || r.RetryAfter < 0 || r.ResetAfter < 0 || r.Delay < 0 {
			t.Fatalf("%s %+v step %d: inconsistent result %+v", k, l, i, r)
		}
		if n == 0 {
			// Asked without taking: allowed, and RetryAfter is exactly
			// the wait until one request would be.
			// (A refused request that the log records as a penalty
			// reports the wait after its own entry: compare with one that
			// is not recorded.)
			lone := l
			lone.LogRejected = false
			one := before.clone().take(k, lone, now, 1)
			switch {
			case !r.Allowed && !(k == fixed || k == sliding):
				// A window whose shared count passed the limit refuses
				// even nothing; the others cannot be over.
				t.Fatalf("%s %+v step %d: n=0 refused: %+v", k, l, i, r)
			case r.RetryAfter != one.RetryAfter:
				t.Fatalf("%s %+v step %d: n=0 says RetryAfter %d, a request of 1 gets %+v", k, l, i, r.RetryAfter, one)
			}
			continue
		}
		if !r.Allowed && !(k == slog && l.LogRejected) {
			// Exact retry: refused a microsecond before, allowed at.
			if early := before.clone().take(k, l, now+r.RetryAfter-1, n); early.Allowed {
				t.Fatalf("%s %+v step %d: refused at %d with RetryAfter %d, but allowed a microsecond earlier", k, l, i, now, r.RetryAfter)
			}
			if on := before.clone().take(k, l, now+r.RetryAfter, n); !on.Allowed {
				t.Fatalf("%s %+v step %d: refused at %d with RetryAfter %d, and refused again then: %+v", k, l, i, now, r.RetryAfter, on)
			}
		}
		if r.Allowed {
			at := latest
			if k == slog {
				at = r.At // the log's own clock: its newest entry, or now
			}
			admitted = append(admitted, event{at: at, n: n, proceed: now + r.Delay})
		}
	}
	checkBound(t, k, l, admitted)
}

// checkBound checks the promise of each algorithm over every pair of
// admitted requests.
func checkBound(t *testing.T, k kind, l Limit, ev []event) {
	for i := range ev {
		sum := int64(0)
		for j := i; j < len(ev); j++ {
			sum += ev[j].n
			a, b := ev[i], ev[j]
			switch k {
			case meter:
				// In any interval, at most the burst plus what refilled.
				if limit := l.Burst + (b.at-a.at)*l.Rate/l.Period; sum > limit {
					t.Fatalf("%s %+v: %d admitted in [%d, %d], at most %d", k, l, sum, a.at, b.at, limit)
				}
			case debt:
				if limit := l.Burst + (b.proceed-a.proceed+1)*l.Rate/l.Period; b.proceed >= a.proceed && sum > limit {
					t.Fatalf("%s %+v: %d proceeded in [%d, %d], at most %d", k, l, sum, a.proceed, b.proceed, limit)
				}
			case queue:
				// Slots are spaced by the rate: the units before the last
				// one take their time.
				if span := b.proceed - a.proceed + 1; (sum-b.n)*l.Period > span*l.Rate {
					t.Fatalf("%s %+v: %d units proceeded in [%d, %d], faster than the rate", k, l, sum, a.proceed, b.proceed)
				}
			case fixed, sliding:
				if windowEnd(&l, a.at) == windowEnd(&l, b.at) && sum > l.Rate {
					t.Fatalf("%s %+v: %d admitted in one window (%d..%d, events %+v), at most %d", k, l, sum, a.at, b.at, ev[i:j+1], l.Rate)
				}
				if k == sliding && b.at-a.at < l.Period && sum > 2*l.Rate {
					t.Fatalf("%s %+v: %d admitted within one window length, more than twice the limit", k, l, sum)
				}
			case slog:
				if b.at-a.at <= l.Period && sum > l.Rate {
					t.Fatalf("%s %+v: %d admitted in a window [%d, %d] (events %+v), at most %d", k, l, sum, a.at, b.at, ev[i:j+1], l.Rate)
				}
			}
		}
	}
	if k == queue {
		// At every admission at most Burst units wait (the one whose slot
		// is now is not waiting).
		for i, e := range ev {
			waiting := int64(0)
			for _, f := range ev[:i+1] {
				if f.proceed > e.at {
					waiting += f.n
				}
			}
			if waiting > l.Burst+e.n-1 {
				t.Fatalf("%s %+v: %d units waiting at %d, at most %d", k, l, waiting, e.at, l.Burst)
			}
		}
	}
}

// TestApplyMatchesMeter compares Apply's way to meter one request, on
// the figures Params precomputes, with the general meter over random limits
// and states, many of them at the edge of refusal.
func TestApplyMatchesMeter(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200_000; i++ {
		l := Limit{Rate: 1 + rng.Int64N(1000), Period: 1 + rng.Int64N(10*second)}
		l.Burst = 1 + rng.Int64N(100)
		if rng.IntN(4) == 0 {
			l.Rate = 1 + rng.Int64N(3)
		}
		now := 1_700_000_000 * second
		full := l.Burst*l.Period/l.Rate + 2
		b := Bucket{Tail: now - full + rng.Int64N(2*full+2), Frac: rng.Int64N(l.Rate)}
		if rng.IntN(8) == 0 {
			b.Tail = now + rng.Int64N(1<<40) // a clock that went far back
		}
		p := l.prepared()
		got, want := b, b
		r := got.Apply(&p, Metered, now, 1)
		wr := want.meter(&p, now, 1)
		if r != wr || got != want {
			t.Fatalf("limit %+v, bucket %+v: Apply gives %+v, %+v; the general meter %+v, %+v", l, b, got, r, want, wr)
		}
	}
}
