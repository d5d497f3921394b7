package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// DefaultMaxKeys is the cap on keys when WithMaxKeys is not given: about
// 80 MB of state for the counter algorithms.
const DefaultMaxKeys = 1_000_000

// Store is the in-memory Store. It is safe for concurrent use. Create it
// with New and stop its janitor with Close.
type Store struct {
	seed     maphash.Seed // with seed2, makes keys' ids (see id)
	seed2    maphash.Seed
	shards   []shard
	mask     uint64
	perShard int              // 0: no cap
	clock    ratekeeper.Clock // nil: the system clock, read through anchor
	anchor   atomic.Pointer[anchor]
	limits   atomic.Pointer[map[ratekeeper.Limit]*prepared] // see prepare
	interval time.Duration

	evictions atomic.Uint64
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	recent [64]atomic.Pointer[prepared] // see prepare

	slots slotTable // concurrency slots (slots.go)
}

// Interface guards.
var (
	_ ratekeeper.Store      = (*Store)(nil)
	_ ratekeeper.BatchStore = (*Store)(nil)
	_ ratekeeper.Resetter   = (*Store)(nil)
)

// shard holds the keys whose id selects it, one table per kind of state
// (token and leaky buckets share one representation), the states stored in
// the tables themselves. It is padded so that neighbouring shards' locks do
// not share a cache line.
type shard struct {
	mu      sync.Mutex
	buckets table[algo.Bucket]
	fixed   table[algo.Window]
	sliding table[slidingEntry]
	logs    table[logEntry]
	n       int // keys in all four tables
	_       [64]byte
}

// prepared is a limit converted once for the store: its parameters and
// what the shard does for Allow and for Reserve.
type prepared struct {
	l     ratekeeper.Limit // as given
	p     algo.Limit
	kinds [2]kind
	// stagger: windows placed per key, so p.Offset must be the key's.
	stagger bool
}

// maxPrepared bounds the store's cache of prepared limits; past it, a new
// limit is converted on every call (correct, only slower).
const maxPrepared = 1024

// prepare returns l prepared, from the store's cache: a copy-on-write map,
// since a store serves a few limits and adds one rarely. In front of the
// map, a small direct-mapped table indexed by a cheap mix of the limit's
// numbers answers most calls with one comparison. The map hashes the whole
// limit, algorithm name included (5% of a decision under three rules).
func (s *Store) prepare(l *ratekeeper.Limit) *prepared {
	slot := &s.recent[recentSlot(l)]
	if pl := slot.Load(); pl != nil && pl.l == *l {
		return pl
	}
	pl := s.prepareMap(l)
	slot.Store(pl)
	return pl
}

// recentSlot picks l's place in Store.recent.
func recentSlot(l *ratekeeper.Limit) uint64 {
	h := uint64(l.Rate)*0x9e3779b97f4a7c15 ^ uint64(l.Period)*0xc2b2ae3d27d4eb4f ^
		uint64(l.Burst)*0x165667b19e3779f9 ^ uint64(len(l.Algorithm))*0x27d4eb2f165667c5
	return h >> 58
}

func (s *Store) prepareMap(l *ratekeeper.Limit) *prepared {
	if m := s.limits.Load(); m != nil {
		if pl := (*m)[*l]; pl != nil {
			return pl
		}
	}
	pl := &prepared{l: *l, p: algo.Params("", *l),
		kinds:   [2]kind{kindOf(l.Algorithm, false), kindOf(l.Algorithm, true)},
		stagger: l.Stagger && (l.Algorithm == ratekeeper.FixedWindow || l.Algorithm == ratekeeper.SlidingWindow)}
	for {
		old := s.limits.Load()
		next := map[ratekeeper.Limit]*prepared{}
		if old != nil {
			if len(*old) >= maxPrepared {
				return pl
			}
			maps.Copy(next, *old)
		}
		next[*l] = pl
		if s.limits.CompareAndSwap(old, &next) {
			return pl
		}
	}
}

