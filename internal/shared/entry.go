package shared

import (
	"sync"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// entry is what an instance knows of one key. Its fields are guarded by mu.
type entry struct {
	key  string
	mu   sync.Mutex
	dead bool // dropped from the store: takers start a new entry
	mode Mode // how the key is decided, fixed when the entry is made
	// given is the last instant a request on the key carried (a Limiter on
	// a fake clock), 0 if none: the loop's calls for the key run at it.
	given int64
	limit ratekeeper.Limit
	p     algo.Limit
	local bool // decisions were made locally

	// The denial cache: refused for a cost of deniedN or more until
	// deniedUntil (remote µs).
	deniedUntil int64
	deniedN     int
	deniedAt    int64
	deniedLimit ratekeeper.Limit
	refusal     ratekeeper.Decision

	// busy is closed when the remote call in flight for the entry (a sync,
	// a lease) ends; nil when there is none.
	busy chan struct{}
	// lastUse is the local µs of the last decision.
	lastUse int64

	// Sync mode: state is the shared state last read plus pend, what the
	// instance admitted since its last cut; syncedAt the local µs of the
	// last answer.
	loaded   bool
	state    State
	pend     []delta
	touched  bool
	syncedAt int64
	// unanswered: the key's last sync failed, or the one in flight was not
	// answered within the store's time (ErrTimeout). Its decisions then
	// use what the instance knows at once, while that is recent enough
	// (the stale bound), rather than each wait for a sync first.
	unanswered bool

	// Lease mode: the quota held, oldest first, and the instance's recent
	// use, which sizes the next lease.
	grants            []grant
	usedPrev, usedCur int64
	periodStart       int64 // local µs
	remaining         int64 // what the remote had left after the last grant
}

func (e *entry) setLimit(l ratekeeper.Limit) {
	e.limit = l
	e.p = algo.Params(e.key, l)
}

// sameLimit makes the entry follow the limit a request carries: a key keeps
// one state per algorithm, as in the stores, so a reload that changes the
// limit keeps the count.
func (e *entry) sameLimit(l ratekeeper.Limit) {
	if e.limit != l {
		e.setLimit(l)
	}
}

// decide applies the algorithm to the local state. A window counter whose
// state is in a later window than now counts the request in that window.
// When now is the instance's estimate of the remote's clock (estimated),
// that happens when the estimate stepped back across a window's end as it
// was learned again. The decision then says where it counted: its instant
// is that window's start. (With a request's own instant, as the stores
// do, At stays that instant.)
func (e *entry) decide(now, n int64, estimated bool) algo.Result {
	var r algo.Result
	e.state, r = Decide(e.state, e.limit, &e.p, now, n)
	if estimated {
		r.At = e.countedAt(r.At)
	}
	return r
}

// countedAt is at, or the start of the state's window if that is later:
// the instant a request decided at at was counted at.
func (e *entry) countedAt(at int64) int64 {
	var end int64
	switch e.limit.Algorithm {
	case ratekeeper.FixedWindow:
		end = e.state.Window.End
	case ratekeeper.SlidingWindow:
		end = e.state.Sliding.End
	default:
		return at
	}
	if e.p.Cal.Unit != algo.NoCalendar {
		start, _ := e.p.Cal.Window(end - 1)
		return max(at, start)
	}
	return max(at, end-e.p.Period)
}

// add counts n admitted at instant at into the local state as of now.
func (e *entry) add(now, at, n int64) {
	e.state, _ = AddTo(e.state, e.limit, &e.p, now, at, n)
}

// ended reports whether a count admitted at instant at no longer counts at
// now: its window, or for the sliding window counter the one after it, has
// ended. A bucket's water drains in the remote as it would have.
func (e *entry) ended(now, at int64) bool {
	switch e.limit.Algorithm {
	case ratekeeper.FixedWindow:
		return algo.WindowEnd(&e.p, at) < algo.WindowEnd(&e.p, now)
	case ratekeeper.SlidingWindow:
		return algo.WindowEnd(&e.p, at) < algo.WindowEnd(&e.p, now)-e.p.Period
	}
	return false
}

// denied answers from the denial cache: a refusal while the key was refused
// for the same cost less than its retry-after ago, and nothing was
// admitted on it since. A larger cost would be refused too, but the store
// would give it a longer retry-after than the cache knows. The answer is
// the refusal's, its durations shortened by the time since (what the store
// would say: a refusal takes nothing). Its Remaining is as it was then: a
// bucket may have refilled a little since, a sliding window's previous
// count weighed a little less, and the cache reports no more than there is.
func (e *entry) denied(req ratekeeper.Request, now int64) (ratekeeper.Decision, bool) {
	if now >= e.deniedUntil || req.N != e.deniedN || now < e.deniedAt || req.Limit != e.deniedLimit {
		return ratekeeper.Decision{}, false
	}
	d := e.refusal
	since := time.Duration(now-e.deniedAt) * time.Microsecond
	d.RetryAfter -= since
	d.ResetAfter = max(0, d.ResetAfter-since)
	d.At = d.At.Add(since)
	return d, true
}

// deny remembers a refusal d of req made at now, unless its limit counts
// refusals (the sliding log's log_rejected: each one must reach the
// store).
func (e *entry) deny(req ratekeeper.Request, d ratekeeper.Decision, now int64) {
	if req.Limit.LogRejected {
		return
	}
	e.deniedUntil, e.deniedN, e.deniedAt, e.refusal = now+int64(d.RetryAfter/time.Microsecond), req.N, now, d
	e.deniedLimit = req.Limit
}

// nowFor is the instant to decide req at: its own, or the remote's clock as
// the instance estimates it.
func (s *Store) nowFor(req ratekeeper.Request) int64 {
	if !req.Now.IsZero() {
		t := req.Now.UnixMicro()
		s.given.Store(t)
		return t
	}
	return s.now()
}

// remoteNow is the instant to give the remote: the request's own, or zero
// for the remote's clock, which every instance's estimate follows.
func (s *Store) remoteNow(req ratekeeper.Request) int64 {
	if !req.Now.IsZero() {
		return req.Now.UnixMicro()
	}
	return 0
}
