package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
	"github.com/ratekeeper/ratekeeper/internal/shared"
)

// DefaultPrefix starts every key the store writes unless WithPrefix says
// otherwise.
const DefaultPrefix = "rk:"

// Store is the Redis Store. It is safe for concurrent use. Create it with
// Open or New; Close releases what it owns.
type Store struct {
	client      redis.UniversalClient
	pipe        *pipes // nil: each call is its own round trip
	owned       bool   // Close closes client
	prefix      string
	leastMS     int64
	scripts     scripts
	batchScript *redis.Script // batch.lua, for TakeAll
	shared      *shared.Store // local decisions and the denial cache
	cancels     *cancels      // slots of failed acquires, given back in the background

	closeOnce sync.Once
	limits    sync.Map // algo.KeyOf(limit) → *limitArg, or *calArgs for a calendar window
	nlimits   atomic.Int64
	probeKeys sync.Map // a Cluster primary's address → its probe key (probe.go)
	// listeners are called after each call Redis answered (OnAnswer);
	// nil when there are none. listenMu orders their changes.
	listeners atomic.Pointer[[]*func(part string)]
	listenMu  sync.Mutex

	logger     *slog.Logger // nil: log nothing
	skews      atomic.Uint64
	skewLogged atomic.Int64     // when a skew was last logged, in Unix ns
	clock      func() time.Time // nil: time.Now; set by tests only
}

// run runs j, pipelined with concurrent calls unless
// WithAutoPipeline(false).
func (s *Store) run(ctx context.Context, j job) (string, error) {
	return s.runBy(ctx, j, time.Time{})
}

// runBy is run bounded by deadline too, unless it is zero.
func (s *Store) runBy(ctx context.Context, j job, deadline time.Time) (string, error) {
	if s.pipe != nil {
		return s.pipe.run(ctx, j, deadline)
	}
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	v, err := j.run(ctx, s.client)
	if err == nil {
		s.answeredKey(j.routeKey())
	}
	return v, err
}

// OnAnswer has the store call f after each of its calls that Redis
// answered with a reply (not an error), until stop is called. The calls
// are those that decide or count: decisions, TakeAll, refunds, the probe,
// concurrency slots (not InFlight), and the background syncs, leases and
// give-backs of sync and lease modes. Calls sent together to one primary
// are one answer. part is the call's Cluster primary, as Part names it. f
// must be fast and safe for concurrent use. The failsafe store counts these
// answers rather than decisions, some of which ask no server
// (failsafe.NetworkStore).
func (s *Store) OnAnswer(f func(part string)) (stop func()) {
	l := &f
	s.setListeners(func(ls []*func(string)) []*func(string) { return append(ls, l) })
	var once sync.Once
	return func() {
		once.Do(func() {
			s.setListeners(func(ls []*func(string)) []*func(string) {
				return slices.DeleteFunc(ls, func(x *func(string)) bool { return x == l })
			})
		})
	}
}

// setListeners replaces the listeners by change applied to a copy of
// them; none is stored as nil, which answered reads at the cost of a load.
func (s *Store) setListeners(change func([]*func(string)) []*func(string)) {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	var ls []*func(string)
	if p := s.listeners.Load(); p != nil {
		ls = slices.Clone(*p)
	}
	if ls = change(ls); len(ls) == 0 {
		s.listeners.Store(nil)
		return
	}
	s.listeners.Store(&ls)
}

// answered reports a call Redis answered on part to OnAnswer's listeners.
func (s *Store) answered(part string) {
	if ls := s.listeners.Load(); ls != nil {
		for _, f := range *ls {
			(*f)(part)
		}
	}
}

// answeredKey reports a call on Redis key key that Redis answered, naming
// its part only if a function listens.
func (s *Store) answeredKey(key string) {
	if s.listeners.Load() != nil {
		s.answered(s.partOfKey(key))
	}
}

// Interface guards.
var (
	_ ratekeeper.Store    = (*Store)(nil)
	_ ratekeeper.Resetter = (*Store)(nil)
)

// Option configures a Store.
type Option interface {
	apply(*config)
}

type config struct {
	prefix        string
	leastTTL      time.Duration
	autoPipeline  bool
	mode          Mode
	syncPeriod    time.Duration
	noDenialCache bool
	logger        *slog.Logger
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithPrefix sets the string every key starts with. It must not contain
// '{' or '}', which would change the keys' hash slot. Default DefaultPrefix.
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) { c.prefix = p })
}