// params is pl's parameters for key: pl's own, or, when windows are placed
// per key, a copy in buf with the key's offset.
func (pl *prepared) params(key string, buf *algo.Limit) *algo.Limit {
	if !pl.stagger {
		return &pl.p
	}
	*buf = pl.p
	buf.Offset = algo.Offset(key, buf.Period)
	return buf
}

// kind is what the shard does for a request with reserve.
func (pl *prepared) kind(reserve bool) kind {
	if reserve {
		return pl.kinds[1]
	}
	return pl.kinds[0]
}

// slidingEntry keeps when the counter goes idle, which its state alone does
// not tell without the window's length.
type slidingEntry struct {
	s    algo.Sliding
	idle int64
}

// logEntry likewise keeps when its log goes idle.
type logEntry struct {
	g    algo.Log
	idle int64
}

// Option configures a Store.
type Option interface {
	apply(*config)
}

type config struct {
	shards   int
	maxKeys  int
	clock    ratekeeper.Clock
	interval time.Duration
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithShards sets the number of shards, rounded up to a power of two.
// Default 256.
func WithShards(n int) Option {
	return optionFunc(func(c *config) { c.shards = n })
}

// WithMaxKeys caps the number of keys the store holds (see the package doc
// for what happens at the cap). Zero or less means no cap. Default
// DefaultMaxKeys.
func WithMaxKeys(n int) Option {
	return optionFunc(func(c *config) { c.maxKeys = n })
}

// WithJanitorInterval sets how often idle keys are swept out. Zero or less
// disables the janitor (keys then leave only when the cap evicts them).
// Default one minute.
func WithJanitorInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.interval = d })
}

// WithClock sets the clock for requests that bring no time of their own
// (Request.Now zero) and for the janitor. Default: the system clock, read as
// the monotonic clock anchored to the wall clock (see the package doc). A
// store whose Limiters run on a fake clock should be given the same clock.
func WithClock(clk ratekeeper.Clock) Option {
	return optionFunc(func(c *config) { c.clock = clk })
}

// anchor ties the monotonic clock to the wall clock: the system time is
// wall + (monotonic time since mono). Reading it costs one monotonic clock
// read, where time.Now reads the wall clock too.
type anchor struct {
	mono time.Time // carries a monotonic reading
	wall int64     // its wall time, ns since the Unix epoch
}

func newAnchor() *anchor {
	t := time.Now()
	return &anchor{mono: t, wall: t.UnixNano()}
}

// maxDrift is how far the wall clock may step away from the anchored
// monotonic clock before the janitor re-anchors.
const maxDrift = time.Millisecond

// New returns an empty Store and starts its janitor.
func New(opts ...Option) *Store {
	c := config{shards: 256, maxKeys: DefaultMaxKeys, interval: time.Minute}
	for _, o := range opts {
		o.apply(&c)
	}
	n := 1
	for n < c.shards {
		n <<= 1
	}
	s := &Store{
		seed:     maphash.MakeSeed(),
		seed2:    maphash.MakeSeed(),
		shards:   make([]shard, n),
		mask:     uint64(n - 1),
		clock:    c.clock,
		interval: c.interval,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	s.anchor.Store(newAnchor())
	if c.maxKeys > 0 {
		s.perShard = max(1, (c.maxKeys+n-1)/n)
	}
	if s.interval > 0 {
		go s.janitor()
	} else {
		close(s.done)
	}
	return s
}

// Close stops the janitor. The store still answers afterwards; it just no
// longer sweeps. Close is idempotent and always returns nil.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
	})
	return nil
}

// Len is how many keys the store holds.
func (s *Store) Len() int {
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		total += sh.n
		sh.mu.Unlock()
	}
	return total
}

// Evictions is how many keys the cap has pushed out before they were idle.
func (s *Store) Evictions() uint64 { return s.evictions.Load() }

// hash is key's id: the low bits of its first hash pick the shard, the
// high bits the slot in the shard's table.
func (s *Store) hash(key string) id {
	return id{h: maphash.String(s.seed, key) | 1, x: maphash.String(s.seed2, key)}
}

