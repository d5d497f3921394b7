// Package shared decides shared limits at local speed. It sits between the
// callers of one instance and a store that many instances share (Redis),
// and answers from local memory in one of three modes.
//
//   - Exact: every decision is the shared store's. Only refusals are
//     remembered (the denial cache): a key refused with retry-after R is
//     refused locally, for the same cost, until R has passed.
//   - Sync: the instance decides from the last shared state it read plus what
//     it admitted since. Every sync period, and sooner once a key's unsent
//     count passes a share of its limit, it sends each touched key's count
//     and reads back the shared state, all in one batched call.
//     Over-admission is bounded (docs/redis.md derives the bound). No
//     admission is lost on an error; a refund may be, since sent again it
//     could give back twice.
//   - Lease: the instance takes a share of the remaining quota from the
//     shared store atomically and admits locally from it, so it never admits
//     more than the limit; it may refuse while other instances hold unused
//     leases.
//
// Sync and lease apply to the fixed window, the sliding window counter, the
// token bucket and the leaky bucket's meter. The sliding log and a
// reservation (the leaky bucket's queue, the token bucket's debt) are always
// decided by the shared store.
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

// Mode is how a shared store's limits are decided.
type Mode uint8

const (
	Exact Mode = iota // every decision in the shared store
	Sync              // local counts, synced every period
	Lease             // local admission from leased quota
)

// String is the mode's name in configuration files.
func (m Mode) String() string {
	switch m {
	case Sync:
		return "sync"
	case Lease:
		return "lease"
	}
	return "exact"
}

// ParseMode reads a mode's name; "" is Exact.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "exact":
		return Exact, nil
	case "sync":
		return Sync, nil
	case "lease":
		return Lease, nil
	}
	return Exact, errors.New("is not exact, sync or lease")
}

// Local reports whether a request for limit l is decided locally in sync
// and lease modes.
func Local(l ratekeeper.Limit, reserve bool) bool {
	switch l.Algorithm {
	case ratekeeper.FixedWindow, ratekeeper.SlidingWindow:
		return true
	case ratekeeper.TokenBucket, ratekeeper.LeakyBucket:
		return !reserve
	}
	return false
}

// State is a key's shared state, in the field of its algorithm.
type State struct {
	Window  algo.Window
	Sliding algo.Sliding
	Bucket  algo.Bucket
}

// Item is one key's part of a call to a Remote. The caller fills Key,
// Limit, N, At and Min; the Remote fills the rest.
type Item struct {
	Key   string
	Limit ratekeeper.Limit
	// Add: the count to add (negative to give back; zero reads). Lease: the
	// most to grant.
	N int64
	// Add: the instant, in the remote's µs, at which the count was
	// admitted. Lease: unused.
	At int64
	// Lease: the least to grant; fewer grants nothing.
	Min int64

	// Now is the remote's clock when it ran the item, in µs.
	Now int64
	// State is the key's state after the item.
	State State
	// Dropped: Add's count belonged to a window that has ended.
	Dropped bool
	// Granted is what Lease granted: 0, or between Min and N.
	Granted int64
	// Retry is, when Lease granted nothing, how long until Min could be.
	Retry int64
	// Err is the item's own error, if the call as a whole succeeded.
	Err error
}

// Remote is the shared store as the engine needs it: a ratekeeper.Store
// for the exact decisions, and two batched calls. Items of one call on
// the same key run in order.
type Remote interface {
	ratekeeper.Store
	// Add adds each item's count, admitted at its instant, to its key,
	// whatever the limit (the instances admitted them already), and reads
	// back the key's state.
	Add(ctx context.Context, items []Item) error
	// Lease takes from each key, atomically, as many units as fit, at most
	// N and at most half of what remains. If that is fewer than Min, it
	// takes nothing and says how long until Min would fit.
	Lease(ctx context.Context, items []Item) error
}

// Defaults.
const (
	DefaultPeriod = 100 * time.Millisecond
	// staleAfter periods without an answer from the remote, decisions stop
	// trusting what the instance knows and fail, so that the store's
	// failure policy decides.
	staleAfter = 10
	// minStale is the least time a sync-mode instance decides from what it
	// knows while the remote does not answer.
	minStale = time.Second
	// maxKeys bounds the keys held; a new key past it is decided by the
	// remote.
	maxKeys = 1 << 20
)