// WithMinTTL makes every key live at least d (rounded up to the
// millisecond) after it was last written, even when its state is back to
// fresh sooner. Default 0: a key lives until its state is fresh (a
// bucket's key that sync mode writes, the stale bound longer: counts reach
// it that late).
// Tests that run on a fake clock use it, because Redis expires keys on its
// own clock whatever instant the requests carry.
func WithMinTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.leastTTL = d })
}

// WithAutoPipeline says whether concurrent calls are coalesced (default
// true). Calls wait in a batch that goes in one round trip once it holds
// half the waiting callers, or all the calls that can come before a reply.
// A batch is one script run on a standalone or Sentinel-managed server, a
// pipeline on Cluster. Many callers then share round trips and the
// server's per-command costs, which multiplies throughput under load. A
// call alone goes straight to the server. Each caller still waits no longer
// than its context allows.
func WithAutoPipeline(on bool) Option {
	return optionFunc(func(c *config) { c.autoPipeline = on })
}

// WithLogger sets where the store logs what a caller cannot see in an
// error: a host clock a calendar period or more from the Redis server's,
// at ERROR, at most once a minute. Default nil: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// New returns a Store that keeps its state through client, which the
// caller keeps owning: Close does not close it. client may be a
// *redis.Client (standalone or from NewFailoverClient) or a
// *redis.ClusterClient. Give it ContextTimeoutEnabled, so that a call on a
// hung server returns at its context's deadline (pipelined calls do in any
// case). On a Cluster client, New adds a hook that has it read the slots
// again when a command cannot reach its node, so that a replica promoted
// after its primary died is used at once. An invalid option is an error.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	return newStore(client, false, opts)
}

// newStore builds a Store, or reports an invalid option.
func newStore(client redis.UniversalClient, owned bool, opts []Option) (*Store, error) {
	c := config{prefix: DefaultPrefix, autoPipeline: true}
	for _, o := range opts {
		o.apply(&c)
	}
	s := &Store{
		client:      client,
		owned:       owned,
		prefix:      c.prefix,
		leastMS:     int64((c.leastTTL + time.Millisecond - 1) / time.Millisecond),
		scripts:     loadScripts(),
		batchScript: redis.NewScript(batchSource()),
		logger:      c.logger,
	}
	if strings.ContainsAny(c.prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q must not contain '{' or '}'", c.prefix)
	}
	mode, err := shared.ParseMode(string(c.mode))
	if err != nil {
		return nil, fmt.Errorf("redisstore: mode %q %w", c.mode, err)
	}
	if c.syncPeriod < 0 {
		return nil, fmt.Errorf("redisstore: sync period %v is negative", c.syncPeriod)
	}
	watchCluster(client)
	if c.autoPipeline {
		s.pipe = newPipes(client, s.answered)
	}
	sopts := []shared.Option{shared.WithParts(s.Part)}
	if c.noDenialCache {
		sopts = append(sopts, shared.WithoutDenialCache())
	}
	s.shared = shared.New(remote{s}, mode, c.syncPeriod, sopts...)
	s.cancels = newCancels(s.cancelSlot)
	return s, nil
}

// Close stops the store's pipelining and its background cancels of
// slots (dropping those not sent yet), and closes the client if the store
// opened it (Open); a client passed to New stays open. Calls after Close
// fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.shared.Close() // sends what is unsent, gives back leases
		s.cancels.close()
		if s.pipe != nil {
			s.pipe.close()
		}
	})
	if s.owned {
		return s.client.Close()
	}
	return nil
}

// Client is the go-redis client the store uses.
func (s *Store) Client() redis.UniversalClient { return s.client }

// Key is the Redis key that holds key's state for algorithm a.
func (s *Store) Key(key string, a ratekeeper.Algorithm) string {
	i := algoIndex(a)
	if i < 0 {
		return ""
	}
	if hasHashTag(key) {
		return s.prefix + key + suffixes[i]
	}
	return s.prefix + "{" + key + "}" + suffixes[i]
}

// hasHashTag reports whether Redis Cluster would hash key by a tag of its
// own: a '{' followed later by a '}' with something in between.
func hasHashTag(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	end := strings.IndexByte(key[open+1:], '}')
	return end > 0
}

// putFloat writes v at b[0:8] as a little-endian double, the struct
// library's '<d'.
func putFloat(b []byte, v float64) {
	binary.LittleEndian.PutUint64(b, math.Float64bits(v))
}

// nowFloat is t in µs, or NaN for the zero time: the script then reads the
// server's TIME.
func nowFloat(t time.Time) float64 {
	if t.IsZero() {
		return math.NaN()
	}
	return float64(t.UnixMicro())
}

