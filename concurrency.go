package ratekeeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultLeaseTTL is a Concurrency's TTL when it sets none: how long a slot
// outlives the last sign of life of the instance holding it.
const DefaultLeaseTTL = 30 * time.Second

// DefaultRetryHint is a Concurrency's RetryAfter when it sets none.
const DefaultRetryHint = time.Second

// Concurrency says how many requests for one key may be in flight at once
// (nginx's limit_conn): a request takes a slot when it starts and gives it
// back when it ends. It is a plain value, like Limit.
//
// A slot is a lease: it expires TTL after it was taken or last refreshed, so
// that the slots of an instance that died come back by themselves. While a
// Permit is held, its ConcurrencyLimiter refreshes it every TTL/3.
type Concurrency struct {
	// Max is how many may be in flight per key.
	Max int
	// TTL is how long a slot lives without a refresh; zero means
	// DefaultLeaseTTL. It bounds what a crash costs: the dead instance's
	// slots stay taken for at most TTL.
	TTL time.Duration
	// RetryAfter is what a refusal tells the caller to wait before asking
	// again (Decision.RetryAfter). Acquire asks the store again that often
	// while it waits for a slot that another process may free. Zero means
	// DefaultRetryHint. No slot has a known end, so it is a hint, not a
	// promise.
	RetryAfter time.Duration
}

// ttl is c's TTL with its default.
func (c Concurrency) ttl() time.Duration {
	if c.TTL == 0 {
		return DefaultLeaseTTL
	}
	return c.TTL
}

// retry is c's RetryAfter with its default.
func (c Concurrency) retry() time.Duration {
	if c.RetryAfter == 0 {
		return DefaultRetryHint
	}
	return c.RetryAfter
}

// Validate reports what is wrong with c, or nil.
func (c Concurrency) Validate() error {
	if c.Max <= 0 {
		return fmt.Errorf("concurrency: max must be positive, not %d", c.Max)
	}
	if c.TTL < 0 || (c.TTL > 0 && c.TTL < 3*time.Millisecond) {
		return fmt.Errorf("concurrency: ttl must be at least 3ms (it is refreshed every third of it), not %v", c.TTL)
	}
	if c.TTL%time.Millisecond != 0 {
		return fmt.Errorf("concurrency: ttl %v is not a whole number of milliseconds", c.TTL)
	}
	if c.RetryAfter < 0 {
		return fmt.Errorf("concurrency: retry_after must not be negative, not %v", c.RetryAfter)
	}
	return nil
}

// String renders c as people write it: "concurrency 10 ttl 30s".
func (c Concurrency) String() string {
	return "concurrency " + strconv.Itoa(c.Max) + " ttl " + c.ttl().String()
}

// SlotRequest is one question a ConcurrencyLimiter puts to a
// ConcurrencyStore about one slot.
type SlotRequest struct {
	// Key identifies the client: the slots of one Key are counted together.
	Key string
	// ID names the slot, unique among every process's slots of Key.
	ID string
	// Max is how many slots Key may hold.
	Max int
	// TTL is how long the slot lives from Now without a refresh: positive,
	// a whole number of milliseconds.
	TTL time.Duration
	// Now is the instant to decide at; the zero Time means the store's own
	// clock.
	Now time.Time
}

// ConcurrencyStore is the interface for stores that can hold concurrency
// slots; a store need not implement it (NewConcurrencyLimiter then says
// so). The memory store, the Redis store and the failsafe store do. Every
// ConcurrencyStore makes the same decisions for the same requests at the
// same instants (package storetest's RunConcurrency checks it).
// Implementations are safe for concurrent use.
//
// A slot taken at t with TTL d is held while now < t+d; at t+d it is free
// again, unless it was refreshed before.
type ConcurrencyStore interface {
	// AcquireSlot drops Key's expired slots and takes slot ID if fewer than
	// Max are held. The Decision has Allowed, Limit (Max), Remaining (the
	// slots still free after it) and At; RetryAfter and ResetAfter are zero
	// (the ConcurrencyLimiter fills in its hint).
	AcquireSlot(ctx context.Context, req SlotRequest) (Decision, error)
	// RefreshSlot extends slot ID, which decision d granted, to Now+TTL,
	// and reports whether it was still held; a slot that had expired is
	// not taken again.
	RefreshSlot(ctx context.Context, req SlotRequest, d Decision) (bool, error)
	// ReleaseSlot frees slot ID, which decision d granted; freeing a slot
	// that is not held does nothing.
	ReleaseSlot(ctx context.Context, req SlotRequest, d Decision) error
}