func (s *Store) shardIndex(k id) int { return int(k.h >> 1 & s.mask) }

// now is t in µs, or the store's clock if t is zero.
func (s *Store) now(t time.Time) int64 {
	if !t.IsZero() {
		return t.UnixMicro()
	}
	if s.clock != nil {
		return s.clock.Now().UnixMicro()
	}
	a := s.anchor.Load()
	return (a.wall + int64(time.Since(a.mono))) / 1000
}

// reanchor follows a step of the system's wall clock (an NTP correction, an
// operator setting the time) that the monotonic clock does not see.
func (s *Store) reanchor() {
	if s.clock != nil {
		return
	}
	a := s.anchor.Load()
	fresh := newAnchor()
	est := a.wall + int64(fresh.mono.Sub(a.mono))
	if d := time.Duration(fresh.wall - est); d > maxDrift || d < -maxDrift {
		s.anchor.Store(fresh)
	}
}

// Take decides req under its shard's lock.
func (s *Store) Take(_ context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	pl := s.prepare(&req.Limit)
	var buf algo.Limit
	lp := pl.params(req.Key, &buf)
	h := s.hash(req.Key)
	sh := &s.shards[s.shardIndex(h)]
	sh.mu.Lock()
	// Read the clock under the lock: a caller preempted between the two
	// would otherwise decide at an instant older than the state it finds,
	// and be refused for a wait that has already passed.
	now := s.now(req.Now)
	r := sh.take(s, h, pl.kind(req.Reserve), lp, now, int64(req.N), true, nil)
	sh.mu.Unlock()
	return algo.Decision(r), nil
}

// Bind returns the store bound to l and clock, which a Limiter asks instead
// of Take: it finds the limit prepared rather than looking it up on every
// call.
func (s *Store) Bind(l ratekeeper.Limit, clock ratekeeper.Clock) ratekeeper.BoundStore {
	return &bound{s: s, pl: s.prepare(&l), clock: clock}
}

// bound is the store bound to a prepared limit and a clock (nil: the
// store's).
type bound struct {
	s     *Store
	pl    *prepared
	clock ratekeeper.Clock
}

// Take decides as Store.Take does under the bound limit and clock, through
// the same sh.take, with one shortcut inside. A decision that takes from an
// existing bucket, a Limiter's common case, is applied here in place as
// sh.take would apply it. That is one call shorter (8% fewer instructions
// for a Limiter's Allow on a bucket).
func (b *bound) Take(_ context.Context, req ratekeeper.BoundRequest) (ratekeeper.Decision, error) {
	s, pl := b.s, b.pl
	var buf algo.Limit
	lp := pl.params(req.Key, &buf)
	k, n := pl.kind(req.Reserve), int64(req.N)
	h := s.hash(req.Key)
	sh := &s.shards[s.shardIndex(h)]
	sh.mu.Lock()
	var now int64 // read under the lock, as in Take
	if b.clock != nil {
		now = s.now(b.clock.Now())
	} else {
		now = s.now(time.Time{})
	}
	var st *algo.Bucket
	if k <= kindQueue && n > 0 {
		st = sh.buckets.get(h)
	}
	var r algo.Result
	if st != nil {
		r = st.Apply(lp, algo.Mode(k), now, n)
	} else {
		r = sh.take(s, h, k, lp, now, n, true, nil)
	}
	sh.mu.Unlock()
	return algo.Decision(r), nil
}

