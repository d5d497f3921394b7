package ratekeeper

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrCost is wrapped by the error a Limiter returns for a cost it can never
// allow: more than the limit's capacity, or negative.
var ErrCost = errors.New("cost out of range")

// Limiter applies one Limit to many keys, keeping their state in a Store.
// It is safe for concurrent use; its zero value is not usable: call New.
type Limiter struct {
	config
	store    Store
	bound    BoundStore // store bound to limit and clock: every decision goes here
	limit    Limit
	capacity int // limit.Capacity(), computed once
}

// config is what the options set.
type config struct {
	clock Clock // nil: the store's clock
}

// Option configures a Limiter.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithClock makes the Limiter decide at c.Now() instead of at the store's
// own clock. Tests use it to run timelines on a fake clock; in production the
// default is better for the Redis store, whose server clock all instances
// share.
func WithClock(c Clock) Option {
	return optionFunc(func(cf *config) { cf.clock = c })
}

// New returns a Limiter that applies limit to keys kept in store.
func New(store Store, limit Limit, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, errors.New("ratekeeper: store is nil")
	}
	if err := limit.Validate(); err != nil {
		return nil, fmt.Errorf("ratekeeper: %w", err)
	}
	var c config // every default is the zero value
	for _, o := range opts {
		o.apply(&c)
	}
	l := &Limiter{config: c, store: store, limit: limit, capacity: limit.Capacity()}
	if b, ok := store.(Binder); ok {
		l.bound = b.Bind(limit, l.clock)
	} else {
		l.bound = unbound{store, limit, l.clock}
	}
	return l, nil
}

// unbound is a store that is not a Binder bound to a limit and a clock:
// every decision goes to its Take.
type unbound struct {
	store Store
	limit Limit
	clock Clock
}

func (u unbound) Take(ctx context.Context, r BoundRequest) (Decision, error) {
	return u.store.Take(ctx, Request{Key: r.Key, Limit: u.limit, N: r.N, Reserve: r.Reserve, Now: now(u.clock)})
}

// now is c's time, or zero (the store's clock) when c is nil.
func now(c Clock) time.Time {
	if c == nil {
		return time.Time{}
	}
	return c.Now()
}

// Limit is the limit l applies.
func (l *Limiter) Limit() Limit { return l.limit }

func (l *Limiter) costError(n int) error {
	return fmt.Errorf("ratekeeper: cost %d for %s: at most %d can ever pass at once: %w",
		n, l.limit, l.capacity, ErrCost)
}

// check refuses a cost that can never pass: every call of l starts here.
func (l *Limiter) check(n int) error {
	if uint(n) > uint(l.capacity) {
		return l.costError(n)
	}
	return nil
}

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.take(ctx, key, 1, false)
}

// AllowN decides now whether n requests for key may pass, and takes them if
// so. It never waits: for the leaky bucket it is the meter. With n == 0 it
// reports the state without taking anything: allowed, with RetryAfter the
// wait until one unit would be (see Peek). A cost n above the limit's
// capacity is an error wrapping ErrCost.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	return l.take(ctx, key, n, false)
}

// Peek reports key's state without taking anything. Remaining and
// ResetAfter are as AllowN(ctx, key, 0) reports them. Allowed says whether
// a request of cost 1 would be allowed now and, if not, RetryAfter is the
// least wait until it would. It asks as Allow does (a leaky bucket's
// meter, not its queue).
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	d, err := l.take(ctx, key, 0, false)
	if err != nil {
		return d, err
	}
	// A store answers n == 0 as allowed, with the wait for one unit; a
	// failure policy that refuses (failsafe's Deny) answers refused.
	d.Allowed = d.Allowed && d.RetryAfter == 0
	return d, nil
}

// Reset forgets key's state for l's limit, so that its next request starts
// fresh: the store must be a Resetter, else the error wraps ErrNoReset.
// See each store for what a reset reaches (the Redis store's other
// instances keep local state until they next sync).
func (l *Limiter) Reset(ctx context.Context, key string) error {
	r, ok := l.store.(Resetter)
	if !ok {
		return fmt.Errorf("ratekeeper: reset %q: %T: %w", key, l.store, ErrNoReset)
	}
	return r.Reset(ctx, key, l.limit)
}

