package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
	"github.com/ratekeeper/ratekeeper/internal/ratefields"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/internal/server/tracing"
	"github.com/ratekeeper/ratekeeper/internal/topk"
	"github.com/ratekeeper/ratekeeper/promlimit"
)

// ErrInvalid marks a request the service cannot answer: no domain, no
// descriptors, an empty descriptor, or more descriptors or entries than
// allowed. gRPC answers it with InvalidArgument and HTTP with 400.
var ErrInvalid = errors.New("invalid request")

// Defaults of WithMaxDescriptors and WithMaxEntries. Envoy sends one
// descriptor per rate_limits entry that applies to the route (the route's
// own, and the virtual host's if it includes them), and one entry per
// action of it. Configurations in the wild use a handful of each. The
// defaults are an order of magnitude above that. They keep one request to
// at most 64 store calls, where 100,000 descriptors took 100,000
// sequential ones.
const (
	DefaultMaxDescriptors = 64
	DefaultMaxEntries     = 32
)

// Service answers rate limit requests with Rules and a Store. It
// implements envoy.service.ratelimit.v3.RateLimitService; Decide is the
// same answer for other transports. Its methods are safe for concurrent
// use, SetRules included.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	config
	store ratekeeper.Store
	cur   atomic.Pointer[served]
}

// config is what the options set.
type config struct {
	allOrNothing   bool
	headers        bool
	maxDescriptors int
	maxEntries     int
	logger         *slog.Logger
	metrics        *Metrics         // nil: none
	clock          ratekeeper.Clock // nil: the system clock
	top            *topk.Board      // nil: no lists of limited clients
	tracing        *tracing.Tracing // nil: no spans
	storeMode      string           // what decide spans say of the store
}

// buildConfig applies opts to the defaults, which are all here.
func buildConfig(opts []Option) config {
	c := config{maxDescriptors: DefaultMaxDescriptors, maxEntries: DefaultMaxEntries}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// served is a Rules with the metrics of each of its rules looked up once.
type served struct {
	rules    *Rules
	counters []ruleCounters
}

type ruleCounters struct {
	allowed, limited, shadow, over prometheus.Counter
}

// Option configures a Service.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithAllOrNothing makes a request that is over the limit on one
// descriptor use no quota on the others (shadow descriptors excepted: they
// are decided on their own). Off by default, as in the reference
// service, where every descriptor within its limit counts the request even
// when another refuses it.
func WithAllOrNothing(on bool) Option {
	return optionFunc(func(c *config) { c.allOrNothing = on })
}

// WithResponseHeaders adds RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset (and Retry-After when over the limit) to
// response_headers_to_add, from the descriptor with the least remaining.
// Off by default.
func WithResponseHeaders(on bool) Option {
	return optionFunc(func(c *config) { c.headers = on })
}

// WithMaxDescriptors refuses, as invalid, a request of more than n
// descriptors; n <= 0 keeps the default, DefaultMaxDescriptors.
func WithMaxDescriptors(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxDescriptors = n
		}
	})
}

// WithMaxEntries refuses, as invalid, a request with a descriptor of more
// than n entries; n <= 0 keeps the default, DefaultMaxEntries.
func WithMaxEntries(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxEntries = n
		}
	})
}

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// Metrics are the decision service's metrics: its decisions by rule and
// result (ratekeeper_decisions_total, the series the gateway exports) and
// ratekeeper_rls_over_limit_total{descriptor}, the over-limit answers per
// rule, labelled with the request's values where detailed_metric asks.
type Metrics struct {
	decisions *promlimit.Metrics
	overLimit *prometheus.CounterVec
}

// NewMetrics registers the service's metrics on reg. The decisions are
// counted in decisions when it is given (a server that registered them
// already), else in new ones on reg. A second registration is an error,
// not a panic.
func NewMetrics(reg prometheus.Registerer, decisions *promlimit.Metrics) (*Metrics, error) {
	if decisions == nil {
		var err error
		if decisions, err = promlimit.New(reg); err != nil {
			return nil, err
		}
	}
	m := &Metrics{decisions: decisions, overLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratekeeper_rls_over_limit_total",
		Help: "Descriptors answered over the limit (shadow mode included), by descriptor: the configured path, or the request's values where detailed_metric is set.",
	}, []string{"descriptor"})}
	if err := reg.Register(m.overLimit); err != nil {
		return nil, err
	}
	return m, nil
}

