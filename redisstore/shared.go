package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
	"github.com/ratekeeper/ratekeeper/internal/shared"
)

// Mode is how a Store decides the limits many instances share.
type Mode string

const (
	// Exact decides every request in Redis, one atomic script run each
	// (batched with concurrent ones). A key refused with retry-after R is
	// refused locally, without a call, until R has passed.
	Exact Mode = "exact"
	// Sync decides from the last count read from Redis plus what this
	// instance admitted since, and sends its counts every sync period (and
	// sooner once a key's unsent count passes an eighth of its limit).
	// Redis calls per key fall to one per period per instance; over the
	// limit by at most what the other instances admit in two periods and a
	// round trip (docs/redis.md).
	Sync Mode = "sync"
	// Lease takes shares of the remaining quota from Redis atomically and
	// admits from them locally: never more than the limit, and a request
	// may be refused while other instances hold unused shares.
	Lease Mode = "lease"
)

// DefaultSyncPeriod is the sync period when WithMode is given none.
const DefaultSyncPeriod = shared.DefaultPeriod

// ParseMode reads a mode's name; "" is Exact.
func ParseMode(s string) (Mode, error) {
	m, err := shared.ParseMode(s)
	if err != nil {
		return "", fmt.Errorf("mode %q %w", s, err)
	}
	return Mode(m.String()), nil
}

// WithMode sets how the store decides (default Exact) and, for Sync and
// Lease, the sync period (DefaultSyncPeriod when zero). Sync and Lease
// decide the fixed window, the sliding window counter and the buckets'
// Allow locally; the sliding log and reservations stay exact.
func WithMode(m Mode, syncPeriod time.Duration) Option {
	return optionFunc(func(c *config) { c.mode, c.syncPeriod = m, syncPeriod })
}

// WithDenialCache says whether refusals are remembered (default true). A
// key refused with retry-after R is then refused locally, without a call
// to Redis, for the same cost. That lasts until R has passed or this store
// admits or refunds on the key. Its answers are Redis's refusal with the
// durations shortened by the time since, and Remaining as it was then
// (never more than there is). Turn it off when something besides this
// process's decisions can lower a key's count early (a reset by hand).
func WithDenialCache(on bool) Option {
	return optionFunc(func(c *config) { c.noDenialCache = !on })
}

// SetLimitModes decides each limit in m in its own mode instead of the
// store's (WithMode): a global limit in Lease, say, beside per-client
// limits in Exact. A key keeps the mode it was first decided in until it
// has been idle for ten sync periods.
func (s *Store) SetLimitModes(m map[ratekeeper.Limit]Mode) error {
	modes := make(map[ratekeeper.Limit]shared.Mode, len(m))
	for l, mode := range m {
		sm, err := shared.ParseMode(string(mode))
		if err != nil {
			return fmt.Errorf("redisstore: limit %s: mode %q %w", l, mode, err)
		}
		modes[l] = sm
	}
	s.shared.SetLimitModes(modes)
	s.limits.Clear() // their least TTL follows the mode (shared.Store.Keep)
	s.nlimits.Store(0)
	return nil
}

// SharedStats are the counters of a store's local decisions.
type SharedStats struct {
	// Syncs and SyncErrors count the calls that sent counts (sync mode).
	Syncs, SyncErrors uint64
	// Leases and LeaseErrors count the calls that leased quota;
	// GiveBacks the calls that gave back quota unused.
	Leases, LeaseErrors, GiveBacks uint64
	// Dropped counts admitted requests whose count never reached Redis:
	// their window ended while Redis did not answer.
	Dropped uint64
	// DenialHits counts refusals answered by the denial cache.
	DenialHits uint64
	// LocalDecisions counts decisions made without a call.
	LocalDecisions uint64
	// MaxUnsent is the longest an admitted request waited to be sent to
	// Redis (sync mode): about the sync period, unless the process was
	// starved or Redis slow. Sync mode's over-admission grows with it.
	MaxUnsent time.Duration
	// MaxStale is the oldest shared state a local decision used, from the
	// reply that read it (sync mode): at most two sync periods unless Redis
	// did not answer.
	MaxStale time.Duration
}