// ErrNoSlots is wrapped by the error NewConcurrencyLimiter returns for a
// store that cannot hold concurrency slots.
var ErrNoSlots = errors.New("store does not hold concurrency slots (it is not a ratekeeper.ConcurrencyStore)")

// ConcurrencyLimiter applies one Concurrency to many keys, keeping their
// slots in a ConcurrencyStore. It is safe for concurrent use; its zero value
// is not usable: call NewConcurrencyLimiter.
//
// While permits are held, one goroutine of the limiter refreshes them every
// TTL/3; it ends when the last one is released (or lost), so a limiter
// needs no Close.
type ConcurrencyLimiter struct {
	config
	store ConcurrencyStore
	c     Concurrency
	ttl   time.Duration
	retry time.Duration

	idPrefix string // random, per limiter: slot IDs are unique across processes
	seq      atomic.Uint64

	mu      sync.Mutex
	held    map[*Permit]struct{} // the permits to refresh
	running bool                 // the refresher runs
	idle    chan struct{}        // tells the refresher that held may be empty
	freed   chan struct{}        // closed (and replaced) when a permit is released and waiters wait
	waiters int
}

// NewConcurrencyLimiter returns a ConcurrencyLimiter that applies c to keys
// whose slots are kept in store, which must be a ConcurrencyStore (the error
// wraps ErrNoSlots otherwise). WithClock sets the instant of every store
// call; the refreshes and Acquire's waits run on real timers.
func NewConcurrencyLimiter(store Store, c Concurrency, opts ...Option) (*ConcurrencyLimiter, error) {
	if store == nil {
		return nil, errors.New("ratekeeper: store is nil")
	}
	cs, ok := store.(ConcurrencyStore)
	if !ok {
		return nil, fmt.Errorf("ratekeeper: %T: %w", store, ErrNoSlots)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("ratekeeper: %w", err)
	}
	var cf config
	for _, o := range opts {
		o.apply(&cf)
	}
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand's contract since Go 1.24)
	return &ConcurrencyLimiter{
		config:   cf,
		store:    cs,
		c:        c,
		ttl:      c.ttl(),
		retry:    c.retry(),
		idPrefix: hex.EncodeToString(b[:]) + "-",
		held:     make(map[*Permit]struct{}),
		freed:    make(chan struct{}),
		idle:     make(chan struct{}, 1),
	}, nil
}

// Concurrency is the limit l applies.
func (l *ConcurrencyLimiter) Concurrency() Concurrency { return l.c }

// Permit is one slot held: release it with Release when the work ends.
// Its methods are safe for concurrent use; a nil *Permit's Release does
// nothing, so a caller may defer it before looking at the decision.
type Permit struct {
	l        *ConcurrencyLimiter
	req      SlotRequest
	d        Decision
	released atomic.Bool
	lost     atomic.Bool
}

// Decision is the decision that granted p.
func (p *Permit) Decision() Decision { return p.d }

// Lost reports whether p's slot expired while it was held: a refresh found
// it gone (the store was unreachable for longer than the TTL, or lost its
// data). The slot is not taken again; the work runs on uncounted.
func (p *Permit) Lost() bool { return p.lost.Load() }

// Release gives p's slot back. Only the first call does anything; later
// ones, and a nil p's, return nil. If the store cannot be reached, the
// error is returned and the slot comes back when its lease expires, at
// most TTL later. Release uses ctx without its cancellation, so that a
// request's finished context still frees its slot.
func (p *Permit) Release(ctx context.Context) error {
	if p == nil || !p.released.CompareAndSwap(false, true) {
		return nil
	}
	l := p.l
	l.forget(p)
	req := p.req
	req.Now = now(l.clock)
	err := l.store.ReleaseSlot(context.WithoutCancel(ctx), req, p.d)
	l.wake()
	if err != nil {
		return fmt.Errorf("ratekeeper: release slot of %q: %w", req.Key, err)
	}
	return nil
}

