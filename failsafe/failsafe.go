package failsafe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// Policy says what a decision is when the primary store fails.
type Policy string

// The policies.
const (
	// Allow fails open: the request passes.
	Allow Policy = "allow"
	// Deny fails closed: the request is refused.
	Deny Policy = "deny"
	// Local decides with the store WithLocalStore gives, the limit divided
	// by the number of instances.
	Local Policy = "local"
)

// ParsePolicy reads "allow", "deny" or "local".
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case Allow, Deny, Local:
		return p, nil
	}
	return "", fmt.Errorf("failsafe: unknown policy %q (allow, deny or local)", s)
}

// Defaults for the options.
const (
	DefaultTimeout     = 50 * time.Millisecond
	DefaultThreshold   = 5
	DefaultCooldown    = 250 * time.Millisecond
	DefaultLogInterval = 10 * time.Second
	// DenyRetryAfter is the RetryAfter of a decision refused by the Deny
	// policy.
	DenyRetryAfter = time.Second
)

// BreakerState is the circuit breaker's state.
type BreakerState string

// The breaker's states.
const (
	// Closed: calls go to the primary.
	Closed BreakerState = "closed"
	// Open: calls go straight to the policy until the cool-down ends.
	Open BreakerState = "open"
	// HalfOpen: one probe is testing the primary (a NetworkStore's probe
	// in the background, or else one call); calls go to the policy.
	HalfOpen BreakerState = "half-open"
)

// Stats are a Store's counters since New.
type Stats struct {
	// Calls is how many Take calls the store answered.
	Calls uint64
	// Errors is how many calls to the primary failed, timeouts included.
	Errors uint64
	// Timeouts is how many of Errors were the per-call timeout.
	Timeouts uint64
	// ShortCircuits is how many calls the open breaker sent straight to
	// the policy without asking the primary.
	ShortCircuits uint64
	// FallbackAllowed, FallbackDenied and FallbackLocal count the
	// decisions the policy made (for Local, allowed or not).
	FallbackAllowed, FallbackDenied, FallbackLocal uint64
	// BreakerOpens is how many times the breaker opened.
	BreakerOpens uint64
	// ProbeSuccesses and ProbeFailures count the open breaker's probes by
	// result: a success closed it, a failure (a timeout included) kept it
	// open for another cool-down. A NetworkStore's probe is not a call:
	// Errors and Timeouts do not count it.
	ProbeSuccesses, ProbeFailures uint64
	// Breaker is its state now.
	Breaker BreakerState
}

// Store is a ratekeeper.Store that bounds and survives its primary's
// failures. It is safe for concurrent use. Create it with New.
type Store struct {
	config
	primary ratekeeper.Store

	main     breaker    // the primary's, or the keys' of no known part
	mainOnly []*breaker // main alone, for batches

	calls, errs, timeouts, short    atomic.Uint64
	fbAllow, fbDeny, fbLocal, opens atomic.Uint64
	logMu                           sync.Mutex
	lastLog                         time.Time
	suppressed                      uint64

	// The breaker's probes, after the fields every call touches, which
	// keep their places.
	net                  NetworkStore // the primary, if it is one; else nil
	stopAnswers          func()       // ends net's answers, or nil
	parts                sync.Map     // part → *breaker, for net (read on every call: no lock)
	probeOK, probeFailed atomic.Uint64
	probeMu              sync.Mutex     // guards closed and the start of a probe
	closed               bool           // Close was called: no probe starts
	probes               sync.WaitGroup // the probe in flight, which Close waits for

	// late holds the slots (slotID) whose acquire on the primary failed
	// after it may have run there (a reply past the timeout), until their
	// release gives them back on the primary too.
	late sync.Map
}

// breaker is a circuit breaker: the store's, or one part's of a
// NetworkStore.
type breaker struct {
	state     atomic.Int32 // 0 closed, 1 open
	failures  atomic.Int32
	openUntil atomic.Int64 // unix ns: no probe before
	probing   atomic.Bool
	part      string // "" for the store's
}

// Interface guards.
var (
	_ ratekeeper.Store    = (*Store)(nil)
	_ ratekeeper.Resetter = (*Store)(nil)
)