// WithMetrics counts what the service decides in m. Default: none.
func WithMetrics(m *Metrics) Option {
	return optionFunc(func(c *config) { c.metrics = m })
}

// WithClock sets the clock for what the service computes itself (the
// reset of a limit of zero requests); decisions come from the store's
// clock. Default: the system clock.
func WithClock(clk ratekeeper.Clock) Option {
	return optionFunc(func(c *config) { c.clock = clk })
}

// NewService returns a Service answering with rules from store.
func NewService(store ratekeeper.Store, rules *Rules, opts ...Option) *Service {
	s := &Service{config: buildConfig(opts), store: store}
	s.SetRules(rules)
	return s
}

// SetRules serves rules from the next request on, and drops the metrics
// series of rules that are gone.
func (s *Service) SetRules(rules *Rules) {
	sv := &served{rules: rules, counters: make([]ruleCounters, len(rules.rules))}
	if s.metrics != nil {
		for i, r := range rules.rules {
			sv.counters[i] = ruleCounters{
				allowed: s.metrics.decisions.PromCounter(r.stat, metrics.Allowed),
				limited: s.metrics.decisions.PromCounter(r.stat, metrics.Limited),
				shadow:  s.metrics.decisions.PromCounter(r.stat, metrics.ShadowLimited),
			}
			if r.quota {
				sv.counters[i].over = s.metrics.decisions.PromCounter(r.stat, metrics.OverLimit)
			}
		}
	}
	old := s.cur.Swap(sv)
	if s.top != nil {
		s.top.Forget(rules.names())
	}
	if old != nil && s.metrics != nil {
		keep := make(map[string]bool, len(rules.rules))
		for _, r := range rules.rules {
			keep[r.stat] = true
		}
		for _, r := range old.rules.rules {
			if !keep[r.stat] {
				s.metrics.decisions.ForgetRule(r.stat)
				s.metrics.overLimit.DeleteLabelValues(r.stat)
			}
		}
	}
}

// Rules returns the rules being served.
func (s *Service) Rules() *Rules { return s.cur.Load().rules }

// ShouldRateLimit implements the gRPC method: Decide, with errors as gRPC
// statuses (InvalidArgument, or Unavailable when the store fails).
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := s.Decide(ctx, req)
	if err != nil {
		switch {
		case errors.Is(err, ErrInvalid):
			return nil, status.Error(codes.InvalidArgument, err.Error())
		case errors.Is(err, context.Canceled):
			return nil, status.Error(codes.Canceled, err.Error())
		case errors.Is(err, context.DeadlineExceeded):
			return nil, status.Error(codes.DeadlineExceeded, err.Error())
		}
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return resp, nil
}

// slot is one descriptor of a request while it is decided.
type slot struct {
	r     *rule
	n     int
	key   string
	stat  string // detailed metrics label, or ""
	kind  slotKind
	d     ratekeeper.Decision
	over  bool
	reset time.Duration
}

type slotKind uint8

const (
	noLimit   slotKind = iota // no rule, or replaced: OK without a limit
	unlimited                 // OK, remaining MaxUint32
	denyAll                   // requests_per_unit 0
	tooMany                   // cost above capacity: refused, asked without taking
	take                      // asks the store
)

// Decide answers req: a status per descriptor, in order, and the overall
// code. A refusal is an answer; errors are for bad requests (ErrInvalid)
// and store failures.
//
// The store's failure policy may decide a descriptor without counting
// (ratekeeper.FallbackUncounted: failsafe's allow and deny, while Redis is
// down). Its status then has its code and nothing else: no current_limit,
// limit_remaining or duration_until_reset, which nothing computed and from
// which Envoy would build its X-RateLimit-* headers. When such a refusal
// alone puts the request over the limit, the overall code is OVER_LIMIT,
// so that Envoy refuses the request whatever its failure_mode_deny. The
// raw_body, which Envoy sends as the body of its answer, then says that
// the rate limiter's store is unavailable. With WithResponseHeaders,
// Retry-After is the policy's wait.
//
// A descriptor in quota mode over its limit has the status OVER_LIMIT,
// but leaves the overall code as the others make it: Envoy passes the
// request on and may route on the status.
//
// A descriptor whose cost (hits_addend) is more than its limit can ever
// allow is OVER_LIMIT, not an error: Envoy lets a request through on an
// error unless failure_mode_deny. Nothing is taken; its status has what is
// really left and no duration_until_reset. No wait lets the request pass,
// so the answer has no Retry-After, and raw_body says so.
func (s *Service) Decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, _, err := s.answer(ctx, req, decideOp)
	return resp, err
}