// TakeAll decides reqs as one under the locks of all their shards, taken in
// shard order so that concurrent batches cannot deadlock. It decides each
// request once, in place, remembering the state it replaced. If one is
// refused, the others are put back as they were. A sliding log, whose state
// is too large to copy, is only checked, and written once all have passed.
// At the key cap, a new key that a refused batch created may have evicted
// another before the batch was undone; that is the cap's usual loss.
func (s *Store) TakeAll(_ context.Context, reqs []ratekeeper.Request, out []ratekeeper.Decision) (bool, error) {
	var hashBuf [8]id
	var lockBuf [8]int
	var savedBuf [8]saved
	hs, locks, undo := hashBuf[:0], lockBuf[:0], savedBuf[:0]
	for i := range reqs { // by index: a Request is too large to copy each time
		h := s.hash(reqs[i].Key)
		hs = append(hs, h)
		locks = append(locks, s.shardIndex(h))
	}
	locks = sortUnique(locks)
	for _, i := range locks {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for _, i := range locks {
			s.shards[i].mu.Unlock()
		}
	}()
	// One instant for the whole batch.
	now := s.now(time.Time{})
	at := func(req *ratekeeper.Request) int64 {
		if req.Now.IsZero() {
			return now
		}
		return req.Now.UnixMicro()
	}
	ok, logs := true, false
	for i := range reqs {
		req, h := &reqs[i], hs[i]
		sh := &s.shards[s.shardIndex(h)]
		pl := s.prepare(&req.Limit)
		var buf algo.Limit
		k := pl.kind(req.Reserve)
		// After a refusal the rest only report what they would get.
		commit := ok && k != kindLog
		var u *saved
		if commit {
			undo = append(undo, saved{h: h, k: k})
			u = &undo[len(undo)-1]
		}
		logs = logs || k == kindLog
		r := sh.take(s, h, k, pl.params(req.Key, &buf), at(req), int64(req.N), commit, u)
		out[i] = algo.Decision(r)
		ok = ok && r.Allowed
	}
	if !ok {
		for j := len(undo) - 1; j >= 0; j-- {
			undo[j].restore(&s.shards[s.shardIndex(undo[j].h)])
		}
		ratekeeper.Untaken(reqs, out)
		return false, nil
	}
	if logs {
		for i := range reqs {
			req := &reqs[i]
			if req.Limit.Algorithm != ratekeeper.SlidingLog {
				continue
			}
			sh := &s.shards[s.shardIndex(hs[i])]
			var buf algo.Limit
			p := s.prepare(&req.Limit).params(req.Key, &buf)
			out[i] = algo.Decision(sh.take(s, hs[i], kindLog, p, at(req), int64(req.N), true, nil))
		}
	}
	return true, nil
}

// sortUnique sorts a batch's shard indexes and drops repeats: by insertion
// for the few of a usual batch (a call to slices.Sort cost as much as a
// lock for three).
func sortUnique(a []int) []int {
	if len(a) > 16 {
		slices.Sort(a)
	} else {
		for i := 1; i < len(a); i++ {
			for j := i; j > 0 && a[j] < a[j-1]; j-- {
				a[j], a[j-1] = a[j-1], a[j]
			}
		}
	}
	return slices.Compact(a)
}

// saved is a key's state before a batch changed it; shard.take fills it in.
type saved struct {
	h       id
	k       kind
	existed bool
	b       algo.Bucket
	w       algo.Window
	e       slidingEntry
}

// restore puts the state back as save found it: a key the batch created is
// removed again.
func (v *saved) restore(sh *shard) {
	switch v.k {
	case kindMeter, kindDebt, kindQueue:
		if b := sh.buckets.get(v.h); b != nil {
			if v.existed {
				*b = v.b
			} else {
				sh.remove(v.h, 0)
			}
		}
	case kindFixed:
		if w := sh.fixed.get(v.h); w != nil {
			if v.existed {
				*w = v.w
			} else {
				sh.remove(v.h, 1)
			}
		}
	case kindSliding:
		if e := sh.sliding.get(v.h); e != nil {
			if v.existed {
				*e = v.e
			} else {
				sh.remove(v.h, 2)
			}
		}
	}
}

// kind is what the shard does for a request: an algorithm and, for the
// buckets, which of their decisions.
type kind uint8

// A bucket's kind is its decision's algo.Mode.
const (
	kindMeter = kind(algo.Metered) // token bucket or leaky bucket, Allow
	kindDebt  = kind(algo.Debited) // token bucket, Reserve
	kindQueue = kind(algo.Queued)  // leaky bucket, Reserve
)

const (
	kindFixed   kind = kindQueue + 1 + iota // fixed window
	kindSliding                             // sliding window counter
	kindLog                                 // sliding log
)