// NetworkStore is a primary that reaches its state through servers, as the
// Redis store does. The failsafe store then watches the servers rather than
// the decisions. It bounds each call by TakeBy's deadline and keeps a
// circuit breaker per part. It probes an open one in the background. Only
// the servers' answers reset a count of failures.
type NetworkStore interface {
	ratekeeper.Store
	// TakeBy is Take bounded by deadline as well as by ctx, at less cost
	// than a context with that deadline. It returns by about the deadline,
	// with an error.
	TakeBy(ctx context.Context, req ratekeeper.Request, deadline time.Time) (ratekeeper.Decision, error)
	// Part names the servers that hold req's key now, or "" when not known
	// (the store's own breaker then serves). Parts fail apart. Part runs on
	// every decision and must be cheap.
	Part(req ratekeeper.Request) string
	// ProbePart reports whether part decides within ctx, without counting
	// anything a caller asked for; part "" asks every part. It returns nil
	// when part holds no key any more, so that its breaker closes.
	ProbePart(ctx context.Context, part string) error
	// OnAnswer has the store call f after each call its servers answered
	// with a reply, until stop is called. An error is no answer. f gets the
	// call's part as Part names it; it is cheap and safe for concurrent
	// use. New calls OnAnswer once; Close calls stop.
	OnAnswer(f func(part string)) (stop func())
}

// LocalStore is what the Local policy decides with: a store of this
// instance alone, such as memstore's.
type LocalStore interface {
	ratekeeper.Resetter
	ratekeeper.BatchStore
	ratekeeper.ConcurrencyStore
	Close() error
}

// config is what the options set.
type config struct {
	local      LocalStore // nil unless WithLocalStore
	timeout    time.Duration
	policy     Policy
	instances  int
	logger     *slog.Logger // nil: no logs
	logEvery   time.Duration
	onError    func(error)
	onFallback func(ratekeeper.Request, ratekeeper.Decision)
	clock      ratekeeper.Clock // nil: the system clock
	threshold  int32
	cooldown   time.Duration
}

// buildConfig applies opts to the defaults, which are all here.
func buildConfig(opts []Option) config {
	c := config{
		timeout:   DefaultTimeout,
		policy:    Allow,
		instances: 1,
		logEvery:  DefaultLogInterval,
		threshold: DefaultThreshold,
		cooldown:  DefaultCooldown,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	return c
}

// Option configures a Store.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTimeout bounds each call to the primary (default DefaultTimeout).
// Zero or less means no bound but the caller's context.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithPolicy sets what decides when the primary fails (default Allow).
// Local needs WithLocalStore too: New panics without it, rather than
// failing every decision once the primary fails.
func WithPolicy(p Policy) Option {
	return optionFunc(func(c *config) { c.policy = p })
}

// WithLocalStore gives the store the Local policy decides with, such as
// memstore.New(). The failsafe Store owns it: Close closes it.
func WithLocalStore(l LocalStore) Option {
	return optionFunc(func(c *config) { c.local = l })
}

// WithInstances sets how many instances share the primary, so that the
// Local policy gives each its share of a limit: rate and burst divided by
// n, at least 1. Default 1.
func WithInstances(n int) Option {
	return optionFunc(func(c *config) { c.instances = max(1, n) })
}

// WithBreaker sets the circuit breaker: it opens after threshold
// consecutive failures and probes the primary again after cooldown
// (defaults DefaultThreshold, DefaultCooldown). A threshold of zero or less
// disables it: every call then tries the primary.
func WithBreaker(threshold int, cooldown time.Duration) Option {
	return optionFunc(func(c *config) { c.threshold, c.cooldown = int32(threshold), cooldown })
}

// WithClock sets the clock of the breaker's cool-down and of the logs'
// rate limit. Default: the system clock. The per-call timeout runs on real
// time whatever the clock: it bounds a network call.
func WithClock(clk ratekeeper.Clock) Option {
	return optionFunc(func(c *config) { c.clock = clk })
}

// now reads the store's clock.
func (s *Store) now() time.Time {
	if s.clock != nil {
		return s.clock.Now()
	}
	return time.Now()
}

// WithLogger logs store errors (rate-limited) and breaker changes to l.
// Default: no logging.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithLogInterval sets how often at most a store error is logged (default
// DefaultLogInterval); the next line says how many were not.
func WithLogInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.logEvery = d })
}

// WithErrorHook calls f with each error of the primary (not for calls the
// open breaker short-circuits). f must be fast and safe for concurrent use.
func WithErrorHook(f func(error)) Option {
	return optionFunc(func(c *config) { c.onError = f })
}