// SharedStats returns the counters of the store's local decisions.
func (s *Store) SharedStats() SharedStats {
	st := s.shared.Stats()
	return SharedStats{Syncs: st.Syncs, SyncErrors: st.SyncErrors, Leases: st.Leases, LeaseErrors: st.LeaseErrors, GiveBacks: st.GiveBacks,
		Dropped: st.Dropped, DenialHits: st.DenialHits, LocalDecisions: st.LocalDecisions,
		MaxUnsent: time.Duration(st.MaxUnsent) * time.Microsecond,
		MaxStale:  time.Duration(st.MaxStale) * time.Microsecond}
}

// Mode is the store's mode.
func (s *Store) Mode() Mode { return Mode(s.shared.Mode().String()) }

// remote is the Store as the shared engine's Remote: its exact decisions,
// and the add and lease ops of the scripts.
type remote struct{ s *Store }

func (r remote) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	return r.s.takeExact(ctx, req, time.Time{})
}

func (r remote) Refund(ctx context.Context, req ratekeeper.Request, d ratekeeper.Decision) error {
	return r.s.refundExact(ctx, req, d)
}

func (r remote) Add(ctx context.Context, items []shared.Item) error {
	return r.run(ctx, 'a', items)
}

func (r remote) Lease(ctx context.Context, items []shared.Item) error {
	return r.run(ctx, 'l', items)
}

// runJobs runs jobs, in as few round trips as the pipeline makes, and
// answers each one's reply or error.
func (s *Store) runJobs(ctx context.Context, jobs []job) ([]string, []error) {
	if s.pipe != nil {
		return s.pipe.runAll(ctx, jobs)
	}
	replies, errs := make([]string, len(jobs)), make([]error, len(jobs))
	for i := range jobs {
		replies[i], errs[i] = jobs[i].run(ctx, s.client)
		if errs[i] == nil {
			s.answeredKey(jobs[i].routeKey())
		}
	}
	return replies, errs
}

// run runs op on every item, in as few round trips as the pipeline makes,
// and fills the items from the replies.
func (r remote) run(ctx context.Context, op byte, items []shared.Item) error {
	s := r.s
	jobs := make([]job, len(items))
	for i, it := range items {
		req := ratekeeper.Request{Key: it.Key, Limit: it.Limit, N: int(it.N)}
		if it.Now != 0 {
			req.Now = time.UnixMicro(it.Now)
		}
		x8 := it.At
		if op == 'l' {
			x8 = it.Min
		}
		jobs[i] = s.job(op, req, x8)
	}
	replies, errs := s.runJobs(ctx, jobs)
	var again []int // the calls made again after a skew error, as retries
	var retries []job
	for i, err := range errs {
		if arg := s.unskew(ctx, items[i].Limit, err); arg != nil {
			j := jobs[i]
			j.limit = arg
			again, retries = append(again, i), append(retries, j)
		}
	}
	if len(again) > 0 {
		r, e := s.runJobs(ctx, retries)
		for k, i := range again {
			replies[i], errs[i] = r[k], e[k]
		}
	}
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed == len(items) && failed > 0 {
		return errs[0] // the call failed as a whole
	}
	for i := range items {
		it := &items[i]
		if errs[i] != nil {
			it.Err = errs[i]
			continue
		}
		v := replies[i]
		if len(v) != decisionSize {
			it.Err = fmt.Errorf("redisstore: %c %s: script answered %d bytes, want %d", op, it.Limit.Algorithm, len(v), decisionSize)
			continue
		}
		var f [6]int64
		for k := range f {
			f[k] = int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[8*k:]))))
		}
		it.Now = f[5]
		switch it.Limit.Algorithm {
		case ratekeeper.FixedWindow:
			it.State.Window = algo.Window{End: f[1], Count: f[2]}
		case ratekeeper.SlidingWindow:
			it.State.Sliding = algo.Sliding{End: f[1], Prev: int32(f[2]), Cur: int32(f[3])}
		default:
			it.State.Bucket = algo.Bucket{Tail: f[1], Frac: f[2]}
		}
		if op == 'a' {
			it.Dropped = f[0] == 0
		} else {
			it.Granted, it.Retry = f[0], f[4]
		}
	}
	return nil
}
