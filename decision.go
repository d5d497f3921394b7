package ratekeeper

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// Decision is what a Limiter answers for one request.
//
// A refused request is a Decision with Allowed == false and a nil error:
// errors are for broken stores and bad input, never for a refusal.
type Decision struct {
	// Allowed says whether the request may proceed (after Delay).
	Allowed bool
	// Fallback is zero (NoFallback) when the store decided. A store that
	// stands in for a failed one (package failsafe) sets it on the
	// decisions its failure policy made instead, and says by its value
	// which figures below were computed.
	Fallback Fallback
	// Limit is the most that can pass at one instant: Burst for the
	// buckets, Rate for the window algorithms.
	Limit int
	// Remaining is how many more single requests would be allowed right
	// now, in 0..Limit.
	Remaining int
	// RetryAfter is zero when allowed; when refused it is the least wait
	// after which the same request would pass if nothing else happened,
	// rounded up to the microsecond: never earlier. A request of cost 0,
	// which is allowed, has here the wait for one of cost 1 (see
	// Request.N and Limiter.Peek).
	RetryAfter time.Duration
	// ResetAfter is how long until the limit is fully replenished, as if
	// the key had never been used.
	ResetAfter time.Duration
	// Delay, for Reserve, is how long to wait before proceeding: the
	// request's slot in the leaky bucket's queue, or the wait for the token
	// bucket's tokens. Zero for Allow.
	Delay time.Duration
	// At is the instant the decision counted for: the Limiter's clock, or,
	// without one, the store's (Redis server time for the Redis store).
	At time.Time
}

// Fallback says whether a Decision came from the store or from a failure
// policy that stood in for it, and so which of its figures were computed.
type Fallback uint8

// The values of Decision.Fallback.
const (
	// NoFallback: the store decided; every figure is its own.
	NoFallback Fallback = iota
	// FallbackUncounted: the store did not answer and a fixed policy
	// decided without counting anything (failsafe's Allow and Deny).
	// Allowed, Limit and At hold, and a refusal's RetryAfter is the
	// policy's wait; Remaining and ResetAfter are zero and mean nothing:
	// no count was read. A refusal says that the store is unavailable,
	// not that the client used up its limit.
	FallbackUncounted
	// FallbackLocal: the store did not answer and a local stand-in store
	// decided, with its own count of its share of the limit (failsafe's
	// Local): its figures are computed, for that share.
	FallbackLocal
)

// String names f: "none", "uncounted" or "local".
func (f Fallback) String() string {
	switch f {
	case NoFallback:
		return "none"
	case FallbackUncounted:
		return "uncounted"
	case FallbackLocal:
		return "local"
	}
	return "Fallback(" + strconv.Itoa(int(f)) + ")"
}

// Clock tells the time. The Limiter asks it once per decision.
type Clock interface {
	Now() time.Time
}

// Request is one question a Limiter puts to a Store.
type Request struct {
	// Key identifies the client (and, for stores shared by several limits,
	// the limit): requests with the same Key and Algorithm share one count.
	Key string
	// Limit is a validated limit.
	Limit Limit
	// N is the cost, 0 <= N <= Limit.Capacity(). N == 0 asks without
	// taking: the decision is allowed, and its RetryAfter is the wait until
	// a request of cost 1 would be (zero for a token bucket's Reserve,
	// which never refuses).
	N int
	// Reserve asks for a place rather than a decision now: the leaky
	// bucket's FIFO queue, the token bucket's wait for tokens. The window
	// algorithms decide as for Allow.
	Reserve bool
	// Now is the instant to decide at; the zero Time means the store's own
	// clock.
	Now time.Time
}

// Store keeps the state of limits by key and applies the algorithms to it.
// Every Store makes the same decisions for the same requests at the same
// instants; package storetest checks it. Implementations are safe for
// concurrent use.
type Store interface {
	// Take decides req and records what it took.
	Take(ctx context.Context, req Request) (Decision, error)
	// Refund gives back what an allowed decision d for req took, as far as
	// the algorithm allows (see Limiter.Refund).
	Refund(ctx context.Context, req Request, d Decision) error
}

// ErrNoReset is wrapped by the error Limiter.Reset returns for a store that
// is not a Resetter.
var ErrNoReset = errors.New("store cannot reset keys")

// Resetter is a Store that can forget a key's state: the memory, Redis and
// failsafe stores are. A store need not implement it; Limiter.Reset then
// fails with ErrNoReset.
type Resetter interface {
	Store
	// Reset forgets the state key holds for limit l (for its algorithm),
	// so that the next request on it starts fresh. A key without state is
	// not an error.
	Reset(ctx context.Context, key string, l Limit) error
}