// WithFallbackHook calls f with each decision the policy made instead of
// the primary. f must be fast and safe for concurrent use.
func WithFallbackHook(f func(ratekeeper.Request, ratekeeper.Decision)) Option {
	return optionFunc(func(c *config) { c.onFallback = f })
}

// New wraps primary, which stays the caller's to close. It panics if the
// policy is Local and no WithLocalStore gives its store.
func New(primary ratekeeper.Store, opts ...Option) *Store {
	s := &Store{config: buildConfig(opts), primary: primary}
	if s.policy == Local && s.local == nil {
		panic("failsafe: WithPolicy(Local) needs WithLocalStore (such as memstore.New()) to decide with")
	}
	s.mainOnly = []*breaker{&s.main}
	if n, ok := primary.(NetworkStore); ok {
		s.net = n
		s.stopAnswers = n.OnAnswer(s.answered)
	}
	return s
}

// Close waits for the breaker's probe in flight, if any (a NetworkStore's,
// bounded by the timeout), starts no other, stops listening to a
// NetworkStore's answers and closes the local store, if any.
// It does not close the primary.
func (s *Store) Close() error {
	s.probeMu.Lock()
	s.closed = true
	s.probeMu.Unlock()
	s.probes.Wait()
	if s.stopAnswers != nil {
		s.stopAnswers()
	}
	if s.local != nil {
		return s.local.Close()
	}
	return nil
}

// Stats returns the counters.
func (s *Store) Stats() Stats {
	st := Stats{
		Calls:           s.calls.Load(),
		Errors:          s.errs.Load(),
		Timeouts:        s.timeouts.Load(),
		ShortCircuits:   s.short.Load(),
		FallbackAllowed: s.fbAllow.Load(),
		FallbackDenied:  s.fbDeny.Load(),
		FallbackLocal:   s.fbLocal.Load(),
		BreakerOpens:    s.opens.Load(),
		ProbeSuccesses:  s.probeOK.Load(),
		ProbeFailures:   s.probeFailed.Load(),
		Breaker:         s.main.report(),
	}
	if s.net != nil {
		s.parts.Range(func(_, b any) bool {
			st.Breaker = worse(st.Breaker, b.(*breaker).report())
			return true
		})
	}
	return st
}

// report is b's state.
func (b *breaker) report() BreakerState {
	switch {
	case b.state.Load() == 0:
		return Closed
	case b.probing.Load():
		return HalfOpen
	}
	return Open
}

// worse is the state to report of a store two of whose breakers are in
// states a and b: open if either is, then half-open, then closed.
func worse(a, b BreakerState) BreakerState {
	rank := func(s BreakerState) int {
		switch s {
		case Open:
			return 2
		case HalfOpen:
			return 1
		}
		return 0
	}
	if rank(b) > rank(a) {
		return b
	}
	return a
}

// breakerFor is the breaker of req's part: the store's unless the primary
// is a NetworkStore and knows the part.
func (s *Store) breakerFor(req ratekeeper.Request) *breaker {
	if s.net == nil {
		return &s.main
	}
	part := s.net.Part(req)
	if part == "" {
		return &s.main
	}
	if b, ok := s.parts.Load(part); ok {
		return b.(*breaker)
	}
	b, _ := s.parts.LoadOrStore(part, &breaker{part: part})
	return b.(*breaker)
}

// Primary is the store failsafe wraps.
func (s *Store) Primary() ratekeeper.Store { return s.primary }

// Policy is the store's policy.
func (s *Store) Policy() Policy { return s.policy }

// Take asks the primary, within the timeout and unless the breaker is open;
// when that fails, the policy decides and the error is not returned. Only a
// caller's own cancelled context is returned as an error.
func (s *Store) Take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	s.calls.Add(1)
	b := s.breakerFor(req)
	ok, probe := s.admit(b)
	if !ok {
		s.short.Add(1)
		return s.fallback(ctx, req)
	}
	var (
		d   ratekeeper.Decision
		err error
	)
	if s.net != nil && s.timeout > 0 {
		deadline := time.Now().Add(s.timeout)
		d, err = s.net.TakeBy(ctx, req, deadline)
		err = s.settle(ctx, err, probe, err != nil && !time.Now().Before(deadline), b)
	} else {
		d, err = s.callPrimary(ctx, func(ctx context.Context) (ratekeeper.Decision, error) {
			return s.primary.Take(ctx, req)
		}, probe, b)
	}
	if err == nil {
		return d, nil
	}
	if ctx.Err() != nil {
		return ratekeeper.Decision{}, err
	}
	return s.fallback(ctx, req)
}

