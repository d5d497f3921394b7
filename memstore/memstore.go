package memstore

import (
	"context"
	"hash/maphash"
	"slices"
	"strings"
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
	seed     maphash.Seed
	shards   []shard
	mask     uint64
	perShard int              // 0: no cap
	clock    ratekeeper.Clock // nil: the system clock, read through anchor
	anchor   atomic.Pointer[anchor]
	interval time.Duration

	evictions atomic.Uint64
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// Interface guards.
var (
	_ ratekeeper.Store      = (*Store)(nil)
	_ ratekeeper.BatchStore = (*Store)(nil)
)

// shard holds the keys whose hash selects it, one map per kind of state
// (token and leaky buckets share one representation). It is padded so that
// neighbouring shards' locks do not share a cache line.
type shard struct {
	mu      sync.Mutex
	buckets map[string]*algo.Bucket
	fixed   map[string]*algo.Window
	sliding map[string]*slidingEntry
	logs    map[string]*logEntry
	n       int
	// The limit this shard converted last and its parameters: a store
	// serves a few limits, and comparing costs less than converting.
	lastLimit  ratekeeper.Limit
	lastParams algo.Limit
	lastOK     bool
	_          [64]byte
}

// params is algo.Params(key, *l), remembered for the next request with the
// same limit. The caller holds sh.mu.
func (sh *shard) params(key string, l *ratekeeper.Limit) algo.Limit {
	if l.Stagger { // the parameters depend on the key
		return algo.Params(key, *l)
	}
	if !sh.lastOK || *l != sh.lastLimit {
		sh.lastLimit, sh.lastParams, sh.lastOK = *l, algo.Params(key, *l), true
	}
	return sh.lastParams
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
	for i := range s.shards {
		sh := &s.shards[i]
		sh.buckets = make(map[string]*algo.Bucket)
		sh.fixed = make(map[string]*algo.Window)
		sh.sliding = make(map[string]*slidingEntry)
		sh.logs = make(map[string]*logEntry)
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

func (s *Store) shardIndex(key string) int {
	return int(maphash.String(s.seed, key) & s.mask)
}

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
	sh := &s.shards[s.shardIndex(req.Key)]
	sh.mu.Lock()
	// Read the clock under the lock: a caller preempted between the two
	// would otherwise decide at an instant older than the state it finds,
	// and be refused for a wait that has already passed.
	now := s.now(req.Now)
	p := sh.params(req.Key, &req.Limit)
	r := sh.take(s, req.Key, kindOf(req.Limit.Algorithm, req.Reserve), &p, now, int64(req.N), true, nil)
	sh.mu.Unlock()
	return algo.Decision(r), nil
}

// Bind returns the store bound to l: a Limiter's decisions then skip
// converting the limit.
func (s *Store) Bind(l ratekeeper.Limit) ratekeeper.Bound {
	return &bound{s: s, limit: l, p: algo.Params("", l),
		kinds: [2]kind{kindOf(l.Algorithm, false), kindOf(l.Algorithm, true)}}
}

// bound is a Store bound to one limit.
type bound struct {
	s     *Store
	limit ratekeeper.Limit
	p     algo.Limit // the parameters, unless limit.Stagger makes them the key's
	kinds [2]kind    // for Allow and for Reserve
}

func (b *bound) Take(_ context.Context, key string, n int, reserve bool, at time.Time) (ratekeeper.Decision, error) {
	s := b.s
	p := &b.p
	if b.limit.Stagger {
		kp := algo.Params(key, b.limit)
		p = &kp
	}
	sh := &s.shards[s.shardIndex(key)]
	sh.mu.Lock()
	now := s.now(at) // under the lock, as in Take
	k := b.kinds[0]
	if reserve {
		k = b.kinds[1]
	}
	commit := n > 0
	var r algo.Result
	switch k { // as sh.take, one call shorter
	case kindMeter:
		if bk := sh.buckets[key]; bk != nil && commit {
			r = bk.Apply(p, algo.Metered, now, int64(n)) // the hot path of Allow
		} else {
			r = sh.takeBucket(s, key, algo.Metered, p, now, int64(n), commit, nil)
		}
	case kindFixed:
		r = sh.takeFixed(s, key, p, now, int64(n), commit, nil)
	case kindSliding:
		r = sh.takeSliding(s, key, p, now, int64(n), commit, nil)
	case kindLog:
		r = sh.takeLog(s, key, p, now, int64(n), commit)
	default:
		r = sh.take(s, key, k, p, now, int64(n), true, nil)
	}
	sh.mu.Unlock()
	return algo.Decision(r), nil
}

// TakeAll decides reqs as one under the locks of all their shards, taken in
// shard order so that concurrent batches cannot deadlock. It decides each
// request once, in place, remembering the state it replaced; if one is
// refused, the others are put back as they were (a sliding log, whose state
// is too large to copy, is only checked, and written once all have passed).
// At the key cap, a new key that a refused batch created may have evicted
// another before the batch was undone; that is the cap's usual loss.
func (s *Store) TakeAll(_ context.Context, reqs []ratekeeper.Request, out []ratekeeper.Decision) (bool, error) {
	var idxBuf, lockBuf [8]int
	var savedBuf [8]saved
	idx, locks, undo := idxBuf[:0], lockBuf[:0], savedBuf[:0]
	for _, r := range reqs {
		i := s.shardIndex(r.Key)
		idx = append(idx, i)
		locks = append(locks, i)
	}
	slices.Sort(locks)
	locks = slices.Compact(locks)
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
		req := &reqs[i]
		sh := &s.shards[idx[i]]
		p := sh.params(req.Key, &req.Limit)
		k := kindOf(req.Limit.Algorithm, req.Reserve)
		// After a refusal the rest only report what they would get.
		commit := ok && k != kindLog
		var u *saved
		if commit {
			undo = append(undo, saved{sh: sh, key: req.Key, k: k})
			u = &undo[len(undo)-1]
		}
		logs = logs || k == kindLog
		r := sh.take(s, req.Key, k, &p, at(req), int64(req.N), commit, u)
		out[i] = algo.Decision(r)
		ok = ok && r.Allowed
	}
	if !ok {
		for j := len(undo) - 1; j >= 0; j-- {
			undo[j].restore()
		}
		return false, nil
	}
	if logs {
		for i := range reqs {
			req := &reqs[i]
			if req.Limit.Algorithm != ratekeeper.SlidingLog {
				continue
			}
			sh := &s.shards[idx[i]]
			p := sh.params(req.Key, &req.Limit)
			out[i] = algo.Decision(sh.take(s, req.Key, kindLog, &p, at(req), int64(req.N), true, nil))
		}
	}
	return true, nil
}

// saved is a key's state before a batch changed it; shard.take fills it in.
type saved struct {
	sh      *shard
	key     string
	k       kind
	existed bool
	b       algo.Bucket
	w       algo.Window
	e       slidingEntry
}

// restore puts the state back as save found it: a key the batch created is
// removed again.
func (v *saved) restore() {
	sh := v.sh
	switch v.k {
	case kindMeter, kindDebt, kindQueue:
		if b := sh.buckets[v.key]; b != nil {
			if v.existed {
				*b = v.b
			} else {
				sh.remove(0, v.key)
			}
		}
	case kindFixed:
		if w := sh.fixed[v.key]; w != nil {
			if v.existed {
				*w = v.w
			} else {
				sh.remove(1, v.key)
			}
		}
	case kindSliding:
		if e := sh.sliding[v.key]; e != nil {
			if v.existed {
				*e = v.e
			} else {
				sh.remove(2, v.key)
			}
		}
	}
}

// kind is what the shard does for a request: an algorithm and, for the
// buckets, which of their decisions.
type kind uint8

const (
	kindMeter   kind = iota // token bucket or leaky bucket, Allow
	kindDebt                // token bucket, Reserve
	kindQueue               // leaky bucket, Reserve
	kindFixed               // fixed window
	kindSliding             // sliding window counter
	kindLog                 // sliding log
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
// shard, which the caller has locked. With commit false it only says what
// it would decide. undo, if not nil, receives the state the key had. Each
// kind has its own small function, so that a bound store can call it
// directly.
func (sh *shard) take(s *Store, key string, k kind, lp *algo.Limit, now, n int64, commit bool, undo *saved) algo.Result {
	commit = commit && n > 0
	switch k {
	case kindMeter:
		return sh.takeBucket(s, key, algo.Metered, lp, now, n, commit, undo)
	case kindDebt:
		return sh.takeBucket(s, key, algo.Debited, lp, now, n, commit, undo)
	case kindQueue:
		return sh.takeBucket(s, key, algo.Queued, lp, now, n, commit, undo)
	case kindFixed:
		return sh.takeFixed(s, key, lp, now, n, commit, undo)
	case kindSliding:
		return sh.takeSliding(s, key, lp, now, n, commit, undo)
	}
	return sh.takeLog(s, key, lp, now, n, commit)
}

func (sh *shard) takeBucket(s *Store, key string, mode algo.Mode, lp *algo.Limit, now, n int64, commit bool, undo *saved) algo.Result {
	b := sh.buckets[key]
	if undo != nil && b != nil {
		undo.existed, undo.b = true, *b
	}
	if b != nil && commit {
		// Refused requests leave the state as it was, so the update can
		// happen in place.
		return b.Apply(lp, mode, now, n)
	}
	var st algo.Bucket
	if b != nil {
		st = *b
	}
	r := st.Apply(lp, mode, now, n)
	if commit && r.Allowed {
		b = new(algo.Bucket)
		sh.insert(s, now)
		sh.buckets[strings.Clone(key)] = b
		*b = st
	}
	return r
}

func (sh *shard) takeFixed(s *Store, key string, lp *algo.Limit, now, n int64, commit bool, undo *saved) algo.Result {
	w := sh.fixed[key]
	var st algo.Window
	if w != nil {
		st = *w
		if undo != nil {
			undo.existed, undo.w = true, st
		}
	}
	st, r := st.Fixed(*lp, now, n)
	if commit && r.Allowed {
		if w == nil {
			w = new(algo.Window)
			sh.insert(s, now)
			sh.fixed[strings.Clone(key)] = w
		}
		*w = st
	}
	return r
}

func (sh *shard) takeSliding(s *Store, key string, lp *algo.Limit, now, n int64, commit bool, undo *saved) algo.Result {
	e := sh.sliding[key]
	var st algo.Sliding
	if e != nil {
		st = e.s
		if undo != nil {
			undo.existed, undo.e = true, *e
		}
	}
	st, r := st.SlidingWindow(*lp, now, n)
	if commit && r.Allowed {
		if e == nil {
			e = new(slidingEntry)
			sh.insert(s, now)
			sh.sliding[strings.Clone(key)] = e
		}
		// Fresh once the estimate is zero: no later decision differs.
		e.s, e.idle = st, r.At+r.ResetAfter
	}
	return r
}

func (sh *shard) takeLog(s *Store, key string, lp *algo.Limit, now, n int64, commit bool) algo.Result {
	e := sh.logs[key]
	if !commit {
		if e == nil {
			return new(algo.Log).Check(*lp, now, n)
		}
		return e.g.Check(*lp, now, n)
	}
	if e == nil {
		e = new(logEntry)
		sh.insert(s, now)
		sh.logs[strings.Clone(key)] = e
	}
	r := e.g.SlidingLog(*lp, now, n)
	e.idle = e.g.IdleAt(*lp)
	return r
}

// insert makes room for one more key, evicting one if the shard is full.
func (sh *shard) insert(s *Store, now int64) {
	if s.perShard > 0 && sh.n >= s.perShard {
		if !sh.evict(now) {
			s.evictions.Add(1)
		}
	}
	sh.n++
}

// evict removes one key: among a sample of up to 8 of each kind of state (Go
// randomises where a map's iteration starts), an idle one if there is one,
// else the one closest to idle. It reports whether the victim was idle.
func (sh *shard) evict(now int64) bool {
	const sample = 8
	var (
		victim string
		kind   int
		best   int64
		found  bool
	)
	consider := func(k string, idle int64, which int) bool {
		if !found || idle < best {
			victim, kind, best, found = k, which, idle, true
		}
		return idle <= now // an idle key ends the search
	}
	scan := func() {
		i := 0
		for k, b := range sh.buckets {
			if consider(k, b.IdleAt(), 0) {
				return
			}
			if i++; i >= sample {
				break
			}
		}
		i = 0
		for k, w := range sh.fixed {
			if consider(k, w.IdleAt(), 1) {
				return
			}
			if i++; i >= sample {
				break
			}
		}
		i = 0
		for k, e := range sh.sliding {
			if consider(k, e.idle, 2) {
				return
			}
			if i++; i >= sample {
				break
			}
		}
		i = 0
		for k, e := range sh.logs {
			if consider(k, e.idle, 3) {
				return
			}
			if i++; i >= sample {
				break
			}
		}
	}
	scan()
	if !found {
		return true
	}
	sh.remove(kind, victim)
	return best <= now
}

func (sh *shard) remove(kind int, key string) {
	switch kind {
	case 0:
		delete(sh.buckets, key)
	case 1:
		delete(sh.fixed, key)
	case 2:
		delete(sh.sliding, key)
	case 3:
		delete(sh.logs, key)
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
	sh := &s.shards[s.shardIndex(req.Key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch req.Limit.Algorithm {
	case ratekeeper.TokenBucket, ratekeeper.LeakyBucket:
		if b := sh.buckets[req.Key]; b != nil {
			queue := req.Reserve && req.Limit.Algorithm == ratekeeper.LeakyBucket
			*b = b.Refund(p, n, queue, at+int64(d.Delay/time.Microsecond))
		}
	case ratekeeper.FixedWindow:
		if w := sh.fixed[req.Key]; w != nil {
			*w = w.Refund(p, n, at)
		}
	case ratekeeper.SlidingWindow:
		if e := sh.sliding[req.Key]; e != nil {
			e.s = e.s.Refund(p, n, at)
		}
	case ratekeeper.SlidingLog:
		if e := sh.logs[req.Key]; e != nil {
			e.g.Refund(n, at)
			e.idle = e.g.IdleAt(p)
		}
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
		for k, b := range sh.buckets {
			if b.IdleAt() <= now {
				sh.remove(0, k)
			}
		}
		for k, w := range sh.fixed {
			if w.IdleAt() <= now {
				sh.remove(1, k)
			}
		}
		for k, e := range sh.sliding {
			if e.idle <= now {
				sh.remove(2, k)
			}
		}
		for k, e := range sh.logs {
			if e.idle <= now {
				sh.remove(3, k)
			}
		}
		sh.mu.Unlock()
	}
}