func kindOf(alg ratekeeper.Algorithm, reserve bool) kind {
	switch alg {
	case ratekeeper.TokenBucket:
		if reserve {
			return kindDebt
		}
		return kindMeter
	case ratekeeper.LeakyBucket:
		if reserve {
			return kindQueue
		}
		return kindMeter
	case ratekeeper.FixedWindow:
		return kindFixed
	case ratekeeper.SlidingWindow:
		return kindSliding
	}
	return kindLog
}

// take decides n for key, as k says, with parameters lp at now, on the
// shard, which the caller has locked. Every decision of the store comes
// here or, for an existing bucket, to the same Apply in bound.Take. With
// commit false it only says what it would decide. undo, if not nil, receives
// the state the key had. A refused request leaves the state as it was.
func (sh *shard) take(s *Store, h id, k kind, lp *algo.Limit, now, n int64, commit bool, undo *saved) algo.Result {
	commit = commit && n > 0
	if k <= kindQueue {
		b := sh.buckets.get(h)
		if b != nil {
			if undo != nil {
				undo.existed, undo.b = true, *b
			}
			if commit {
				return b.Apply(lp, algo.Mode(k), now, n) // in place
			}
		}
		var st algo.Bucket
		if b != nil {
			st = *b
		}
		r := st.Apply(lp, algo.Mode(k), now, n)
		if commit && r.Allowed {
			sh.insert(s, now)
			*sh.buckets.put(h) = st
		}
		return r
	}
	switch k {
	case kindFixed:
		w := sh.fixed.get(h)
		var st algo.Window
		if w != nil {
			st = *w
			if undo != nil {
				undo.existed, undo.w = true, st
			}
		}
		st, r := st.Fixed(lp, now, n)
		if commit && r.Allowed {
			if w == nil {
				sh.insert(s, now)
				w = sh.fixed.put(h)
			}
			*w = st
		}
		return r
	case kindSliding:
		e := sh.sliding.get(h)
		var st algo.Sliding
		if e != nil {
			st = e.s
			if undo != nil {
				undo.existed, undo.e = true, *e
			}
		}
		st, r := st.SlidingWindow(lp, now, n)
		if commit && r.Allowed {
			if e == nil {
				sh.insert(s, now)
				e = sh.sliding.put(h)
			}
			// Fresh once the estimate is zero: no later decision differs.
			e.s, e.idle = st, r.At+r.ResetAfter
		}
		return r
	}
	// A sliding log, too large to copy: without commit it is only checked.
	e := sh.logs.get(h)
	if !commit {
		if e == nil {
			return new(algo.Log).Check(lp, now, n)
		}
		return e.g.Check(lp, now, n)
	}
	if e == nil {
		sh.insert(s, now)
		e = sh.logs.put(h)
	}
	r := e.g.SlidingLog(lp, now, n)
	e.idle = e.g.IdleAt(lp)
	return r
}

// insert makes room for one more key, evicting one if the shard is full.
// It may move entries of the shard's tables: callers look up afresh.
func (sh *shard) insert(s *Store, now int64) {
	if s.perShard > 0 && sh.n >= s.perShard {
		if !sh.evict(s, now) {
			s.evictions.Add(1)
		}
	}
	sh.n++
}

// evict removes one key from a sample of up to 8 of each kind of state,
// taken from a random place in each table. It picks an idle one if there is
// one, else the one closest to idle. It reports whether the victim was idle.
func (sh *shard) evict(s *Store, now int64) bool {
	const sample = 8
	var (
		victim id
		kind   int
		best   int64
		found  bool
		done   bool
	)
	consider := func(k id, idle int64, which int) bool {
		if !found || idle < best {
			victim, kind, best, found = k, which, idle, true
		}
		done = idle <= now // an idle key ends the search
		return done
	}
	start := rand.IntN(1 << 30)
	sh.buckets.sample(start, sample, func(k id, b *algo.Bucket) bool { return consider(k, b.IdleAt(), 0) })
	if !done {
		sh.fixed.sample(start, sample, func(k id, w *algo.Window) bool { return consider(k, w.IdleAt(), 1) })
	}
	if !done {
		sh.sliding.sample(start, sample, func(k id, e *slidingEntry) bool { return consider(k, e.idle, 2) })
	}
	if !done {
		sh.logs.sample(start, sample, func(k id, e *logEntry) bool { return consider(k, e.idle, 3) })
	}
	if !found {
		return true
	}
	sh.remove(victim, kind)
	return best <= now
}