// Stats are the engine's counters since New.
type Stats struct {
	Syncs          uint64 // Add calls made
	SyncErrors     uint64 // Add calls that failed
	Leases         uint64 // Lease calls made
	GiveBacks      uint64 // calls that gave back unused leases
	LeaseErrors    uint64 // Lease calls that failed
	Dropped        uint64 // requests admitted whose count was dropped: its window ended before the remote heard of it
	DenialHits     uint64 // refusals answered by the denial cache
	LocalDecisions uint64 // decisions made without a remote call
	MaxRoundTrip   int64  // the slowest answered call to the remote, µs
	MaxUnsent      int64  // the longest an admitted count waited to be sent (sync mode), µs
	MaxStale       int64  // the oldest shared state a local decision used, from its reply, µs (sync mode)
}

// Store decides through a Remote in one of the modes. It is a
// ratekeeper.Store, safe for concurrent use; Close stops its sync loop and
// gives back unused leases.
type Store struct {
	remote Remote
	mode   Mode
	period time.Duration
	clock  ratekeeper.Clock // nil: the system clock
	stale  time.Duration
	// noDenials turns the denial cache off.
	noDenials bool
	// noLoop: no goroutine; the caller calls Flush every period, and an
	// early sync runs in the decision that asks for it.
	noLoop bool
	// part names the servers that hold a request's key, or nil (WithParts).
	part func(ratekeeper.Request) string

	entries sync.Map // entryKey → *entry; read without a lock on every decision
	nkeys   atomic.Int64
	offset  atomic.Int64 // remote µs minus local µs, learned from answers
	learned atomic.Bool  // offset was learned from an answer
	latest  atomic.Int64 // the latest estimate now returned, once learned
	rtt     atomic.Int64 // the last lease call's round trip, µs
	// given is the last instant a request carried (a Limiter on a fake
	// clock): the loop's syncs then run at it, not at the remote's clock.
	given atomic.Int64
	// modes holds the limits decided in a mode other than the store's.
	// Keyed by value (algo.KeyOf): a reload's limits hold new time zones.
	modes atomic.Pointer[map[algo.LimitKey]Mode]

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
	once sync.Once
	// parts counts the loop's syncs of parts still out (loop.go,
	// syncParts).
	parts sync.WaitGroup

	syncs, syncErrs, leases, leaseErrs, dropped, denials, locals atomic.Uint64
	givebacks                                                    atomic.Uint64
	maxRTT                                                       atomic.Int64
	maxUnsent, maxStale                                          atomic.Int64

	clockMu sync.Mutex
	best    clockSample // the answer whose offset the estimate uses
}

type entryKey struct {
	key string
	alg ratekeeper.Algorithm
}

// Option configures a Store.
type Option func(*Store)

// WithoutDenialCache turns the denial cache off.
func WithoutDenialCache() Option { return func(s *Store) { s.noDenials = true } }

// WithClock reads local time from c (default: the system clock).
func WithClock(c ratekeeper.Clock) Option { return func(s *Store) { s.clock = c } }

// WithoutLoop starts no goroutine: the caller calls Flush once every
// period, and a sync asked for early (a key's unsent count past an eighth
// of its limit) runs within the decision that asks for it. It is how a
// simulator on a virtual clock drives the store deterministically.
func WithoutLoop() Option { return func(s *Store) { s.noLoop = true } }

// WithParts says that the remote's keys live on servers that fail apart,
// and part names the servers that hold a request's key ("" if not known).
// The loop then syncs each part's keys in a call of their own, at once, so
// that a dead server holds up only its own keys.
func WithParts(part func(ratekeeper.Request) string) Option {
	return func(s *Store) { s.part = part }
}