// callArg is a script's ARGV[1] (see scripts/prelude.lua): op, n and now,
// packed '<c1dd'.
func callArg(op byte, n int, now time.Time) string {
	var b [17]byte
	b[0] = op
	putFloat(b[1:], float64(n))
	putFloat(b[9:], nowFloat(now))
	return string(b[:])
}

// job is the script run of op on req (see scripts/prelude.lua); x8 is
// ARGV[3], which only refunds have.
func (s *Store) job(op byte, req ratekeeper.Request, x8 int64) job {
	i := algoIndex(req.Limit.Algorithm)
	return job{
		script: s.scripts[i],
		algo:   i,
		key:    s.Key(req.Key, req.Limit.Algorithm),
		op:     op,
		n:      req.N,
		now:    req.Now,
		limit:  s.limitArg(req, op, x8),
		x8:     x8,
	}
}

// limitArg is a script's ARGV[2] for a limit: rate, period, the least TTL
// and the algorithm's own argument packed '<dddd' (32 bytes), and the same
// boxed for go-redis.
type limitArg struct {
	packed string
	boxed  any
}

// limitArg is ARGV[2] for req's limit in a call of op with x8 (see job).
// It is made once per limit: the same for every key, except a staggered
// window's offset. A calendar window's is made once per window
// (calendarArg).
func (s *Store) limitArg(req ratekeeper.Request, op byte, x8 int64) *limitArg {
	if req.Limit.Calendar != "" {
		return s.calendarArg(req.Limit, s.calAnchor(req, op, x8))
	}
	staggered := req.Limit.Stagger && (req.Limit.Algorithm == ratekeeper.FixedWindow || req.Limit.Algorithm == ratekeeper.SlidingWindow)
	k := algo.KeyOf(req.Limit)
	if !staggered {
		if v, ok := s.limits.Load(k); ok {
			return v.(*limitArg)
		}
	}
	p := algo.Params(req.Key, req.Limit)
	var x7 int64
	switch req.Limit.Algorithm {
	case ratekeeper.TokenBucket, ratekeeper.LeakyBucket:
		x7 = p.Burst
	case ratekeeper.FixedWindow, ratekeeper.SlidingWindow:
		x7 = p.Offset
	case ratekeeper.SlidingLog:
		if p.LogRejected {
			x7 = 1
		}
	}
	var b [32]byte
	putFloat(b[0:], float64(p.Rate))
	putFloat(b[8:], float64(p.Period))
	least := max(s.leastMS, int64((s.shared.Keep(req.Limit)+time.Millisecond-1)/time.Millisecond))
	putFloat(b[16:], float64(least))
	putFloat(b[24:], float64(x7))
	a := &limitArg{packed: string(b[:])}
	a.boxed = a.packed
	if !staggered && s.nlimits.Add(1) <= maxCachedLimits {
		s.limits.Store(k, a)
	}
	return a
}

// maxCachedLimits bounds the cache of limit arguments: limits come from
// configuration, so a few hundred at most in practice.
const maxCachedLimits = 4096

// Take decides req in one script run. A limit that Limit.Validate
// refuses is an error, and nothing is sent.
func (s *Store) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	return s.TakeBy(ctx, req, time.Time{})
}

// TakeBy is Take bounded by deadline as well as by ctx (a zero deadline:
// by ctx only). With the automatic pipeline on a client that honours
// deadlines (ContextTimeoutEnabled, as Open sets), it costs less than a
// context with that deadline. A call that waits for a batch sets no timer
// of its own: the batch's round trip ends by the latest deadline of its
// calls. The failsafe store bounds its calls this way.
//
// The price of sparing the timer: a call waiting for a batch is bounded
// only by round trips. A batch that also holds a call with no deadline at
// all runs bounded by the client's read timeout alone, and so may the
// calls queued behind it. So when some callers of one Store set no
// deadline, TakeBy's bound is that read timeout. The failsafe store, which the
// gateway and the decision service use, bounds every call it makes.
func (s *Store) TakeBy(ctx context.Context, req ratekeeper.Request, deadline time.Time) (ratekeeper.Decision, error) {
	if err := req.Limit.Validate(); err != nil {
		return ratekeeper.Decision{}, fmt.Errorf("redisstore: take: %w", err)
	}
	if s.shared.Decides(req) {
		if !deadline.IsZero() {
			// The store's own bound: a sync that runs out of it went
			// unanswered, unlike one whose caller's context ended.
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadlineCause(ctx, deadline, shared.ErrTimeout)
			defer cancel()
		}
		return s.shared.Take(ctx, req)
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return ratekeeper.Decision{}, fmt.Errorf("redisstore: take %s: %w", req.Limit.Algorithm, context.DeadlineExceeded)
	}
	at := s.shared.CacheNow(req)
	if d, hit := s.shared.Denied(req, at); hit {
		return d, nil
	}
	d, err := s.takeExact(ctx, req, deadline)
	if err == nil {
		s.shared.Decided(req, d, at)
	}
	return d, err
}