// TryAcquire takes a slot for key if one is free, and never waits. When
// refused, the Permit is nil and the Decision has Allowed false and
// RetryAfter the limit's hint. An error means the store failed.
func (l *ConcurrencyLimiter) TryAcquire(ctx context.Context, key string) (*Permit, Decision, error) {
	req := SlotRequest{
		Key: key,
		ID:  l.idPrefix + strconv.FormatUint(l.seq.Add(1), 36),
		Max: l.c.Max,
		TTL: l.ttl,
		Now: now(l.clock),
	}
	d, err := l.store.AcquireSlot(ctx, req)
	if err != nil {
		return nil, Decision{}, fmt.Errorf("ratekeeper: acquire slot of %q: %w", key, err)
	}
	if !d.Allowed {
		if d.RetryAfter == 0 {
			d.RetryAfter = l.retry
		}
		return nil, d, nil
	}
	d.RetryAfter = 0
	p := &Permit{l: l, req: req, d: d}
	l.mu.Lock()
	l.held[p] = struct{}{}
	if !l.running {
		l.running = true
		go l.refresh()
	}
	l.mu.Unlock()
	return p, d, nil
}

// Acquire takes a slot for key, waiting until one is free or ctx is done
// (then it returns ctx's error). It asks again as soon as a permit of this
// limiter is released, and every RetryAfter for slots freed elsewhere
// (another process, an expired lease). Waiters are not queued: when a slot
// frees, whichever asks first gets it.
func (l *ConcurrencyLimiter) Acquire(ctx context.Context, key string) (*Permit, Decision, error) {
	var t *time.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return nil, Decision{}, err
		}
		l.mu.Lock()
		l.waiters++
		freed := l.freed // taken before asking: a release after the refusal wakes us
		l.mu.Unlock()
		p, d, err := l.TryAcquire(ctx, key)
		if err != nil || d.Allowed {
			l.unwait()
			return p, d, err
		}
		if t == nil {
			t = time.NewTimer(l.retry)
		} else {
			t.Reset(l.retry)
		}
		select {
		case <-ctx.Done():
			l.unwait()
			return nil, Decision{}, ctx.Err()
		case <-freed:
		case <-t.C:
		}
		l.unwait()
	}
}

func (l *ConcurrencyLimiter) unwait() {
	l.mu.Lock()
	l.waiters--
	l.mu.Unlock()
}

// wake tells Acquire's waiters that a slot was freed.
func (l *ConcurrencyLimiter) wake() {
	l.mu.Lock()
	if l.waiters > 0 {
		close(l.freed)
		l.freed = make(chan struct{})
	}
	l.mu.Unlock()
}

// refresh extends every held permit's lease each TTL/3, until none is held.
func (l *ConcurrencyLimiter) refresh() {
	every := l.ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	var batch []*Permit
	for {
		var tick bool
		select {
		case <-t.C:
			tick = true
		case <-l.idle:
		}
		l.mu.Lock()
		if len(l.held) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		if !tick {
			l.mu.Unlock()
			continue
		}
		batch = batch[:0]
		for p := range l.held {
			batch = append(batch, p)
		}
		l.mu.Unlock()
		for _, p := range batch {
			l.refreshOne(p, every)
		}
	}
}

func (l *ConcurrencyLimiter) refreshOne(p *Permit, within time.Duration) {
	if p.released.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req := p.req
	req.Now = now(l.clock)
	ok, err := l.store.RefreshSlot(ctx, req, p.d)
	if err != nil {
		return // the next tick tries again; the lease outlives two misses
	}
	if !ok {
		p.lost.Store(true)
		l.forget(p)
	}
}

// forget stops refreshing p, and the refresher with the last permit.
func (l *ConcurrencyLimiter) forget(p *Permit) {
	l.mu.Lock()
	delete(l.held, p)
	empty := len(l.held) == 0 && l.running
	l.mu.Unlock()
	if empty {
		select {
		case l.idle <- struct{}{}:
		default: // already told
		}
	}
}