// New returns a Store deciding through remote in mode, syncing every period
// (DefaultPeriod if zero or less) from a goroutine of its own, unless
// WithoutLoop. (In Exact mode the loop only forgets idle keys.)
func New(remote Remote, mode Mode, period time.Duration, opts ...Option) *Store {
	if period <= 0 {
		period = DefaultPeriod
	}
	s := &Store{remote: remote, mode: mode, period: period,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.stale = max(minStale, staleAfter*period)
	for _, o := range opts {
		o(s)
	}
	if !s.noLoop {
		go s.loop()
	}
	return s
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{Syncs: s.syncs.Load(), SyncErrors: s.syncErrs.Load(), Leases: s.leases.Load(), LeaseErrors: s.leaseErrs.Load(), GiveBacks: s.givebacks.Load(),
		Dropped: s.dropped.Load(), DenialHits: s.denials.Load(), LocalDecisions: s.locals.Load(), MaxRoundTrip: s.maxRTT.Load(),
		MaxUnsent: s.maxUnsent.Load(), MaxStale: s.maxStale.Load()}
}

// Mode is the store's mode.
func (s *Store) Mode() Mode { return s.mode }

// SetLimitModes decides the limits in m in their own mode rather than the
// store's. A key keeps the mode it was first decided in while its entry
// lives (until it has been idle for ten periods). A change so applies to
// keys as they go idle; the commands read rules' store modes at start.
func (s *Store) SetLimitModes(m map[ratekeeper.Limit]Mode) {
	c := make(map[algo.LimitKey]Mode, len(m))
	for l, mode := range m {
		c[algo.KeyOf(l)] = mode
	}
	s.modes.Store(&c)
}

// Decides reports whether the store decides req locally (a sync or lease
// mode and an algorithm those modes decide), rather than asking the
// remote through the denial cache.
func (s *Store) Decides(req ratekeeper.Request) bool {
	mode := s.modeFor(req.Limit)
	return mode != Exact && Local(req.Limit, req.Reserve) && !(mode == Lease && req.N == 0)
}

// Keep is how long the remote must keep a key of limit l after its state
// is back to fresh. Sync mode sends a bucket's counts at the instants they
// were admitted, up to the stale bound late. Forgotten sooner, a late count
// lands on an empty bucket, and the water it stacked on is lost.
func (s *Store) Keep(l ratekeeper.Limit) time.Duration {
	if s.modeFor(l) != Sync || (l.Algorithm != ratekeeper.TokenBucket && l.Algorithm != ratekeeper.LeakyBucket) {
		return 0
	}
	return s.stale
}

// modeFor is the mode limit l is decided in.
func (s *Store) modeFor(l ratekeeper.Limit) Mode {
	if m := s.modes.Load(); m != nil && len(*m) > 0 {
		if mode, ok := (*m)[algo.KeyOf(l)]; ok {
			return mode
		}
	}
	return s.mode
}

// Close sends what is unsent and gives back unused leases (each call
// bounded by max(period, 1s)), then stops the loop. The remote stays
// open: it is the caller's.
func (s *Store) Close() error {
	s.once.Do(func() {
		if s.noLoop {
			s.flush(true)
			return
		}
		close(s.stop)
		<-s.done
	})
	return nil
}

// Flush does one sync period's work now, as the loop does every period.
// In sync mode it sends each touched key's unsent count and reads back its
// shared state. In lease mode it gives back the quota of keys unused for a
// period. In every mode it forgets keys idle for long. A Store made
// WithoutLoop needs its caller to call it.
func (s *Store) Flush() { s.flush(false) }

// localMicros is the local clock in µs.
func (s *Store) localMicros() int64 {
	if s.clock != nil {
		return s.clock.Now().UnixMicro()
	}
	return time.Now().UnixMicro()
}

// now is the remote's clock as the instance estimates it, in µs. Once an
// offset is learned, the estimate does not go back by less than a call's
// bound (maxBack): it holds at the latest instant returned until the clock
// catches up. An offset learned again may be a little lower (a sample with
// a slower round trip, a failover to a server whose clock is a little
// behind). Decided at an earlier instant, a bucket would read the water of
// requests admitted after it, one unit low. A larger step back is the
// remote's clock changing: it is followed.
func (s *Store) now() int64 {
	learned := s.learned.Load() // before the offset, which learn stores first
	t := s.localMicros() + s.offset.Load()
	if !learned {
		return t
	}
	for {
		last := s.latest.Load()
		if t <= last && last-t <= s.maxBack() {
			return last
		}
		if s.latest.CompareAndSwap(last, t) {
			return t
		}
	}
}

// maxBack is the most the estimate of the remote's clock holds back, in
// µs: a call's bound, max(period, 1s), which bounds a round trip and so
// the error of an offset learned from it.
func (s *Store) maxBack() int64 { return max(s.period, time.Second).Microseconds() }

// clockAge is how long the offset of one answer is kept when no answer
// with a shorter round trip comes: clocks drift apart slowly.
const clockAge = 10 * time.Second

// clockSample is the offset one answer gave, its round trip (twice the
// offset's error, at most) and its local instant, µs.
type clockSample struct{ offset, rtt, at int64 }

// learn updates the clock offset from an answer sent at local instant sent
// and received at recv, stamped remote by the remote. It keeps the offset
// of the answer with the shortest round trip of the last clockAge. Under
// load a call waits on either side of the stamp, and its offset is off by
// up to half its round trip. An answer whose offset cannot agree with the
// kept one (further apart than their errors allow) means the remote's
// clock changed: its offset is taken.
func (s *Store) learn(sent, recv, remote int64) {
	smp := clockSample{offset: remote - (sent+recv)/2, rtt: recv - sent, at: recv}
	s.clockMu.Lock()
	defer s.clockMu.Unlock()
	b := s.best
	apart := smp.offset - b.offset
	if apart < 0 {
		apart = -apart
	}
	const slack = 1000 // µs: the stamps' rounding and drift
	if !s.learned.Load() || smp.rtt <= b.rtt || recv-b.at > clockAge.Microseconds() || apart > (smp.rtt+b.rtt)/2+slack {
		s.best = smp
		s.offset.Store(smp.offset)
	}
	s.learned.Store(true)
}

// roundTrip records an answered call's round trip.
func (s *Store) roundTrip(sent, recv int64) {
	d := recv - sent
	for {
		m := s.maxRTT.Load()
		if d <= m || s.maxRTT.CompareAndSwap(m, d) {
			return
		}
	}
}

// ErrTimeout is the cause (context.Cause) of a call's context whose
// deadline is the store's own bound on the call, not its caller's. That
// bound is the failsafe store's timeout, which the Redis store gives its
// context in TakeBy, or the loop's. A sync that ran out of it went
// unanswered. One whose caller's own context ended first (a client that
// hung up, a gRPC deadline shorter than a round trip) says nothing of the
// remote.
var ErrTimeout = errors.New("shared store: the store's time for the call ran out")

// errStale is returned once the remote has not answered for too long: the
// caller's failure policy decides.
var errStale = errors.New("shared store: no answer from the remote for too long to decide locally")

// errFull is returned for a new key when the engine holds maxKeys.
var errFull = errors.New("shared store: too many keys held locally")

// Take decides req: locally when the mode and the limit allow, else by the
// remote, answering refusals from the denial cache when it can.
func (s *Store) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	mode := s.modeFor(req.Limit)
	if mode == Exact || !Local(req.Limit, req.Reserve) || (mode == Lease && req.N == 0) {
		return s.exact(ctx, req)
	}
	e, err := s.locked(req, mode)
	if err != nil {
		return s.exact(ctx, req)
	}
	switch e.mode {
	case Sync:
		return s.takeSync(ctx, e, req)
	case Lease:
		return s.takeLease(ctx, e, req)
	}
	e.mu.Unlock() // cannot happen: an exact entry takes the mode it is asked for
	return s.exact(ctx, req)
}