// Refund gives back to the primary, within the timeout and unless the
// breaker is open. When that fails, the local store gets it (the decision
// may have come from there), and no error is returned.
func (s *Store) Refund(ctx context.Context, req ratekeeper.Request, d ratekeeper.Decision) error {
	b := s.breakerFor(req)
	ok, probe := s.admit(b)
	if ok {
		_, err := s.callPrimary(ctx, func(ctx context.Context) (ratekeeper.Decision, error) {
			return ratekeeper.Decision{}, s.primary.Refund(ctx, req, d)
		}, probe, b)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
	}
	if s.local != nil {
		req.Limit = s.localLimit(req.Limit)
		return s.local.Refund(ctx, req, d)
	}
	return nil
}

// Reset forgets key's state for l in the primary, within the timeout
// (whatever the breaker says: a reset is an operator's, not a decision the
// policy could make instead), and in the Local policy's store. Its error
// is returned, not decided by the policy; a primary that is not a
// ratekeeper.Resetter gives an error wrapping ratekeeper.ErrNoReset, after
// the local store is reset.
func (s *Store) Reset(ctx context.Context, key string, l ratekeeper.Limit) error {
	if s.local != nil {
		if err := s.local.Reset(ctx, key, s.localLimit(l)); err != nil {
			return err
		}
	}
	r, ok := s.primary.(ratekeeper.Resetter)
	if !ok {
		return fmt.Errorf("failsafe: reset %q: primary %T: %w", key, s.primary, ratekeeper.ErrNoReset)
	}
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	if err := r.Reset(ctx, key, l); err != nil {
		return fmt.Errorf("failsafe: reset %q: %w", key, err)
	}
	return nil
}

