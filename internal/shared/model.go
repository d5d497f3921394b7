package shared

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// Model is a shared store in memory that behaves as the Redis store's
// scripts do, for the engine's simulations and as the reference the Redis
// scripts are tested against. Each call takes Latency (half before the
// state is touched, half after) and fails while Down is set. It decides
// the fixed window, the sliding window counter and the buckets' meter.
type Model struct {
	// Latency is each call's round trip.
	Latency time.Duration
	// Down makes every call fail.
	Down atomic.Bool

	mu     sync.Mutex
	states map[entryKey]State
	calls  atomic.Int64
}

// NewModel returns an empty Model.
func NewModel() *Model { return &Model{states: make(map[entryKey]State)} }

// Calls is how many calls the model answered or failed.
func (m *Model) Calls() int64 { return m.calls.Load() }

// ErrDown is what a Model answers while Down.
var ErrDown = errors.New("model: down")

// call runs f on the states between the two halves of the latency.
func (m *Model) call(ctx context.Context, f func()) error {
	m.calls.Add(1)
	if err := m.sleep(ctx); err != nil {
		return err
	}
	if m.Down.Load() {
		return ErrDown
	}
	m.mu.Lock()
	f()
	m.mu.Unlock()
	return m.sleep(ctx)
}

func (m *Model) sleep(ctx context.Context) error {
	if m.Latency <= 0 {
		return nil
	}
	t := time.NewTimer(m.Latency / 2)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func modelNow(given int64) int64 {
	if given != 0 {
		return given
	}
	return time.Now().UnixMicro()
}

// Decide applies a decision of n at now to st: the algorithms' Allow.
func Decide(st State, l ratekeeper.Limit, p *algo.Limit, now, n int64) (State, algo.Result) {
	var r algo.Result
	switch l.Algorithm {
	case ratekeeper.FixedWindow:
		st.Window, r = st.Window.Fixed(p, now, n)
	case ratekeeper.SlidingWindow:
		st.Sliding, r = st.Sliding.SlidingWindow(p, now, n)
	default:
		r = st.Bucket.Apply(p, algo.Metered, now, n)
	}
	return st, r
}

// AddTo is the remote's Add on one state.
func AddTo(st State, l ratekeeper.Limit, p *algo.Limit, now, at, n int64) (State, bool) {
	var ok bool
	switch l.Algorithm {
	case ratekeeper.FixedWindow:
		st.Window, ok = st.Window.Add(p, now, at, n)
	case ratekeeper.SlidingWindow:
		st.Sliding, ok = st.Sliding.Add(p, now, at, n)
	default:
		st.Bucket, ok = st.Bucket.Add(p, now, at, n)
	}
	return st, ok
}

// LeaseFrom is the remote's Lease on one state. It grants g units: the
// most of want, what remains and half of what remains (rounded up) that
// fit. If that is fewer than least, it grants nothing and returns how long
// until least would fit.
func LeaseFrom(st State, l ratekeeper.Limit, p *algo.Limit, now, want, least int64) (State, int64, int64) {
	rolled, peek := Decide(st, l, p, now, 0)
	rem := peek.Remaining
	g := min(want, rem, max(least, (rem+1)/2))
	for ; g >= least && g > 0; g-- {
		if next, r := Decide(st, l, p, now, g); r.Allowed {
			return next, g, 0
		}
	}
	_, r := Decide(st, l, p, now, least)
	return rolled, 0, max(r.RetryAfter, 1)
}

// Take decides req exactly.
func (m *Model) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	var r algo.Result
	err := m.call(ctx, func() {
		k := entryKey{req.Key, req.Limit.Algorithm}
		st := m.states[k]
		var given int64
		if !req.Now.IsZero() {
			given = req.Now.UnixMicro()
		}
		st, r = Decide(st, req.Limit, params(req.Key, req.Limit), modelNow(given), int64(req.N))
		m.states[k] = st
	})
	if err != nil {
		return ratekeeper.Decision{}, err
	}
	return algo.Decision(r), nil
}

// Refund gives back what d took.
func (m *Model) Refund(ctx context.Context, req ratekeeper.Request, d ratekeeper.Decision) error {
	return m.call(ctx, func() {
		k := entryKey{req.Key, req.Limit.Algorithm}
		p := params(req.Key, req.Limit)
		st := m.states[k]
		at := d.At.UnixMicro()
		switch req.Limit.Algorithm {
		case ratekeeper.FixedWindow:
			st.Window = st.Window.Refund(p, int64(req.N), at)
		case ratekeeper.SlidingWindow:
			st.Sliding = st.Sliding.Refund(p, int64(req.N), at)
		default:
			st.Bucket = st.Bucket.Refund(p, int64(req.N), false, 0)
		}
		m.states[k] = st
	})
}

// Add implements Remote.
func (m *Model) Add(ctx context.Context, items []Item) error {
	return m.call(ctx, func() {
		for i := range items {
			it := &items[i]
			k := entryKey{it.Key, it.Limit.Algorithm}
			now := modelNow(it.Now)
			at := it.At
			if it.N == 0 {
				at = now // a read
			}
			st, ok := AddTo(m.states[k], it.Limit, params(it.Key, it.Limit), now, at, it.N)
			m.states[k] = st
			it.Now, it.State, it.Dropped = now, st, !ok
		}
	})
}

// Lease implements Remote.
func (m *Model) Lease(ctx context.Context, items []Item) error {
	return m.call(ctx, func() {
		for i := range items {
			it := &items[i]
			k := entryKey{it.Key, it.Limit.Algorithm}
			now := modelNow(it.Now)
			st, g, retry := LeaseFrom(m.states[k], it.Limit, params(it.Key, it.Limit), now, it.N, it.Min)
			m.states[k] = st
			it.Now, it.State, it.Granted, it.Retry = now, st, g, retry
		}
	})
}

// State is the model's state of key under limit l.
func (m *Model) State(key string, l ratekeeper.Limit) State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.states[entryKey{key, l.Algorithm}]
}

// OverBy replays requests admitted at the instants ats (µs, in order)
// through the algorithm of l with its limit raised by x: the rate for the
// window counters, the capacity for the buckets. It returns the index of
// the first it would refuse, or -1 if the admissions were within the
// limit plus x, by the algorithm's own definition.
func OverBy(l ratekeeper.Limit, x int, ats []int64) int {
	switch l.Algorithm {
	case ratekeeper.FixedWindow, ratekeeper.SlidingWindow:
		l.Rate += x
	default:
		l.Burst = l.Capacity() + x
	}
	p := params("", l)
	var st State
	for i, at := range ats {
		var r algo.Result
		if st, r = Decide(st, l, p, at, 1); !r.Allowed {
			return i
		}
	}
	return -1
}

// Excess is the least x for which OverBy(l, x, ats) finds none over: how
// far past the limit the admissions went.
func Excess(l ratekeeper.Limit, ats []int64) int {
	lo, hi := 0, len(ats)
	for lo < hi {
		mid := (lo + hi) / 2
		if OverBy(l, mid, ats) < 0 {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// params is algo.Params by pointer, for the algorithms' methods.
func params(key string, l ratekeeper.Limit) *algo.Limit {
	p := algo.Params(key, l)
	return &p
}