// exact asks the remote, through the denial cache.
func (s *Store) exact(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	at := s.CacheNow(req)
	if d, hit := s.Denied(req, at); hit {
		return d, nil
	}
	d, err := s.remote.Take(ctx, req)
	if err == nil {
		s.Decided(req, d, at)
	}
	return d, err
}

// CacheNow is the instant the denial cache reads for req: the request's
// own, or the local clock. A refusal is remembered from the instant its
// request was sent, before the remote decided it, so that it never
// outlasts the remote's retry-after, whatever the clocks' offset.
func (s *Store) CacheNow(req ratekeeper.Request) int64 {
	if !req.Now.IsZero() {
		return req.Now.UnixMicro()
	}
	return s.localMicros()
}

// Denied answers req from the denial cache at instant at (CacheNow), for
// a caller that asks the remote itself when it misses (and then tells
// Decided).
func (s *Store) Denied(req ratekeeper.Request, at int64) (ratekeeper.Decision, bool) {
	if req.Reserve || req.N <= 0 || s.noDenials || s.nkeys.Load() == 0 {
		// No key is held (in exact mode, none was refused lately): the
		// common case costs no lookup.
		return ratekeeper.Decision{}, false
	}
	e, _ := s.entry(req, false, Exact)
	if e == nil {
		return ratekeeper.Decision{}, false
	}
	e.mu.Lock()
	d, hit := e.denied(req, at)
	e.mu.Unlock()
	if hit {
		s.denials.Add(1)
	}
	return d, hit
}