func (s *Store) callPrimary(ctx context.Context, call func(context.Context) (ratekeeper.Decision, error), probe bool, bs ...*breaker) (ratekeeper.Decision, error) {
	cctx := ctx
	if s.timeout > 0 {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	d, err := call(cctx)
	return d, s.settle(ctx, err, probe, err != nil && cctx.Err() != nil, bs...)
}

// settle counts the outcome err of a call to the primary made for ctx on
// the parts of breakers bs. It returns err, saying so if it was the
// timeout (late: the call ended past it). A probe is a call on one part.
func (s *Store) settle(ctx context.Context, err error, probe, late bool, bs ...*breaker) error {
	if err == nil {
		if probe {
			s.probeOK.Add(1)
		} else if s.net != nil {
			return nil // the primary says what its servers answered
		}
		for _, b := range bs {
			s.succeeded(b, probe)
		}
		return nil
	}
	if ctx.Err() != nil {
		// The caller gave up: not the store's failure.
		if probe {
			bs[0].probing.Store(false)
		}
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || late {
		s.timeouts.Add(1)
		err = fmt.Errorf("failsafe: store call timed out after %v: %w", s.timeout, err)
	}
	s.errs.Add(1)
	if probe {
		s.probeFailed.Add(1)
	}
	for _, b := range bs {
		s.failed(b, probe)
	}
	if s.onError != nil {
		s.onError(err)
	}
	s.logError(err)
	return err
}

// admit says whether to call the primary, and whether the call is the
// half-open breaker's probe. With a NetworkStore, no call is: the call
// that finds the cool-down over starts the probe in the background and is
// not admitted.
func (s *Store) admit(b *breaker) (ok, probe bool) {
	if s.threshold <= 0 || b.state.Load() == 0 {
		return true, false
	}
	if s.now().UnixNano() < b.openUntil.Load() {
		return false, false
	}
	if b.probing.CompareAndSwap(false, true) {
		if s.net != nil {
			s.startProbe(b)
			return false, false
		}
		return true, true
	}
	return false, false
}

// startProbe runs the NetworkStore's probe of b's part in a goroutine of
// its own, unless Close was called. The caller holds b.probing.
func (s *Store) startProbe(b *breaker) {
	s.probeMu.Lock()
	if s.closed {
		s.probeMu.Unlock()
		b.probing.Store(false)
		return
	}
	s.probes.Add(1)
	s.probeMu.Unlock()
	go s.probe(b)
}

// probe asks the NetworkStore whether b's part decides, within the timeout: yes
// closes the breaker, no keeps it open for another cool-down.
func (s *Store) probe(b *breaker) {
	defer s.probes.Done()
	timeout := s.timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	err := s.net.ProbePart(ctx, b.part)
	cancel()
	if err == nil {
		s.probeOK.Add(1)
		s.succeeded(b, true)
		if b.part != "" {
			// Forgotten once closed, so that parts that come and go (a
			// Cluster's nodes over months) are not kept.
			if b.state.Load() == 0 {
				s.parts.CompareAndDelete(b.part, b)
			}
		}
		return
	}
	s.probeFailed.Add(1)
	s.failed(b, true)
	s.logError(fmt.Errorf("failsafe: probe: %w", err))
}

// succeeded counts a call to the primary that succeeded. Only the probe
// closes an open breaker. A call that began before the breaker opened and
// succeeded after it says nothing of the part that fails. Closing on such
// calls made the breaker flap, and the local fallback admit beside Redis.
func (s *Store) succeeded(b *breaker, probe bool) {
	if b.state.Load() != 0 {
		if !probe {
			return
		}
		if b.state.CompareAndSwap(1, 0) && s.logger != nil {
			s.logger.Info("ratekeeper store is back: circuit breaker closed", s.breakerAttrs(b)...)
		}
	}
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if probe {
		b.probing.Store(false)
	}
}

// answered counts a call the NetworkStore's servers answered on part: the
// part's count of consecutive failures starts again. Like any call but the
// probe, it does not close an open breaker (see succeeded).
func (s *Store) answered(part string) {
	b := &s.main
	if part != "" {
		v, ok := s.parts.Load(part)
		if !ok {
			return // no decision on part has failed since its breaker was forgotten
		}
		b = v.(*breaker)
	}
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
}

func (s *Store) failed(b *breaker, probe bool) {
	if s.threshold <= 0 {
		return
	}
	if probe {
		b.openUntil.Store(s.now().Add(s.cooldown).UnixNano())
		b.probing.Store(false)
		return
	}
	if b.failures.Add(1) >= s.threshold && b.state.CompareAndSwap(0, 1) {
		b.openUntil.Store(s.now().Add(s.cooldown).UnixNano())
		s.opens.Add(1)
		if s.logger != nil {
			s.logger.Warn("ratekeeper store is failing: circuit breaker open", append(s.breakerAttrs(b), "failures", b.failures.Load(), "cooldown", s.cooldown)...)
		}
	}
}

// breakerAttrs are the log attributes that name b.
func (s *Store) breakerAttrs(b *breaker) []any {
	if b.part == "" {
		return []any{"policy", string(s.policy)}
	}
	return []any{"policy", string(s.policy), "part", b.part}
}

func (s *Store) logError(err error) {
	if s.logger == nil {
		return
	}
	s.logMu.Lock()
	now := s.now()
	if !s.lastLog.IsZero() && now.Sub(s.lastLog) < s.logEvery {
		s.suppressed++
		s.logMu.Unlock()
		return
	}
	n := s.suppressed
	s.lastLog, s.suppressed = now, 0
	s.logMu.Unlock()
	s.logger.Warn("ratekeeper store error", "err", err, "policy", string(s.policy), "not_logged_since_last", n)
}

// localLimit is the Local policy's share of l.
func (s *Store) localLimit(l ratekeeper.Limit) ratekeeper.Limit {
	if s.instances <= 1 {
		return l
	}
	l.Rate = max(1, l.Rate/s.instances)
	if l.Burst > 0 {
		l.Burst = max(1, l.Burst/s.instances)
	}
	return l
}

func (s *Store) fallback(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	d, err := s.policyDecision(ctx, req.Limit.Capacity(), req.Now, func(ctx context.Context) (ratekeeper.Decision, error) {
		lreq := req
		lreq.Limit = s.localLimit(req.Limit)
		lreq.N = min(req.N, lreq.Limit.Capacity())
		return s.local.Take(ctx, lreq)
	})
	if err == nil && s.onFallback != nil {
		s.onFallback(req, d)
	}
	return d, err
}

// policyDecision is the policy's decision on a request whose limit is
// limit, at now (the store's clock if zero). local makes the Local
// policy's decision on the local store. Allow's and Deny's count nothing:
// Remaining and ResetAfter stay zero, and Fallback says they mean nothing.
func (s *Store) policyDecision(ctx context.Context, limit int, now time.Time, local func(context.Context) (ratekeeper.Decision, error)) (ratekeeper.Decision, error) {
	if now.IsZero() {
		now = s.now()
	}
	switch s.policy {
	case Deny:
		s.fbDeny.Add(1)
		return ratekeeper.Decision{Fallback: ratekeeper.FallbackUncounted, Limit: limit, RetryAfter: DenyRetryAfter, At: now}, nil
	case Local:
		s.fbLocal.Add(1)
		d, err := local(ctx)
		if err != nil {
			return d, err
		}
		d.Fallback = ratekeeper.FallbackLocal
		return d, nil
	}
	s.fbAllow.Add(1)
	return ratekeeper.Decision{Allowed: true, Fallback: ratekeeper.FallbackUncounted, Limit: limit, At: now}, nil
}

// Interface guard: TakeAll passes a batch to a primary that is a
// ratekeeper.BatchStore (the Redis store decides it in one round trip).
var _ ratekeeper.BatchStore = (*Store)(nil)

// TakeAll decides reqs together on the primary (ratekeeper.TakeAll: one
// batch if the primary is a BatchStore, else take and refund), within the
// timeout and unless the breaker is open. When that fails the policy
// decides every request: Allow allows all, Deny refuses all, Local decides
// the batch on the local store, all or none.
func (s *Store) TakeAll(ctx context.Context, reqs []ratekeeper.Request, out []ratekeeper.Decision) (bool, error) {
	s.calls.Add(1)
	bs := s.breakersFor(reqs)
	ok, probe := s.admitAll(bs)
	if ok {
		var all bool
		_, err := s.callPrimary(ctx, func(ctx context.Context) (ratekeeper.Decision, error) {
			var err error
			all, err = ratekeeper.TakeAll(ctx, s.primary, reqs, out)
			return ratekeeper.Decision{}, err
		}, probe, bs...)
		if err == nil {
			return all, nil
		}
		if ctx.Err() != nil {
			return false, err
		}
	} else {
		s.short.Add(1)
	}
	if s.policy != Local {
		all := true
		for i, req := range reqs {
			d, err := s.fallback(ctx, req)
			if err != nil {
				return false, err
			}
			out[i] = d
			all = all && d.Allowed
		}
		return all, nil
	}
	local := make([]ratekeeper.Request, len(reqs))
	for i, req := range reqs {
		local[i] = req
		local[i].Limit = s.localLimit(req.Limit)
		local[i].N = min(req.N, local[i].Limit.Capacity())
	}
	all, err := s.local.TakeAll(ctx, local, out)
	if err != nil {
		return false, err
	}
	for i := range out {
		out[i].Fallback = ratekeeper.FallbackLocal
	}
	s.fbLocal.Add(uint64(len(reqs)))
	if s.onFallback != nil {
		for i, req := range reqs {
			s.onFallback(req, out[i])
		}
	}
	return all, nil
}

// breakersFor are the breakers of reqs' parts, each once.
func (s *Store) breakersFor(reqs []ratekeeper.Request) []*breaker {
	if s.net == nil || len(reqs) == 0 {
		return s.mainOnly
	}
	var bs []*breaker // the parts' breakers; main's is added at the end
	main := false
	for _, req := range reqs {
		b := s.breakerFor(req)
		if b == &s.main {
			main = true
		} else if !slices.Contains(bs, b) {
			bs = append(bs, b)
		}
	}
	if len(bs) == 0 {
		return s.mainOnly
	}
	if main {
		bs = append(bs, &s.main)
	}
	return bs
}

// admitAll says whether to call the primary for a batch on the parts of
// bs: when every breaker admits it. A batch is a probe only on one part.
// A batch on several parts is not admitted while one of them is open; that
// one's probe comes from a call on it alone, or from the background.
func (s *Store) admitAll(bs []*breaker) (ok, probe bool) {
	if len(bs) == 1 {
		return s.admit(bs[0])
	}
	for _, b := range bs {
		if s.threshold > 0 && b.state.Load() != 0 {
			s.admit(b) // starts a NetworkStore's probe once the cool-down has passed
			return false, false
		}
	}
	return true, false
}