// remove deletes key, whose hash is h, from the table of the given kind of
// state (0 buckets, 1 fixed windows, 2 sliding windows, 3 logs).
func (sh *shard) remove(h id, kind int) {
	switch kind {
	case 0:
		sh.buckets.delete(h)
	case 1:
		sh.fixed.delete(h)
	case 2:
		sh.sliding.delete(h)
	case 3:
		sh.logs.delete(h)
	}
	sh.n--
}

// Refund gives back what the allowed decision d for req took.
func (s *Store) Refund(_ context.Context, req ratekeeper.Request, d ratekeeper.Decision) error {
	if !d.Allowed || req.N <= 0 {
		return nil
	}
	n := int64(req.N)
	at := d.At.UnixMicro()
	p := algo.Params(req.Key, req.Limit)
	h := s.hash(req.Key)
	sh := &s.shards[s.shardIndex(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch req.Limit.Algorithm {
	case ratekeeper.TokenBucket, ratekeeper.LeakyBucket:
		if b := sh.buckets.get(h); b != nil {
			queue := req.Reserve && req.Limit.Algorithm == ratekeeper.LeakyBucket
			*b = b.Refund(&p, n, queue, at+int64(d.Delay/time.Microsecond))
		}
	case ratekeeper.FixedWindow:
		if w := sh.fixed.get(h); w != nil {
			*w = w.Refund(&p, n, at)
		}
	case ratekeeper.SlidingWindow:
		if e := sh.sliding.get(h); e != nil {
			e.s = e.s.Refund(&p, n, at)
		}
	case ratekeeper.SlidingLog:
		if e := sh.logs.get(h); e != nil {
			e.g.Refund(n, at)
			e.idle = e.g.IdleAt(&p)
		}
	}
	return nil
}

// Reset forgets key's state for l's algorithm (the token and the leaky
// bucket share one state per key, as their decisions do), so that its next
// request starts fresh.
func (s *Store) Reset(_ context.Context, key string, l ratekeeper.Limit) error {
	h := s.hash(key)
	sh := &s.shards[s.shardIndex(h)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch l.Algorithm {
	case ratekeeper.TokenBucket, ratekeeper.LeakyBucket:
		if sh.buckets.get(h) != nil {
			sh.remove(h, 0)
		}
	case ratekeeper.FixedWindow:
		if sh.fixed.get(h) != nil {
			sh.remove(h, 1)
		}
	case ratekeeper.SlidingWindow:
		if sh.sliding.get(h) != nil {
			sh.remove(h, 2)
		}
	case ratekeeper.SlidingLog:
		if sh.logs.get(h) != nil {
			sh.remove(h, 3)
		}
	default:
		return fmt.Errorf("memstore: reset: unknown algorithm %q", l.Algorithm)
	}
	return nil
}

func (s *Store) janitor() {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.reanchor()
			s.Sweep()
		}
	}
}

// Sweep removes every key whose state is back to fresh at the store's
// clock. The janitor calls it; tests and callers with their own schedule may
// too.
func (s *Store) Sweep() {
	now := s.now(time.Time{})
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.n -= sh.buckets.sweep(func(b *algo.Bucket) bool { return b.IdleAt() <= now })
		sh.n -= sh.fixed.sweep(func(w *algo.Window) bool { return w.IdleAt() <= now })
		sh.n -= sh.sliding.sweep(func(e *slidingEntry) bool { return e.idle <= now })
		sh.n -= sh.logs.sweep(func(e *logEntry) bool { return e.idle <= now })
		sh.mu.Unlock()
	}
	s.sweepSlots(now)
}
