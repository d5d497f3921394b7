package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// DefaultPrefix starts every key the store writes unless WithPrefix says
// otherwise.
const DefaultPrefix = "rk:"

// Store is the Redis Store. It is safe for concurrent use. Create it with
// Open or New; Close releases what it owns.
type Store struct {
	client      redis.UniversalClient
	pipe        *batcher // nil: each call is its own round trip
	owned       bool     // Close closes client
	prefix      string
	leastMS     int64
	scripts     scripts
	batchScript *redis.Script // batch.lua, for TakeAll
	err         error         // a bad option, returned by every call

	closeOnce sync.Once
	limits    sync.Map // ratekeeper.Limit → *[4]any, see limitArgs
	nlimits   atomic.Int64
}

// run runs script, pipelined with concurrent calls unless
// WithAutoPipeline(false).
func (s *Store) run(ctx context.Context, script *redis.Script, keys []string, args []any) *redis.Cmd {
	if s.pipe != nil {
		return s.pipe.run(ctx, script, keys, args)
	}
	return script.Run(ctx, s.client, keys, args...)
}

// Interface guard.
var _ ratekeeper.Store = (*Store)(nil)

// Option configures a Store.
type Option interface {
	apply(*config)
}

type config struct {
	prefix       string
	leastTTL     time.Duration
	autoPipeline bool
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
// fresh sooner. Default 0: a key lives exactly until its state is fresh.
// Tests that run on a fake clock use it, because Redis expires keys on its
// own clock whatever instant the requests carry.
func WithMinTTL(d time.Duration) Option {
	return optionFunc(func(c *config) { c.leastTTL = d })
}

// WithAutoPipeline says whether concurrent calls are coalesced into
// pipelines (default true): a few flusher goroutines each send whatever
// calls are waiting in one round trip. Many callers then share round trips,
// which multiplies throughput under load; a lone caller pays a channel hand-
// off. Each caller still waits no longer than its context allows.
func WithAutoPipeline(on bool) Option {
	return optionFunc(func(c *config) { c.autoPipeline = on })
}

// New returns a Store that keeps its state through client, which the
// caller keeps owning: Close does not close it. client may be a
// *redis.Client (standalone or from NewFailoverClient) or a
// *redis.ClusterClient. Give it ContextTimeoutEnabled, so that a call on a
// hung server returns at its context's deadline (pipelined calls do in any
// case).
func New(client redis.UniversalClient, opts ...Option) *Store {
	return newStore(client, false, opts)
}

// newStore builds a Store; an invalid option is kept in s.err, which every
// call then returns (New keeps its signature; Open reports it at once).
func newStore(client redis.UniversalClient, owned bool, opts []Option) *Store {
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
	}
	if strings.ContainsAny(c.prefix, "{}") {
		s.err = fmt.Errorf("redisstore: prefix %q must not contain '{' or '}'", c.prefix)
	}
	if c.autoPipeline && s.err == nil {
		s.pipe = newBatcher(client)
	}
	return s
}

// Close stops the store's pipelining and closes the client if the store
// opened it (Open); a client passed to New stays open. Calls after Close
// fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
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

func nowArg(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMicro(), 10)
}

// args are the scripts' arguments (see scripts/prelude.lua).
func (s *Store) args(op string, req ratekeeper.Request, x8 int64) []any {
	lim := s.limitArgs(req)
	args := make([]any, 7, 8)
	args[0], args[1], args[2] = op, nowArg(req.Now), req.N
	copy(args[3:], lim[:])
	if op == "r" || op == "c" {
		args = append(args, x8) // only a refund needs ARGV[8]
	}
	return args
}

// limitArgs are ARGV[4..7] for req's limit: rate, period, the least TTL and
// the algorithm's own argument, boxed once per limit (the same for every
// key, except a staggered window's offset).
func (s *Store) limitArgs(req ratekeeper.Request) *[4]any {
	staggered := req.Limit.Stagger && (req.Limit.Algorithm == ratekeeper.FixedWindow || req.Limit.Algorithm == ratekeeper.SlidingWindow)
	if !staggered {
		if v, ok := s.limits.Load(req.Limit); ok {
			return v.(*[4]any)
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
	a := &[4]any{p.Rate, p.Period, s.leastMS, x7}
	if !staggered && s.nlimits.Add(1) <= maxCachedLimits {
		s.limits.Store(req.Limit, a)
	}
	return a
}

// maxCachedLimits bounds the cache of limit arguments: limits come from
// configuration, so a few hundred at most in practice.
const maxCachedLimits = 4096

// Take decides req in one script run.
func (s *Store) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	i := algoIndex(req.Limit.Algorithm)
	if i < 0 {
		return ratekeeper.Decision{}, fmt.Errorf("redisstore: unknown algorithm %q", req.Limit.Algorithm)
	}
	if s.err != nil {
		return ratekeeper.Decision{}, s.err
	}
	keys := []string{s.Key(req.Key, req.Limit.Algorithm)}
	v, err := s.run(ctx, s.scripts[i], keys, s.args(takeOp(req), req, 0)).Int64Slice()
	if err != nil {
		return ratekeeper.Decision{}, fmt.Errorf("redisstore: take %s: %w", req.Limit.Algorithm, err)
	}
	if len(v) != 6 {
		return ratekeeper.Decision{}, fmt.Errorf("redisstore: take %s: script answered %d values, want 6", req.Limit.Algorithm, len(v))
	}
	return decision(req, v), nil
}

// Refund gives back what the allowed decision d for req took, in one
// script run.
func (s *Store) Refund(ctx context.Context, req ratekeeper.Request, d ratekeeper.Decision) error {
	if !d.Allowed || req.N <= 0 {
		return nil
	}
	i := algoIndex(req.Limit.Algorithm)
	if i < 0 {
		return fmt.Errorf("redisstore: unknown algorithm %q", req.Limit.Algorithm)
	}
	if s.err != nil {
		return s.err
	}
	op := "r"
	at := d.At.UnixMicro()
	if req.Limit.Algorithm == ratekeeper.TokenBucket || req.Limit.Algorithm == ratekeeper.LeakyBucket {
		if req.Reserve && req.Limit.Algorithm == ratekeeper.LeakyBucket {
			op = "c"
		}
		at += int64(d.Delay / time.Microsecond) // the slot
	}
	keys := []string{s.Key(req.Key, req.Limit.Algorithm)}
	if err := s.run(ctx, s.scripts[i], keys, s.args(op, req, at)).Err(); err != nil {
		return fmt.Errorf("redisstore: refund %s: %w", req.Limit.Algorithm, err)
	}
	return nil
}