// take is every decision of l: AllowN and ReserveN.
func (l *Limiter) take(ctx context.Context, key string, n int, reserve bool) (Decision, error) {
	if err := l.check(n); err != nil {
		return Decision{}, err
	}
	return l.bound.Take(ctx, BoundRequest{Key: key, N: n, Reserve: reserve})
}

// Reserve is ReserveN(ctx, key, 1).
func (l *Limiter) Reserve(ctx context.Context, key string) (Decision, error) {
	return l.take(ctx, key, 1, true)
}

// ReserveN takes a place for n requests now and says in Decision.Delay how
// long to wait before proceeding:
//
//   - leaky bucket: the FIFO queue. The request gets the next free slot; it is
//     refused (Allowed false, RetryAfter until there is room) when more than
//     Burst requests would be waiting.
//   - token bucket: the wait for enough tokens. It takes them now, on credit,
//     and never refuses. Bound the wait with Wait's context deadline.
//   - window algorithms: no place can be held in a future window, so ReserveN
//     decides as AllowN does, with Delay zero. A refused request retries
//     after RetryAfter (which is what Wait does).
//
// A caller that does not proceed should give its place back with Cancel.
func (l *Limiter) ReserveN(ctx context.Context, key string, n int) (Decision, error) {
	return l.take(ctx, key, n, true)
}

// Refund gives back what an allowed decision d of AllowN(ctx, key, n) took,
// as far as the algorithm allows. Tokens return to the token bucket; water
// drains from the leaky bucket's meter; a window counter is decremented if
// that window still counts; a log entry is removed.
func (l *Limiter) Refund(ctx context.Context, key string, n int, d Decision) error {
	return l.refund(ctx, key, n, d, false)
}

// Cancel gives back the place that an allowed decision d of
// ReserveN(ctx, key, n) took. A leaky bucket's queue slots are freed if no
// later request queued behind them. Otherwise they stay an idle gap, so
// that the queue never sends two requests in one slot. The other
// algorithms refund as Refund does.
func (l *Limiter) Cancel(ctx context.Context, key string, n int, d Decision) error {
	return l.refund(ctx, key, n, d, true)
}

func (l *Limiter) refund(ctx context.Context, key string, n int, d Decision, reserved bool) error {
	if !d.Allowed || n == 0 {
		return nil
	}
	if err := l.check(n); err != nil {
		return err
	}
	return l.store.Refund(ctx, Request{Key: key, Limit: l.limit, N: n, Reserve: reserved, Now: now(l.clock)}, d)
}

// Wait is WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until n requests for key may proceed, for every algorithm, so
// that a worker pacing itself loses nothing. It reserves (ReserveN) and
// sleeps out the delay; when refused (a full queue, a spent window) it sleeps
// until RetryAfter and asks again.
//
// It returns ctx's error promptly when ctx is done, giving its place back
// where the algorithm allows. If ctx has a deadline that the wait would pass,
// it returns at once with an error wrapping context.DeadlineExceeded.
//
// WaitN sleeps on real timers (the Limiter's Clock only tells the time);
// tests make them fake with testing/synctest.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := l.ReserveN(ctx, key, n)
		if err != nil {
			return err
		}
		wait := d.Delay
		if !d.Allowed {
			wait = max(d.RetryAfter, time.Microsecond)
		}
		if wait == 0 {
			return nil
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			l.giveBack(ctx, key, n, d)
			return fmt.Errorf("ratekeeper: waiting %v for %q would pass the context's deadline: %w", wait, key, context.DeadlineExceeded)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			l.giveBack(ctx, key, n, d)
			return ctx.Err()
		case <-t.C:
		}
		if d.Allowed {
			return nil
		}
	}
}

func (l *Limiter) giveBack(ctx context.Context, key string, n int, d Decision) {
	if d.Allowed {
		// The caller's context is done; the refund must still reach the store.
		_ = l.Cancel(context.WithoutCancel(ctx), key, n, d)
	}
}