// BatchStore is a Store that can decide several requests as one: all are
// allowed, or none is and none takes anything. The memory store does this
// exactly, under the locks of every key involved.
type BatchStore interface {
	Store
	// TakeAll decides reqs together, writing one Decision per request to
	// out (len(out) == len(reqs)), and reports whether all were allowed.
	// Keys must be distinct.
	TakeAll(ctx context.Context, reqs []Request, out []Decision) (bool, error)
}

// Binder is a Store that decides faster when it knows the limit ahead of
// time; a store need not implement it. New binds the Limiter to a Binder
// once, and the Limiter then asks the bound store instead of Store.Take.
// Each decision passes only a key, a cost and whether to reserve, and skips
// what the store does once per limit (the memory store converts the limit
// and picks the algorithm at Bind). Callers other than a Limiter use
// Store.Take, so a Binder still decides everything there too.
type Binder interface {
	Store
	// Bind returns the store bound to l, which New has validated, deciding at
	// clock's time, or at the store's own when clock is nil.
	Bind(l Limit, clock Clock) BoundStore
}

// BoundStore is a store bound to one limit l and one clock by Binder.Bind.
// Take(ctx, r) decides exactly as the store's Take would decide this:
//
//	Request{Key: r.Key, Limit: l, N: r.N, Reserve: r.Reserve, Now: clock.Now()}
//
// with Now zero when clock is nil. It may read the clock as late as it
// likes (the memory store reads it under the key's lock). storetest.Run
// runs every timeline through both. Implementations are safe for
// concurrent use.
type BoundStore interface {
	Take(ctx context.Context, r BoundRequest) (Decision, error)
}

// BoundRequest is what a Limiter asks a BoundStore: a Request without the
// limit and the instant, which the bound store holds.
type BoundRequest struct {
	Key     string // as Request.Key
	N       int    // as Request.N
	Reserve bool   // as Request.Reserve
}

// TakeAll decides reqs together on s: it reports true only if every request
// is allowed, and then each has taken its cost. When one is refused, none
// keeps anything, and each decision says what is left: an allowed one's
// Remaining counts its cost as not taken. A BatchStore guarantees that
// atomically; other stores go through TakeEach.
func TakeAll(ctx context.Context, s Store, reqs []Request, out []Decision) (bool, error) {
	if b, ok := s.(BatchStore); ok {
		return b.TakeAll(ctx, reqs, out)
	}
	return TakeEach(ctx, reqs, out, s.Take, s.Refund)
}

// TakeEach is the all or none of TakeAll made of single-key calls, for a
// store whose batch spans keys it cannot decide together. It decides reqs
// in order with take. When one is refused or fails, refund gives back what
// those before it took. That is exact unless another client took from the
// same keys in between. After a refusal, out holds what each later request
// would see, asked at cost 0, and Untaken turns the earlier ones into what
// is left.
func TakeEach(ctx context.Context, reqs []Request, out []Decision,
	take func(context.Context, Request) (Decision, error),
	refund func(context.Context, Request, Decision) error) (bool, error) {
	for i, req := range reqs {
		d, err := take(ctx, req)
		if err != nil {
			refundAll(ctx, refund, reqs[:i], out[:i])
			return false, err
		}
		out[i] = d
		if !d.Allowed {
			for j := i + 1; j < len(reqs); j++ {
				q := reqs[j]
				q.N = 0
				out[j], _ = take(ctx, q)
			}
			refundAll(ctx, refund, reqs[:i], out[:i])
			Untaken(reqs[:i], out[:i])
			return false, nil
		}
	}
	return true, nil
}

// Untaken turns the allowed decisions of a refused batch, which say what
// taking would have left, into what is left: each one's cost is added back
// to its Remaining, within its limit. A BatchStore that decides a refused
// batch as if taking calls it before it returns.
func Untaken(reqs []Request, out []Decision) {
	for i := range reqs {
		if out[i].Allowed && reqs[i].N > 0 {
			out[i].Remaining = min(out[i].Remaining+reqs[i].N, out[i].Limit)
		}
	}
}

// refundAll gives back what the allowed decisions ds of reqs took.
func refundAll(ctx context.Context, refund func(context.Context, Request, Decision) error, reqs []Request, ds []Decision) {
	for i := range reqs {
		if ds[i].Allowed && reqs[i].N > 0 {
			_ = refund(ctx, reqs[i], ds[i])
		}
	}
}