// Peek answers req as Decide would, taking nothing. Each descriptor is
// asked at a cost of zero; its hits_addend is not read. Its status is
// OVER_LIMIT when a request of cost 1 would be refused now, and its
// duration_until_reset is the wait until it would pass (see
// ratekeeper.Limiter.Peek). Nothing is counted in the metrics of
// decisions.
func (s *Service) Peek(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, _, err := s.answer(ctx, req, peekOp)
	return resp, err
}

// Reset forgets, in store, the counter of each descriptor of req that has
// a limit, so that its next request starts fresh. It reports which
// descriptors it reset: those without a limit, or unlimited, have no
// counter. store is the service's store as opened (a
// ratekeeper.Resetter), not one that records decisions: ratekeeper serve
// passes its own. A store that cannot reset gives an error wrapping
// ratekeeper.ErrNoReset.
func (s *Service) Reset(ctx context.Context, store ratekeeper.Store, req *rlsv3.RateLimitRequest) ([]bool, error) {
	rs, ok := store.(ratekeeper.Resetter)
	if !ok {
		return nil, fmt.Errorf("reset: %T: %w", store, ratekeeper.ErrNoReset)
	}
	_, slots, err := s.slots(req)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(slots))
	for i, sl := range slots {
		if sl.asks() {
			if err := rs.Reset(ctx, sl.key, sl.r.limit); err != nil {
				return out, fmt.Errorf("store: %w", err)
			}
			out[i] = true
		}
	}
	return out, nil
}

// answerOp is what answer does with the counters.
type answerOp uint8

const (
	decideOp answerOp = iota // take (Decide)
	peekOp                   // ask without taking (Peek)
)

// notes is what an answer says beyond the response's fields: what it owes
// to the store's failure policy rather than to counts, and which costs can
// never pass. Its zero value: nothing.
type notes struct {
	// uncounted[i] says that the policy decided descriptor i without
	// counting; nil when it decided none.
	uncounted []bool
	// refused, when positive, is the policy's wait: its refusal, and no
	// limit's, put the request over the limit.
	refused time.Duration
	// tooMany[i] says that descriptor i costs more than its limit can ever
	// allow; nil when none does.
	tooMany []bool
}

// answer is Decide, with what the answer owes to the store's failure
// policy.
func (s *Service) answer(ctx context.Context, req *rlsv3.RateLimitRequest, op answerOp) (*rlsv3.RateLimitResponse, notes, error) {
	cur, slots, err := s.slots(req)
	if err != nil {
		return nil, notes{}, err
	}
	var span tracing.Span
	if s.tracing != nil {
		ctx, span = s.tracing.Internal(ctx, "ratekeeper.decide")
	}
	if op == peekOp {
		err = s.peek(ctx, slots)
	} else {
		err = s.decide(ctx, slots)
	}
	if err != nil {
		span.Fail(err)
		span.End()
		return nil, notes{}, err
	}
	resp, o := s.respond(cur, slots, op == decideOp)
	if s.top != nil && op == decideOp {
		s.noteTop(req, slots)
	}
	if s.tracing != nil {
		s.endDecision(span, req, slots, resp)
	}
	return resp, o, nil
}

// peek asks for each slot's state without taking: over when a request of
// cost 1 would be refused now.
func (s *Service) peek(ctx context.Context, slots []slot) error {
	for i := range slots {
		sl := &slots[i]
		if !sl.asks() {
			continue
		}
		sl.n, sl.kind = 0, take
		d, err := s.take(ctx, ratekeeper.Request{Key: sl.key, Limit: sl.r.limit, N: 0})
		if err != nil {
			return err
		}
		sl.d = d
		sl.over = (!d.Allowed || d.RetryAfter > 0) && !(sl.r.quota && d.Fallback == ratekeeper.FallbackUncounted)
	}
	return nil
}

// slots matches req's descriptors to the rules being served (cur, which
// the answer counts in): each slot's rule, key, cost and kind.
func (s *Service) slots(req *rlsv3.RateLimitRequest) (*served, []slot, error) {
	if err := s.check(req); err != nil {
		return nil, nil, err
	}
	cur := s.cur.Load()
	slots, replaced, err := s.match(cur.rules, req)
	if err != nil {
		return nil, nil, err
	}
	for i := range slots {
		s.classify(&slots[i], replaced)
	}
	return cur, slots, nil
}