// takeExact decides req in Redis.
func (s *Store) takeExact(ctx context.Context, req ratekeeper.Request, deadline time.Time) (ratekeeper.Decision, error) {
	i := algoIndex(req.Limit.Algorithm)
	if i < 0 {
		return ratekeeper.Decision{}, fmt.Errorf("redisstore: unknown algorithm %q", req.Limit.Algorithm)
	}
	j := s.job(takeOp(req), req, 0)
	v, err := s.runBy(ctx, j, deadline)
	if arg := s.unskew(ctx, req.Limit, err); arg != nil {
		j.limit = arg
		v, err = s.runBy(ctx, j, deadline)
	}
	if err != nil {
		return ratekeeper.Decision{}, fmt.Errorf("redisstore: take %s: %w", req.Limit.Algorithm, skewed(err))
	}
	if len(v) != decisionSize {
		return ratekeeper.Decision{}, fmt.Errorf("redisstore: take %s: script answered %d bytes, want %d", req.Limit.Algorithm, len(v), decisionSize)
	}
	return decision(req, v), nil
}

// Refund gives back what the allowed decision d for req took: in one
// script run, or locally for a decision made locally. A limit that
// Limit.Validate refuses is an error, and nothing is sent.
func (s *Store) Refund(ctx context.Context, req ratekeeper.Request, d ratekeeper.Decision) error {
	if !d.Allowed || req.N <= 0 {
		return nil
	}
	if err := req.Limit.Validate(); err != nil {
		return fmt.Errorf("redisstore: refund: %w", err)
	}
	return s.shared.Refund(ctx, req, d)
}

// refundExact gives back in Redis what d took.
func (s *Store) refundExact(ctx context.Context, req ratekeeper.Request, d ratekeeper.Decision) error {
	if !d.Allowed || req.N <= 0 {
		return nil
	}
	i := algoIndex(req.Limit.Algorithm)
	if i < 0 {
		return fmt.Errorf("redisstore: unknown algorithm %q", req.Limit.Algorithm)
	}
	op := byte('r')
	at := d.At.UnixMicro()
	if req.Limit.Algorithm == ratekeeper.TokenBucket || req.Limit.Algorithm == ratekeeper.LeakyBucket {
		if req.Reserve && req.Limit.Algorithm == ratekeeper.LeakyBucket {
			op = 'c'
		}
		at += int64(d.Delay / time.Microsecond) // the slot
	}
	if _, err := s.run(ctx, s.job(op, req, at)); err != nil {
		return fmt.Errorf("redisstore: refund %s: %w", req.Limit.Algorithm, skewed(err))
	}
	return nil
}

// Reset forgets key's state for l's algorithm. It deletes the key's Redis
// key and drops what this instance holds of it: its denial cache and, in
// sync and lease modes, its local count, unsent counts and leased quota. It
// waits first for a sync or lease of the key in flight.
//
// Other instances sharing the store learn of the reset only through Redis;
// until then each keeps what it holds:
//
//   - Exact mode: a key an instance refused stays refused in its denial
//     cache until the refusal's retry-after has passed
//     (WithDenialCache(false) turns it off).
//   - Sync mode: an instance decides from the count it last read, plus its
//     own, until its next sync (within one sync period). That sync adds its
//     unsent count to the fresh key and reads the key back.
//   - Lease mode: an instance admits from the quota it holds, which the
//     deleted key no longer counts, until that quota is used up or expires.
//     The key may admit that much more than its limit in the meantime.
func (s *Store) Reset(ctx context.Context, key string, l ratekeeper.Limit) error {
	k := s.Key(key, l.Algorithm)
	if k == "" {
		return fmt.Errorf("redisstore: reset: unknown algorithm %q", l.Algorithm)
	}
	if err := s.shared.Forget(ctx, key, l); err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	if err := s.client.Del(ctx, k).Err(); err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	// A decision made between the two may have read the old state back.
	if err := s.shared.Forget(ctx, key, l); err != nil {
		return fmt.Errorf("redisstore: reset: %w", err)
	}
	return nil
}