// Decided tells the denial cache what the remote decided for req sent at
// instant at (CacheNow): a refusal is remembered, an admission forgets the
// key's refusal (the count moved).
func (s *Store) Decided(req ratekeeper.Request, d ratekeeper.Decision, at int64) {
	if req.N <= 0 {
		return
	}
	if d.Allowed {
		if s.nkeys.Load() == 0 {
			return
		}
		if e, _ := s.entry(req, false, Exact); e != nil {
			e.mu.Lock()
			e.deniedUntil = 0
			e.mu.Unlock()
		}
		return
	}
	if req.Reserve || d.RetryAfter <= 0 || s.noDenials || (!req.Now.IsZero() && !d.At.Equal(req.Now)) {
		// A refusal stamped other than its request (a sliding log holding
		// to its latest entry after the clock went back) is not cached.
		return
	}
	if e, _ := s.entry(req, true, Exact); e != nil {
		e.mu.Lock()
		e.deny(req, d, at)
		e.mu.Unlock()
	}
}

// Refund gives back what d took: locally for a local decision, else
// through the remote. Either clears the key's denial cache.
func (s *Store) Refund(ctx context.Context, req ratekeeper.Request, d ratekeeper.Decision) error {
	e, _ := s.entry(req, false, Exact)
	if e != nil {
		e.mu.Lock()
		e.deniedUntil = 0
		local := e.local && e.mode != Exact && Local(req.Limit, req.Reserve)
		if local {
			switch e.mode {
			case Sync:
				e.refundSync(req, d)
			case Lease:
				e.refundLease(req, d)
			}
		}
		e.mu.Unlock()
		if local {
			return nil
		}
	}
	return s.remote.Refund(ctx, req, d)
}

// entry finds the key's entry, creating it if create and there is room.
func (s *Store) entry(req ratekeeper.Request, create bool, mode Mode) (*entry, error) {
	k := entryKey{req.Key, req.Limit.Algorithm}
	if v, ok := s.entries.Load(k); ok {
		return v.(*entry), nil
	}
	if !create {
		return nil, nil
	}
	if s.nkeys.Load() >= maxKeys {
		return nil, errFull
	}
	e := &entry{key: req.Key, mode: mode, lastUse: s.localMicros()} // idle from now, not from 1970
	e.setLimit(req.Limit)
	if v, loaded := s.entries.LoadOrStore(k, e); loaded {
		return v.(*entry), nil
	}
	s.nkeys.Add(1)
	return e, nil
}

// locked returns the key's live entry, locked: one the loop has not
// dropped meanwhile (what is added to a dropped entry would be lost).
func (s *Store) locked(req ratekeeper.Request, mode Mode) (*entry, error) {
	for {
		e, err := s.entry(req, true, mode)
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		if !e.dead {
			if e.mode != mode && !e.local {
				e.mode = mode // made by the denial cache, or before a change of mode
			}
			return e, nil
		}
		e.mu.Unlock()
		if s.entries.CompareAndDelete(entryKey{req.Key, req.Limit.Algorithm}, e) {
			s.nkeys.Add(-1)
		}
	}
}

// each calls f with every entry and drops those f says to drop. For that,
// f locks the entry and marks it dead, so that a taker holding it already
// starts a new one (locked).
func (s *Store) each(f func(e *entry) (drop bool)) {
	s.entries.Range(func(k, v any) bool {
		if f(v.(*entry)) && s.entries.CompareAndDelete(k, v) {
			s.nkeys.Add(-1)
		}
		return true
	})
}

// wait waits for ch or ctx.
func wait(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Forget drops what the instance holds of key for limit l's algorithm: its
// local state, its unsent counts (sync), its leased quota (lease) and its
// denial cache. The quota is not given back: the caller is about to delete
// the shared state it came from. A sync or lease of the key in flight is waited for
// first (within ctx), so that its answer does not bring the old state back.
// The key's next request starts from the shared state as it then is.
func (s *Store) Forget(ctx context.Context, key string, l ratekeeper.Limit) error {
	k := entryKey{key, l.Algorithm}
	v, ok := s.entries.Load(k)
	if !ok {
		return nil
	}
	e := v.(*entry)
	e.mu.Lock()
	for e.busy != nil {
		ch := e.busy
		e.mu.Unlock()
		if err := wait(ctx, ch); err != nil {
			return err
		}
		e.mu.Lock()
	}
	e.dead = true
	e.pend, e.grants, e.deniedUntil = nil, nil, 0
	e.mu.Unlock()
	if s.entries.CompareAndDelete(k, e) {
		s.nkeys.Add(-1)
	}
	return nil
}