// check refuses, as ErrInvalid, a request without a domain or
// descriptors, or with more descriptors than allowed.
func (s *Service) check(req *rlsv3.RateLimitRequest) error {
	n := len(req.GetDescriptors())
	switch {
	case req.GetDomain() == "":
		return fmt.Errorf("%w: the domain must not be empty", ErrInvalid)
	case n == 0:
		return fmt.Errorf("%w: the descriptor list must not be empty", ErrInvalid)
	case n > s.maxDescriptors:
		return fmt.Errorf("%w: %d descriptors, more than the limit of %d", ErrInvalid, n, s.maxDescriptors)
	}
	return nil
}

// match fills a slot per descriptor of req from rules: its rule, cost, key
// and metrics label. replaced holds the names of the rules that the
// matched rules replace; nil when none does.
func (s *Service) match(rules *Rules, req *rlsv3.RateLimitRequest) (slots []slot, replaced map[string]bool, err error) {
	descs := req.GetDescriptors()
	// Requests carry a descriptor or two of a few entries: the slots take
	// one allocation, and the entries and the match path start on the stack.
	var (
		slotBuf  [2]slot
		entryBuf [4]Entry
		pathBuf  [4]*node
	)
	if len(descs) <= len(slotBuf) {
		slots = slotBuf[:len(descs)]
	} else {
		slots = make([]slot, len(descs))
	}
	entries, path := entryBuf[:0], pathBuf[:0]
	_, known := rules.domains[req.GetDomain()]
	for i, d := range descs {
		if err := s.checkEntries(i, d); err != nil {
			return nil, nil, err
		}
		entries = entries[:0]
		for _, e := range d.GetEntries() {
			entries = append(entries, Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		var ov *ratelimitv3.RateLimitDescriptor_RateLimitOverride
		if known {
			ov = d.GetLimit()
		}
		sl := &slots[i]
		sl.n = hits(req, d)
		path = fill(sl, rules, req.GetDomain(), entries, path, ov)
		if sl.r != nil {
			for _, name := range sl.r.replaces {
				if replaced == nil {
					replaced = map[string]bool{}
				}
				replaced[name] = true
			}
		}
	}
	return slots, replaced, nil
}

// checkEntries refuses, as ErrInvalid, descriptor i when it has no entries
// or more than allowed.
func (s *Service) checkEntries(i int, d *ratelimitv3.RateLimitDescriptor) error {
	switch n := len(d.GetEntries()); {
	case n == 0:
		return fmt.Errorf("%w: descriptor %d has no entries", ErrInvalid, i)
	case n > s.maxEntries:
		return fmt.Errorf("%w: descriptor %d has %d entries, more than the limit of %d", ErrInvalid, i, n, s.maxEntries)
	}
	return nil
}

// fill sets sl's rule for a descriptor of entries in domain: the one
// rules match, or the limit override ov brings. A rule with a limit also
// sets sl's store key and, with detailed_metric, its metrics label. path
// is the match's working space, returned for the next descriptor.
func fill(sl *slot, rules *Rules, domain string, entries []Entry, path []*node, ov *ratelimitv3.RateLimitDescriptor_RateLimitOverride) []*node {
	var r *rule
	r, path = rules.match(domain, entries, path)
	if ov != nil {
		r = override(r, domain, ov)
	}
	sl.r = r
	if r == nil || r.unlimit || r.rpu == 0 {
		return path
	}
	sl.key = descriptorKey(domain, entries, path, ov)
	if r.detailed {
		sl.stat = detailedStat(domain, entries)
	}
	return path
}

// classify sets sl's kind from its rule and cost. A rule that another
// matched rule replaces is no limit. A limit of zero requests is over
// until the end of its period.
func (s *Service) classify(sl *slot, replaced map[string]bool) {
	switch r := sl.r; {
	case r == nil:
		sl.kind = noLimit
	case r.name != "" && replaced[r.name]:
		sl.kind, sl.r = noLimit, nil
	case r.unlimit:
		sl.kind = unlimited
	case r.rpu == 0:
		sl.kind, sl.over = denyAll, true
		sl.d.At = s.now()
		sl.reset = r.untilNextPeriod(sl.d.At)
	case sl.n > r.limit.Capacity():
		sl.kind = tooMany
	default:
		sl.kind = take
	}
}

// now is the service's clock's time.
func (s *Service) now() time.Time {
	if s.clock != nil {
		return s.clock.Now()
	}
	return time.Now()
}

// untilNextPeriod is the time from at to the end of r's period that holds
// it, to the microsecond: the next multiple of the period since the epoch,
// or the next calendar boundary.
func (r *rule) untilNextPeriod(at time.Time) time.Duration {
	if _, end, ok := algo.CalendarPeriod(r.cal, at); ok {
		return end.Sub(time.UnixMicro(at.UnixMicro())) // from at's microsecond, as below
	}
	p := r.period.Microseconds()
	return time.Duration(p-at.UnixMicro()%p) * time.Microsecond
}

// periodLength is the length of r's period that holds at.
func (r *rule) periodLength(at time.Time) time.Duration {
	if start, end, ok := algo.CalendarPeriod(r.cal, at); ok {
		return end.Sub(start)
	}
	return r.period
}

// asks reports whether sl's answer needs the store: it has a limit of more
// than zero requests.
func (sl *slot) asks() bool { return sl.kind == take || sl.kind == tooMany }

// hits is a descriptor's cost: its own hits_addend, else the request's;
// zero means one.
func hits(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) int {
	n := uint64(req.GetHitsAddend())
	if h := d.GetHitsAddend(); h != nil {
		n = h.GetValue()
	}
	if d.GetIsNegativeHits() {
		return 0 // giving quota back is not supported: asked without taking
	}
	if n == 0 {
		return 1
	}
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(n)
}

// override is the limit a descriptor brings with it, which the reference
// service applies instead of the configured one: the same algorithm (fixed
// window without a configured one), the request's rate and unit.
func override(r *rule, domain string, ov *ratelimitv3.RateLimitDescriptor_RateLimitOverride) *rule {
	d := unitDuration(rlsv3.RateLimitResponse_RateLimit_Unit(ov.GetUnit()))
	if d == 0 {
		return r
	}
	// unit_multiplier makes the period that many units: 2 per 5 minutes.
	// Unset or 0 is one unit, as Envoy reads it.
	var mult uint32
	if m := ov.GetUnitMultiplier().GetValue(); m > 1 {
		mult = m
		d *= time.Duration(m)
	}
	o := &rule{id: -1, stat: domain + ".override", unit: rlsv3.RateLimitResponse_RateLimit_Unit(ov.GetUnit()), mult: mult, period: d, rpu: ov.GetRequestsPerUnit()}
	alg := ratekeeper.FixedWindow
	if r != nil {
		o.stat, o.name, o.replaces, o.shadow, o.quota, o.detailed, o.showKey = r.stat, r.name, r.replaces, r.shadow, r.quota, r.detailed, r.showKey
		if !r.unlimit && r.rpu > 0 {
			alg = r.limit.Algorithm
		}
	}
	if o.rpu > 0 {
		o.limit = ratekeeper.Limit{Algorithm: alg, Rate: int(o.rpu), Period: d}
		if o.limit.Validate() != nil {
			o.limit.Algorithm = ratekeeper.FixedWindow
		}
	}
	return o
}

// decide asks the store for the slots that need it: each alone, or, with
// WithAllOrNothing, the enforced ones together.
func (s *Service) decide(ctx context.Context, slots []slot) error {
	if s.allOrNothing {
		return s.decideTogether(ctx, slots)
	}
	for i := range slots {
		if sl := &slots[i]; sl.asks() {
			if err := s.takeOne(ctx, sl); err != nil {
				return err
			}
		}
	}
	return nil
}

// decideTogether takes for the enforced slots all or nothing. Shadow slots
// are decided alone, since their refusal refuses nothing. So are enforced
// slots that cost more than their limit can ever allow. Quota slots take
// only for a request the enforced ones admit, as the gateway's over_limit
// rules do; for a refused one they are asked, taking nothing.
func (s *Service) decideTogether(ctx context.Context, slots []slot) error {
	byKey := map[string]int{}
	reqs, doomed := batch(slots, byKey)
	out := make([]ratekeeper.Decision, len(reqs))
	var err error
	if doomed {
		err = s.askEach(ctx, reqs, out)
	} else if len(reqs) > 0 {
		err = s.takeAll(ctx, reqs, out)
	}
	if err != nil {
		return err
	}
	refused := doomed
	for _, d := range out {
		refused = refused || !d.Allowed
	}
	for i := range slots {
		sl := &slots[i]
		switch {
		case !sl.asks():
		case !sl.r.alone() && sl.kind == take:
			sl.d = out[byKey[sl.key]]
			sl.over = !sl.d.Allowed
		case sl.r.quota && refused:
			err = s.askOne(ctx, sl)
		default:
			err = s.takeOne(ctx, sl)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// askOne decides sl taking nothing: over if what is left is less than sl
// would take.
func (s *Service) askOne(ctx context.Context, sl *slot) error {
	d, err := s.take(ctx, ratekeeper.Request{Key: sl.key, Limit: sl.r.limit})
	if err != nil {
		return err
	}
	sl.d = d
	sl.over = d.Remaining < sl.n && d.Fallback != ratekeeper.FallbackUncounted
	return nil
}

// batch is the store requests of the enforced slots that take, one per key:
// the same descriptor twice asks for the sum. It sets byKey to each key's
// index in reqs. doomed reports that a descriptor refuses whatever the
// store says.
func batch(slots []slot, byKey map[string]int) (reqs []ratekeeper.Request, doomed bool) {
	for i := range slots {
		sl := &slots[i]
		if sl.r == nil || sl.r.alone() {
			continue
		}
		switch sl.kind {
		case denyAll, tooMany:
			doomed = true
		case take:
			if j, ok := byKey[sl.key]; ok {
				reqs[j].N += sl.n
				continue
			}
			byKey[sl.key] = len(reqs)
			reqs = append(reqs, ratekeeper.Request{Key: sl.key, Limit: sl.r.limit, N: sl.n})
		}
	}
	for _, q := range reqs {
		doomed = doomed || q.N > q.Limit.Capacity()
	}
	return reqs, doomed
}

// askEach fills out with the state of each of reqs, taking nothing. A
// request is allowed unless it costs more than its limit can ever allow.
func (s *Service) askEach(ctx context.Context, reqs []ratekeeper.Request, out []ratekeeper.Decision) error {
	for j, q := range reqs {
		over := q.N > q.Limit.Capacity()
		q.N = 0
		d, err := s.take(ctx, q)
		if err != nil {
			return err
		}
		d.Allowed = !over
		out[j] = d
	}
	return nil
}

// takeAll takes reqs all or none, deciding each into out. When one is
// refused, the allowed ones took nothing, and their Remaining says so.
func (s *Service) takeAll(ctx context.Context, reqs []ratekeeper.Request, out []ratekeeper.Decision) error {
	if _, err := ratekeeper.TakeAll(ctx, s.store, reqs, out); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// takeOne decides sl alone. A slot costing more than its limit takes
// nothing and is over. A quota acts on a count only: the failure
// policy's refusal, which counted nothing, leaves it within its limit.
func (s *Service) takeOne(ctx context.Context, sl *slot) error {
	n := sl.n
	if sl.kind == tooMany {
		n = 0
	}
	d, err := s.take(ctx, ratekeeper.Request{Key: sl.key, Limit: sl.r.limit, N: n})
	if err != nil {
		return err
	}
	sl.d = d
	sl.over = !d.Allowed || sl.kind == tooMany
	if sl.r.quota && sl.kind == take && d.Fallback == ratekeeper.FallbackUncounted {
		sl.over = false
	}
	return nil
}

// take is the store's Take, its error marked as the store's.
func (s *Service) take(ctx context.Context, req ratekeeper.Request) (ratekeeper.Decision, error) {
	d, err := s.store.Take(ctx, req)
	if err != nil {
		return d, fmt.Errorf("store: %w", err)
	}
	return d, nil
}

// statusBlock is one descriptor's status with the messages it points to,
// allocated together.
type statusBlock struct {
	st    rlsv3.RateLimitResponse_DescriptorStatus
	limit rlsv3.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

// oneStatus is the response to a request of one descriptor, the common
// case, in a single allocation.
type oneStatus struct {
	resp     rlsv3.RateLimitResponse
	statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
	block    [1]statusBlock
}

// tally is what respond gathers from the statuses for the whole answer.
type tally struct {
	notes
	counted bool   // a limit's count put the request over the limit
	policy  bool   // the store's failure policy refused a descriptor
	never   string // the first enforced cost that can never pass, in words
	best    int    // the counted status with the least left, for headers; -1: none
	left    uint32 // what best has left
}

// respond builds the response from decided slots and counts the metrics.
func (s *Service) respond(cur *served, slots []slot, counts bool) (*rlsv3.RateLimitResponse, notes) {
	resp, blocks := newResponse(len(slots))
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	t := tally{best: -1}
	for i := range slots {
		sl, b := &slots[i], &blocks[i]
		resp.Statuses[i] = &b.st
		b.st.Code = rlsv3.RateLimitResponse_OK
		switch {
		case sl.kind == noLimit:
			continue
		case sl.kind == unlimited:
			b.st.LimitRemaining = math.MaxUint32
			continue
		case sl.d.Fallback == ratekeeper.FallbackUncounted:
			// Decided by the store's failure policy without counting: the
			// code, and no figure that nothing computed.
			t.markUncounted(i, len(slots))
		default:
			if left := b.figures(sl); t.best < 0 || left < t.left {
				t.best, t.left = i, left
			}
		}
		if sl.kind == tooMany {
			t.markTooMany(i, len(slots), sl)
		}
		if sl.over && !sl.r.shadow {
			b.st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if sl.over && !sl.r.alone() {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			t.markOver(sl)
		}
		if counts {
			s.count(cur, sl)
		}
	}
	s.finish(resp, slots, &t)
	return resp, t.notes
}

// newResponse is an OK response of n statuses, each status pointing into
// its block. A response of one status is one allocation.
func newResponse(n int) (*rlsv3.RateLimitResponse, []statusBlock) {
	if n == 1 {
		o := new(oneStatus)
		o.resp.Statuses = o.statuses[:]
		return &o.resp, o.block[:]
	}
	resp := &rlsv3.RateLimitResponse{Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	return resp, make([]statusBlock, n)
}

// figures sets the limit, remaining and reset of b's status from sl's
// decision. It returns what is left, up to the capacity.
func (b *statusBlock) figures(sl *slot) uint32 {
	r := sl.r
	b.limit.Name, b.limit.RequestsPerUnit, b.limit.Unit = r.name, r.rpu, r.unit
	if r.mult > 1 {
		b.limit.UnitMultiplier = wrapperspb.UInt32(r.mult)
	}
	b.st.CurrentLimit = &b.limit
	left, reset := sl.left()
	// Envoy's X-RateLimit-Limit is requests_per_unit: a bucket whose burst
	// exceeds it says no more than that is left.
	b.st.LimitRemaining = min(left, r.rpu)
	if sl.kind != tooMany {
		b.reset.Seconds = resetSeconds(reset, sl.over)
		b.st.DurationUntilReset = &b.reset
	}
	return left
}

// left is what sl's decision leaves, up to the capacity, and the wait
// until its reset. A cost that can never pass was asked without taking:
// what is left is real, and no wait helps.
func (sl *slot) left() (uint32, time.Duration) {
	switch {
	case sl.kind == denyAll:
		return 0, sl.reset
	case sl.kind == tooMany:
		return uint32(sl.d.Remaining), 0
	case sl.over && sl.d.RetryAfter > 0:
		return 0, sl.d.RetryAfter
	case sl.over:
		return 0, sl.d.ResetAfter
	}
	return uint32(sl.d.Remaining), sl.d.ResetAfter
}

// markUncounted notes that the store's failure policy decided slot i of n
// without counting.
func (t *tally) markUncounted(i, n int) {
	if t.uncounted == nil {
		t.uncounted = make([]bool, n)
	}
	t.uncounted[i] = true
}

// markTooMany notes that slot i of n costs more than its limit can ever
// allow. For an enforced limit, never says so unless an earlier one did.
func (t *tally) markTooMany(i, n int, sl *slot) {
	if t.tooMany == nil {
		t.tooMany = make([]bool, n)
	}
	t.tooMany[i] = true
	if !sl.r.alone() && t.never == "" {
		t.never = fmt.Sprintf("cost %d is more than the limit of %d can ever allow: this request can never pass\n", sl.n, sl.r.limit.Capacity())
	}
}

// markOver notes what put the enforced slot sl over the limit: the failure
// policy's refusal, with its wait, or a limit (its count or the cost).
func (t *tally) markOver(sl *slot) {
	if sl.d.Fallback == ratekeeper.FallbackUncounted && sl.kind == take {
		t.policy = true
		t.refused = max(t.refused, sl.d.RetryAfter, time.Second)
		return
	}
	t.counted = true
}

// finish sets resp's raw_body and response headers from the tally. The
// notes keep the policy's wait only when the policy alone refused.
func (s *Service) finish(resp *rlsv3.RateLimitResponse, slots []slot, t *tally) {
	switch {
	case t.never != "":
		// No wait lets the request pass: no Retry-After, and raw_body
		// (the body of Envoy's answer) says why.
		t.refused = 0
		resp.RawBody = []byte(t.never)
		if s.headers && t.best >= 0 {
			h := headers(true, &slots[t.best])[:3]
			if resp.Statuses[t.best].DurationUntilReset == nil {
				h = h[:2] // the limit and what is left, no reset
			}
			resp.ResponseHeadersToAdd = h
		}
	case !t.policy || t.counted:
		t.refused = 0
		if s.headers && t.best >= 0 {
			resp.ResponseHeadersToAdd = headers(resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT, &slots[t.best])
		}
	default:
		s.storeUnavailable(resp, slots, t)
	}
}

// storeUnavailable answers a request that only the store's failure policy
// refused: raw_body says that the store is unavailable, and Retry-After is
// the policy's wait.
func (s *Service) storeUnavailable(resp *rlsv3.RateLimitResponse, slots []slot, t *tally) {
	secs := strconv.FormatInt(ratefields.Ceil(t.refused), 10)
	resp.RawBody = []byte("the rate limiter's store is unavailable: retry in " + secs + " s\n")
	if !s.headers {
		return
	}
	if t.best >= 0 {
		// The limits that counted, as they are; the wait is the policy's.
		resp.ResponseHeadersToAdd = headers(false, &slots[t.best])
	}
	resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: "Retry-After", Value: secs})
}

// resetSeconds is duration_until_reset, reset, in the whole seconds that
// RateLimit-Reset says, over the limit or not: Envoy sends its whole
// seconds as X-RateLimit-Reset, and would otherwise round down what the
// other fields round up.
func resetSeconds(reset time.Duration, over bool) int64 {
	if over {
		return ratefields.RetrySeconds(reset)
	}
	return ratefields.Seconds(reset)
}

func (s *Service) count(cur *served, sl *slot) {
	if s.metrics == nil {
		return
	}
	r := sl.r
	result := metrics.Allowed
	if sl.over {
		result = metrics.Limited
		if r.shadow {
			result = metrics.ShadowLimited
		} else if r.quota {
			result = metrics.OverLimit
		}
		label := r.stat
		if sl.stat != "" {
			label = sl.stat
		}
		s.metrics.overLimit.WithLabelValues(label).Inc()
	}
	if r.id < 0 {
		s.metrics.decisions.PromCounter(r.stat, result).Inc()
		return
	}
	c := cur.counters[r.id]
	switch result {
	case metrics.Allowed:
		metrics.Inc(c.allowed)
	case metrics.Limited:
		metrics.Inc(c.limited)
	case metrics.OverLimit:
		metrics.Inc(c.over)
	default:
		metrics.Inc(c.shadow)
	}
}

// headers renders the RateLimit header fields of slot sl (IETF draft 03's
// form, as Envoy's reference service sends them) with the figures every
// rendering gives (package ratefields), and Retry-After when over: the
// answer is OVER_LIMIT. RateLimit-Limit is the capacity, then the policy:
// for a bucket whose burst exceeds its rate, the burst over the time to
// refill it.
func headers(over bool, sl *slot) []*corev3.HeaderValue {
	d := sl.d
	q, w := ratefields.Policy(sl.r.limit, d.At)
	switch {
	case sl.kind == denyAll:
		d = ratekeeper.Decision{RetryAfter: sl.reset, ResetAfter: sl.reset, At: sl.d.At}
		q, w = 0, ratefields.Ceil(sl.r.periodLength(sl.d.At))
	case sl.kind == take && sl.over:
		d.Allowed, d.Remaining = false, 0
		if d.RetryAfter == 0 {
			d.RetryAfter = d.ResetAfter
		}
	}
	f := ratefields.Of(d)
	h := []*corev3.HeaderValue{
		{Key: "RateLimit-Limit", Value: strconv.Itoa(f.Limit) + ", " + strconv.Itoa(q) + ";w=" + strconv.FormatInt(w, 10)},
		{Key: "RateLimit-Remaining", Value: strconv.Itoa(f.Remaining)},
		{Key: "RateLimit-Reset", Value: strconv.FormatInt(f.T, 10)},
	}
	if over {
		h = append(h, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(max(f.T, 1), 10)})
	}
	return h
}
