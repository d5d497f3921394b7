package httplimit

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/ratefields"
	"github.com/ratekeeper/ratekeeper/rules"
)

// Middleware applies a rules set to requests. Build it with New or
// NewLimit; it is safe for concurrent use, and SetRules swaps its rules
// while it serves.
type Middleware struct {
	config
	store   ratekeeper.Store
	current atomic.Pointer[compiled]
	pool    sync.Pool
}

// config is what the options set.
type config struct {
	logger  *slog.Logger       // never nil once built
	metrics Metrics            // nil: none
	headers *rules.HeaderStyle // nil: the set's
	clock   ratekeeper.Clock   // nil: the store's
	decided func(*http.Request, Decided)
	trace   func(context.Context) (context.Context, func(Decided))
	count   rules.Statuses // NewLimit's rule's CountOnly

	bodyTimeout time.Duration // 0: a body's reads are not bounded here
}

// buildConfig applies opts to the defaults, which are all here.
func buildConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		o.apply(&c)
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Option configures a Middleware.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithLogger logs shadow-mode refusals (Info), refusals (Debug) and store
// errors (Error) to l. Default: no logs.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithBodyTimeout bounds each read of a request body that a rule reads
// its reserve from (rules.Cost.ReadsRequest) to d, before the decision.
// A read that times out leaves the connection's read deadline passed, and
// the request reserves the default. Default: no bound.
func WithBodyTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.bodyTimeout = d })
}

// Metrics receives what the middleware decides; package promlimit
// implements it with Prometheus. Its methods are called concurrently.
type Metrics interface {
	// Counter returns the counter of rule's decisions with result (one of
	// the Result constants). The middleware asks once per rule and result
	// when it takes a rules set, so a decision costs one Inc.
	Counter(rule, result string) Counter
	// QueueDelay records how long a queued request was held.
	QueueDelay(d time.Duration)
	// ForgetRule drops the counters of a rule a reload removed.
	ForgetRule(rule string)
}

// Counter counts. It is an alias of the interface literal, so that a
// metrics package satisfies Metrics without importing this one.
type Counter = interface{ Inc() }

// Results of a decision, as Metrics receives them.
const (
	// ResultAllowed: every limit let the request through.
	ResultAllowed = "allowed"
	// ResultLimited: the request was refused (429).
	ResultLimited = "limited"
	// ResultShadowLimited: a shadow rule would have refused it; it went
	// through.
	ResultShadowLimited = "shadow_limited"
	// ResultQueued: the request was held for its slot, then went through.
	ResultQueued = "queued"
	// ResultForbidden: an access list refused it (403), under the rule
	// name "access".
	ResultForbidden = "forbidden"
	// ResultError: the store failed; the request went through.
	ResultError = "error"
	// ResultOverLimit: the request was over the limit of a rule whose
	// over_limit forwards or reroutes it; it went on.
	ResultOverLimit = "over_limit"
)

// BanMetrics is a Metrics that also counts the bans each rule started
// (rules.RuleConfig.Ban). The middleware asks once per rule with a ban
// when it takes a rules set.
type BanMetrics interface {
	Metrics
	Bans(rule string) Counter
}

// OffsetMetrics is a Metrics that also counts, by rule, the requests
// whose offset header (rules.RuleConfig.OffsetHeader) a trusted proxy
// gave a value that is no offset of the limit: the limit's own applied.
// The middleware asks once per rule with an offset header when it takes a
// rules set.
type OffsetMetrics interface {
	Metrics
	BadOffsets(rule string) Counter
}

// Decided is what the middleware decided for one request, as WithDecided
// reports it.
type Decided struct {
	// Rules are the names of the rules that matched the request, enforced
	// and shadow, in the rule set's order. The slice is the middleware's:
	// valid only during the call.
	Rules []string
	// RefusedBy names the rule that refused the request (the most
	// restrictive of those that did), "access" for the deny list, "" when
	// it was admitted. A refusal because the store is unavailable names
	// the rule reported in the headers.
	RefusedBy string
	// Refused is that rule and the request's key under it; zero when the
	// request was admitted or refused by the access list.
	Refused rules.Match
	// Near are the enforced rules that admitted the request with at most a
	// tenth of their limit left, with their keys. The slice is the
	// middleware's: valid only during the call.
	Near []rules.Match
	// Over are the rules whose over_limit forwards or reroutes, and whose
	// limit the admitted request exceeded, with their keys, in the set's
	// order. The slice is the middleware's: valid only during the call.
	Over []rules.Match
}

// WithDecided calls f after each request the middleware decided, before
// it is answered or passed on (the gateway's access log). f must be fast
// and safe for concurrent use.
func WithDecided(f func(r *http.Request, d Decided)) Option {
	return optionFunc(func(c *config) { c.decided = f })
}

// WithTrace calls start before each decision with the request's context.
// The decision's store calls get the context start returns, and end is
// called with the decision once made: a tracer's span around it. start
// and end must be fast and safe for concurrent use.
func WithTrace(start func(ctx context.Context) (_ context.Context, end func(Decided))) Option {
	return optionFunc(func(c *config) { c.trace = start })
}

// WithMetrics counts decisions by rule and result in mt. Default: none.
func WithMetrics(mt Metrics) Option {
	return optionFunc(func(c *config) { c.metrics = mt })
}

// WithHeaders overrides the header style the rules set asks for.
func WithHeaders(h rules.HeaderStyle) Option {
	return optionFunc(func(c *config) { c.headers = &h })
}

// WithClock decides every request at clk.Now(), read once per request before
// the store is asked, instead of at the store's own clock. It is for tests
// on a fake clock. With a real clock, a request delayed on its way to the
// store would be decided at a stale instant, which the buckets count
// against it. The default (the store's clock, read under its lock; Redis's
// server time) needs no care.
func WithClock(clk ratekeeper.Clock) Option {
	return optionFunc(func(c *config) { c.clock = clk })
}

// WithCountOnly makes NewLimit's rule count a request only when its
// response's status is in st (see rules.ParseStatuses). The request is
// admitted while a unit is left, taking nothing, and takes one once its
// response counts. New ignores it: a set's rules carry their own
// CountOnly.
func WithCountOnly(st rules.Statuses) Option {
	return optionFunc(func(c *config) { c.count = st })
}

// New returns a Middleware that applies set, keeping state in store.
func New(store ratekeeper.Store, set *rules.Set, opts ...Option) (*Middleware, error) {
	if store == nil {
		return nil, errors.New("httplimit: store is nil")
	}
	if set == nil {
		return nil, errors.New("httplimit: rules set is nil")
	}
	if err := checkSlots(store, set); err != nil {
		return nil, err
	}
	m := &Middleware{config: buildConfig(opts), store: store}
	m.pool.New = func() any { return new(scratch) }
	m.SetRules(set)
	return m, nil
}

// KeyFunc identifies a request's client for NewLimit. It returns false when
// the limit does not apply to the request.
type KeyFunc func(r *http.Request) (key string, ok bool)

// KeyByIP keys requests by the TCP peer's address (an IPv6 peer by its /64).
// Behind a proxy, build a rules.ClientIP with the trusted proxies and use
// its Addr and Key instead.
func KeyByIP() KeyFunc {
	ci := rules.ClientIP{IPv4Prefix: 32, IPv6Prefix: 64}
	return func(r *http.Request) (string, bool) { return ci.Key(ci.Addr(r)), true }
}

// KeyByHeader keys requests by a header's value; requests without it are
// not limited.
func KeyByHeader(name string) KeyFunc {
	return func(r *http.Request) (string, bool) {
		v := r.Header.Get(name)
		return v, v != ""
	}
}

// NewLimit returns a Middleware with one enforced rule, named name, that
// applies limit to every request keyed by key.
func NewLimit(store ratekeeper.Store, name string, limit ratekeeper.Limit, key KeyFunc, opts ...Option) (*Middleware, error) {
	if key == nil {
		return nil, errors.New("httplimit: key function is nil")
	}
	rl, err := rules.NewRule(name, limit, rules.Enforce, func(r *http.Request, _ netip.Addr) (string, bool) { return key(r) })
	if err != nil {
		return nil, err
	}
	rl.CountOnly = buildConfig(opts).count
	set, err := rules.NewSet(rules.ClientIP{IPv4Prefix: 32, IPv6Prefix: 64}, rl)
	if err != nil {
		return nil, err
	}
	return New(store, set, opts...)
}

// compiled is a rules set with what the middleware precomputes per rule.
type compiled struct {
	set   *rules.Set
	rules []ruleInfo
	style rules.HeaderStyle
	hide  bool                             // some rule has refused.hide_headers
	slots []*ratekeeper.ConcurrencyLimiter // by rule index; nil without concurrency rules
}

type ruleInfo struct {
	policy   string     // the rule's RateLimit-Policy item
	quoted   string     // the rule's name as RateLimit writes it
	counters [5]Counter // nil without metrics
	hide     bool       // refused.hide_headers: in no rate limit header
	alts     []string   // the RateLimit-Policy item of each of the rule's Alts
	units    Adder      // the quota units charged, for a rule whose cost is not 1; nil without UnitsMetrics
	bans     Counter    // the bans the rule started; nil without BanMetrics or a ban
	offsets  Counter    // the bad offset headers; nil without OffsetMetrics or an offset header
}

// Adder counts quota units. It is an alias of the interface literal, as
// Counter is.
type Adder = interface{ Add(float64) }

// UnitsMetrics is a Metrics that also counts the quota units that
// requests were charged, by rule, which the decisions counter cannot show.
// It counts the rules whose cost is not always 1: a fixed cost, or one
// read from a request or response header. The middleware asks once per
// rule when it takes a rules set.
type UnitsMetrics interface {
	Metrics
	Units(rule string) Adder
}

const (
	cAllowed = iota
	cLimited
	cShadow
	cQueued
	cOver
)

// SetRules makes set the rules for the requests that arrive from now on.
// Requests in flight finish under the rules they started with. Counters
// live in the store, keyed by rule name and limit, so an unchanged rule
// keeps counting across the swap.
func (m *Middleware) SetRules(set *rules.Set) {
	c := &compiled{set: set, style: set.Headers, rules: make([]ruleInfo, len(set.Rules)), slots: m.slotLimiters(set)}
	if m.headers != nil {
		c.style = *m.headers
	}
	for i, rl := range set.Rules {
		ri := &c.rules[i]
		ri.quoted = strconv.Quote(rl.Name)
		ri.policy = policyItem(ri.quoted, rl.Limit)
		if rl.IsConcurrency() {
			ri.policy = ri.quoted + ";q=" + strconv.Itoa(rl.Concurrency.Max) // no window
		}
		for _, a := range rl.Alts {
			ri.alts = append(ri.alts, policyItem(ri.quoted, a.Limit))
		}
		ri.hide = rl.Refused.HideHeaders
		c.hide = c.hide || ri.hide
		if um, ok := m.metrics.(UnitsMetrics); ok && (rl.Cost.Fixed != 1 || rl.Cost.Header != "" || rl.Cost.AfterResponse()) {
			ri.units = um.Units(rl.Name)
		}
		if bm, ok := m.metrics.(BanMetrics); ok && rl.Ban > 0 {
			ri.bans = bm.Bans(rl.Name)
		}
		if om, ok := m.metrics.(OffsetMetrics); ok && rl.Config.OffsetHeader != "" {
			ri.offsets = om.BadOffsets(rl.Name)
		}
		if m.metrics != nil {
			for j, res := range []string{ResultAllowed, ResultLimited, ResultShadowLimited, ResultQueued} {
				ri.counters[j] = m.metrics.Counter(rl.Name, res)
			}
			if rl.OverLimit.Action != rules.Refuse {
				ri.counters[cOver] = m.metrics.Counter(rl.Name, ResultOverLimit)
			}
		}
	}
	old := m.current.Swap(c)
	if old != nil && m.metrics != nil {
		for _, rl := range old.set.Rules {
			if !slices.ContainsFunc(set.Rules, func(r *rules.Rule) bool { return r.Name == rl.Name }) {
				m.metrics.ForgetRule(rl.Name)
			}
		}
	}
}

// policyItem is a rule's RateLimit-Policy item for limit l: q is the
// capacity in quota units (a request takes its cost of them), w the window.
// A calendar window's w varies: appendPolicy computes its item per decision.
func policyItem(quoted string, l ratekeeper.Limit) string {
	q, w := ratefields.Policy(l, time.Time{})
	return quoted + ";q=" + strconv.Itoa(q) + ";w=" + strconv.FormatInt(w, 10)
}

// appendPolicy appends the RateLimit-Policy item of the limit that match
// mt applies, for a decision at at. A calendar window's is computed then,
// as its period's length varies; every other one is the precomputed item.
func (c *compiled) appendPolicy(b []byte, mt *rules.Match, at time.Time) []byte {
	ri := &c.rules[mt.Rule.Index]
	l, item := &mt.Rule.Limit, ri.policy
	if mt.Alt > 0 {
		l, item = &mt.Rule.Alts[mt.Alt-1].Limit, ri.alts[mt.Alt-1]
	}
	if l.Calendar != "" && !mt.Rule.IsConcurrency() {
		q, w := ratefields.Policy(mt.Limit(), at) // the client's own offset included
		b = append(append(b, ri.quoted...), ";q="...)
		b = append(strconv.AppendInt(b, int64(q), 10), ";w="...)
		return strconv.AppendInt(b, w, 10)
	}
	return append(b, item...)
}

// Rules returns the rules set in use.
func (m *Middleware) Rules() *rules.Set { return m.current.Load().set }

// scratch is the per-request working memory, pooled.
type scratch struct {
	matches  []rules.Match
	reqs     []ratekeeper.Request
	decs     []ratekeeper.Decision
	enforced []int // indexes into matches of enforce and queue rules
	shadow   []int
	results  []ratekeeper.Decision // per match, for headers
	keyBuf   []byte
	hb       []byte        // header values are built here
	names    []string      // the matched rules' names, for WithDecided
	near     []rules.Match // the rules near their limit, for WithDecided
	conc     []int         // indexes into matches of concurrency rules
	bans     []int         // indexes into matches of the ban checks after the enforced reqs
	permits  []*ratekeeper.Permit
	body     reqBody              // the request's body, when a rule reads its reserve there
	over     []int                // indexes into matches of the rules that forward or reroute
	overReqs []ratekeeper.Request // the store request of each of over (zero for a concurrency rule)
	exceeded []int                // the indexes in over whose limit the request exceeded
	overM    []rules.Match        // the exceeded rules, for WithDecided
}

// allMatches yields the indexes of the enforced rules, then the shadow ones:
// the rules a response reports on.
func (s *scratch) allMatches() func(func(int, int) bool) {
	return func(yield func(int, int) bool) {
		n := 0
		for _, i := range s.enforced {
			if !yield(n, i) {
				return
			}
			n++
		}
		for _, i := range s.over {
			if !yield(n, i) {
				return
			}
			n++
		}
		for _, i := range s.shadow {
			if !yield(n, i) {
				return
			}
			n++
		}
	}
}

func (s *scratch) reset() {
	clear(s.matches) // drop key strings
	s.matches = s.matches[:0]
	s.reqs = s.reqs[:0]
	s.decs = s.decs[:0]
	s.enforced = s.enforced[:0]
	s.shadow = s.shadow[:0]
	s.results = s.results[:0]
	s.conc = s.conc[:0]
	s.bans = s.bans[:0]
	s.over = s.over[:0]
	clear(s.overReqs) // drop key strings
	s.overReqs = s.overReqs[:0]
	s.exceeded = s.exceeded[:0]
	clear(s.permits)
	s.permits = s.permits[:0]
	s.body = reqBody{}
}

// outcome is what the middleware decided for one request.
type outcome int

const (
	pass outcome = iota
	refuse
	forbid
	unavailable // refused by the store's failure policy, not by a limit
	deferred    // a queue rule matched and the caller cannot hold requests
	badCost     // a cost header could not be read: 400
)

// verdict carries a decision from decide to the response.
type verdict struct {
	outcome outcome
	c       *compiled
	worst   int           // index into matches of the rule reported in X-RateLimit-*
	retry   time.Duration // for refuse and unavailable
	delay   time.Duration // how long to hold the request (queue mode)
	ip      netip.Addr
	costErr error // for badCost
	charges bool  // a rule charges the response's cost
}

// Handler wraps next: requests within every limit reach it, possibly after
// a queue's delay; others are answered 429 (or 403, or 503 when the
// store's failure policy refused them) here.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, p, held, reroute := m.admit(w, r, nil)
		if a != Admitted {
			return
		}
		if reroute != "" {
			r = r.WithContext(context.WithValue(r.Context(), rerouteKey{}, reroute))
		}
		if held != nil {
			// Deferred: the slots come back however the handler ends,
			// the reverse proxy's abort panic included.
			defer releaseAll(r.Context(), held)
		}
		if p == nil {
			next.ServeHTTP(w, r)
			return
		}
		cw := &chargeWriter{ResponseWriter: w, m: m, p: p, ctx: context.WithoutCancel(r.Context())}
		if p.body {
			r.Header.Del("Accept-Encoding") // a body read for its cost comes in clear
		}
		complete := false
		// Deferred: a response cut short (the reverse proxy's abort
		// panic) is charged too.
		defer func() { cw.end(complete && r.Context().Err() == nil) }()
		next.ServeHTTP(cw, r)
		complete = true
	})
}

// Admission is what Admit did with a request.
type Admission int

const (
	// Admitted: every rule allows the request; the rate limit headers are
	// set on the writer's header map, and the caller serves the request.
	Admitted Admission = iota
	// Answered: the request was refused (429; 503 when the store's failure
	// policy refused it) or forbidden (403), and the answer is written.
	Answered
	// Deferred: the request needs Handler (a queue rule, a rule that
	// charges the response's cost, or a concurrency rule matches it), or
	// the rules in use are no longer the set it was read for. Nothing was
	// taken or written; the request should go to Handler instead.
	Deferred
)

// Admit decides r as Handler does, for a server that reads requests
// itself and cannot hold one (the gateway's fast path). A request that
// needs Handler, or that was read for set while the rules in use changed
// (a reload), is Deferred before anything is taken.
func (m *Middleware) Admit(w http.ResponseWriter, r *http.Request, set *rules.Set) Admission {
	a, _, _, _ := m.admit(w, r, set) // with a set, no slot is taken nor reroute made: see decide
	return a
}

// admit decides r. Refused, it answers on w. Admitted, it sets the rate
// limit headers on w and the over_limit headers on r, and waits out a
// queue's delay. reroute is the upstream an over_limit sends r to, if any. With a
// set (the fast path), a request is Deferred, before anything is taken,
// when it needs Handler (see needsHandler) or the rules in use are no
// longer set.
func (m *Middleware) admit(w http.ResponseWriter, r *http.Request, set *rules.Set) (_ Admission, _ *pending, _ []*ratekeeper.Permit, reroute string) {
	s := m.pool.Get().(*scratch)
	ctx, end := r.Context(), func(Decided) {}
	if m.trace != nil {
		ctx, end = m.trace(ctx)
	}
	v := m.decide(ctx, w, r, s, set)
	switch {
	case v.outcome == deferred:
		end(Decided{})
	case m.decided != nil || m.trace != nil:
		m.report(r, v, s, end)
	}
	switch v.outcome {
	case deferred:
		s.reset()
		m.pool.Put(s)
		return Deferred, nil, nil, ""
	case forbid:
		m.pool.Put(s)
		writeForbidden(w, r)
		return Answered, nil, nil, ""
	case badCost:
		s.reset()
		m.pool.Put(s)
		writeBadCost(w, r, v.costErr)
		return Answered, nil, nil, ""
	case refuse:
		m.writeHeaders(w.Header(), v, s)
		rl := s.matches[v.worst].Rule
		m.pool.Put(s)
		writeTooMany(w, r, rl, v.retry, !v.c.rules[rl.Index].hide)
		return Answered, nil, nil, ""
	case unavailable:
		m.writeHeaders(w.Header(), v, s)
		m.pool.Put(s)
		writeUnavailable(w, r, v.retry)
		return Answered, nil, nil, ""
	}
	if len(s.matches) > 0 {
		m.writeHeaders(w.Header(), v, s)
	}
	if len(s.exceeded) > 0 {
		reroute = setOverHeaders(r, v.c.set, s)
	}
	if v.delay > 0 {
		if !m.hold(r.Context(), v.delay, s) {
			releaseAll(r.Context(), s.permits)
			s.reset()
			m.pool.Put(s)
			return Answered, nil, nil, "" // the client left while queued: nothing to answer
		}
	}
	var p *pending
	if v.charges {
		p = m.pending(v, s)
	}
	var held []*ratekeeper.Permit
	if len(s.permits) > 0 {
		held = slices.Clone(s.permits)
	}
	s.reset()
	m.pool.Put(s)
	return Admitted, p, held, reroute
}

// report calls the WithDecided hook, and end, with v.
func (m *Middleware) report(r *http.Request, v verdict, s *scratch, end func(Decided)) {
	d := Decided{Rules: s.names[:0]}
	for _, mt := range s.matches {
		d.Rules = append(d.Rules, mt.Rule.Name)
	}
	switch v.outcome {
	case forbid:
		d.RefusedBy = "access"
	case refuse, unavailable, badCost:
		if len(s.matches) > 0 {
			d.Refused = s.matches[v.worst]
			d.RefusedBy = d.Refused.Rule.Name
		}
	default:
		d.Near = s.nearLimit()
		d.Over = s.overMatches()
	}
	if m.decided != nil {
		m.decided(r, d)
	}
	end(d)
	clear(d.Rules)
	s.names = d.Rules[:0]
	clear(s.near)
	s.near = s.near[:0]
	clear(s.overM)
	s.overM = s.overM[:0]
}

// nearLimit returns the enforced rules, and those that forward or
// reroute, whose decisions admitted the request with at most a tenth of
// their limit left.
func (s *scratch) nearLimit() []rules.Match {
	for _, l := range [...][]int{s.enforced, s.over} {
		for _, i := range l {
			if d := &s.results[i]; d.Allowed && d.Limit > 0 && d.Remaining*10 <= d.Limit {
				s.near = append(s.near, s.matches[i])
			}
		}
	}
	return s.near
}

// hold waits out a queued request's delay. When the client leaves first it
// gives back every place the request took and reports false.
func (m *Middleware) hold(ctx context.Context, d time.Duration, s *scratch) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		m.refundAll(context.WithoutCancel(ctx), s)
		return false
	}
}

// refundAll gives back what the enforced rate rules took, and what the
// rate rules that forward or reroute took once decided (decideOver).
func (m *Middleware) refundAll(ctx context.Context, s *scratch) {
	for i, req := range s.reqs {
		if s.decs[i].Allowed {
			_ = m.store.Refund(ctx, req, s.decs[i])
		}
	}
	for j, i := range s.over {
		if d := s.results[i]; d.Allowed && d.Fallback != ratekeeper.FallbackUncounted && !s.matches[i].Rule.IsConcurrency() {
			_ = m.store.Refund(ctx, s.overReqs[j], d)
		}
	}
}

// decide applies the rules to r, filling s. It takes from the store what a
// passing request uses. With only (the fast path), a request is deferred
// before anything is taken when it needs Handler (see needsHandler), or
// when the rules in use are not only.
func (m *Middleware) decide(ctx context.Context, w http.ResponseWriter, r *http.Request, s *scratch, only *rules.Set) verdict {
	s.reset()
	v := verdict{c: m.current.Load()}
	dropOverHeaders(r, v.c.set)
	if only != nil && only != v.c.set {
		v.outcome = deferred
		return v
	}
	if !m.match(r, &v, s) {
		return v
	}
	if only != nil && needsHandler(s.matches) {
		v.outcome = deferred
		return v
	}
	var now time.Time
	if m.clock != nil {
		now = m.clock.Now()
	}
	if readsRequest(s.matches) {
		s.body = peekBody(w, r, m.bodyTimeout)
	}
	v = sortMatches(r, v, s, now)
	s.body = reqBody{} // the pool keeps no body
	if v.outcome == badCost {
		return v
	}
	addBanChecks(s, now)
	s.decs = append(s.decs, make([]ratekeeper.Decision, len(s.reqs))...)
	s.results = append(s.results, make([]ratekeeper.Decision, len(s.matches))...)
	done := false
	if len(s.reqs) > 0 {
		v, done = m.takeEnforced(ctx, r, v, s)
	}
	if !done && len(s.conc) > 0 {
		v, done = m.acquireSlots(ctx, r, v, s)
	}
	if done {
		return v
	}
	m.decideShadow(ctx, r, v, s, now)
	m.decideOver(ctx, v, s)
	m.countAdmitted(v, s)
	v.worst = mostRestrictive(v.c, s)
	return v
}

// match finds the rules that apply to r, into s.matches, and reports
// whether there are any. A client on the deny list is forbidden; one on
// the allow list is exempt from every rule.
func (m *Middleware) match(r *http.Request, v *verdict, s *scratch) bool {
	set := v.c.set
	v.ip = set.ClientIP().Addr(r)
	denied, exempt := set.Access(v.ip)
	if denied {
		m.count("access", ResultForbidden)
		v.outcome = forbid
	}
	if denied || exempt {
		return false
	}
	s.matches, s.keyBuf = set.AppendMatches(s.matches, s.keyBuf, r, v.ip)
	for i := range s.matches {
		if s.matches[i].BadOffset {
			if c := v.c.rules[s.matches[i].Rule.Index].offsets; c != nil {
				c.Inc()
			}
		}
	}
	return len(s.matches) > 0
}

// needsHandler reports whether one of ms needs what only Handler does:
// hold the request in a queue, charge the response's cost or count its
// status, hold a concurrency slot until the response ends, or reroute.
func needsHandler(ms []rules.Match) bool {
	for _, mt := range ms {
		if mt.Rule.Mode == rules.Queue || mt.Rule.Cost.AfterResponse() || mt.Rule.IsConcurrency() || !mt.Rule.CountOnly.IsZero() || mt.Rule.OverLimit.Action == rules.Reroute {
			return true
		}
	}
	return false
}

// sortMatches files each match of s as shadow, concurrency, over (its
// over_limit forwards or reroutes) or enforced, and builds the store
// request of each enforced or over one, at now. A cost header that cannot
// be read makes the request badCost, before anything is taken: the
// client's error, not a limit's.
func sortMatches(r *http.Request, v verdict, s *scratch, now time.Time) verdict {
	for i := range s.matches {
		mt := &s.matches[i]
		rl := mt.Rule
		switch {
		case rl.Mode == rules.Shadow:
			s.shadow = append(s.shadow, i)
			continue
		case rl.IsConcurrency() && rl.OverLimit.Action != rules.Refuse:
			s.over = append(s.over, i) // after admission: decideOver
			s.overReqs = append(s.overReqs, ratekeeper.Request{})
			continue
		case rl.IsConcurrency():
			s.conc = append(s.conc, i) // after the rate rules: acquireSlots
			continue
		}
		n := rl.Cost.Fixed
		if !rl.CountOnly.IsZero() {
			n, v.charges = 0, true // a look now; the response's status may take one
		} else if rl.Cost.ReadsRequest() {
			n = rl.Cost.ReserveFrom(s.body.b, s.body.whole) // unreadable: the default
			v.charges = true
		} else if rl.Cost.Header != "" || rl.Cost.AfterResponse() {
			var err error
			if n, err = rl.Cost.Request(r.Header); err != nil {
				v.outcome, v.costErr, v.worst = badCost, err, i
				return v
			}
			v.charges = v.charges || rl.Cost.AfterResponse()
		}
		req := ratekeeper.Request{Key: mt.Key, Limit: mt.Limit(), N: n, Reserve: rl.Mode == rules.Queue, Now: now}
		if rl.OverLimit.Action != rules.Refuse {
			s.over, s.overReqs = append(s.over, i), append(s.overReqs, req)
			continue
		}
		s.enforced = append(s.enforced, i)
		s.reqs = append(s.reqs, req)
	}
	return v
}

// takeEnforced takes for the enforced rate rules, all or nothing, and
// sets v's queue delay. done reports that v is final: the request is
// refused, or the store failed and it passes unreported.
func (m *Middleware) takeEnforced(ctx context.Context, r *http.Request, v verdict, s *scratch) (_ verdict, done bool) {
	ok, err := ratekeeper.TakeAll(ctx, m.store, s.reqs, s.decs)
	if err != nil {
		m.failOpen(ctx, s, err)
		return v, true
	}
	for j, i := range s.enforced {
		s.results[i] = s.decs[j]
	}
	if m.applyBans(ctx, ok, s) {
		return m.refused(ctx, r, v, s), true
	}
	if !ok {
		m.startBans(ctx, v, s)
		return m.refused(ctx, r, v, s), true
	}
	if spentCountOnly(s) {
		m.startBans(ctx, v, s) // a spent count_only key is refused: its ban starts
		m.giveBack(ctx, s)
		return m.refused(ctx, r, v, s), true
	}
	for j, i := range s.enforced {
		rl := s.matches[i].Rule
		d := s.decs[j]
		if rl.Mode == rules.Queue && rl.MaxDelay > 0 && d.Delay > rl.MaxDelay {
			return m.refuseDelay(ctx, r, v, s, j), true
		}
		v.delay = max(v.delay, d.Delay)
	}
	return v, false
}

// failOpen lets a request through when the store failed. The store's own
// policy (failsafe) decides when it can; an error that still reaches here
// must not take the API down with it. No rule reports on the request.
func (m *Middleware) failOpen(ctx context.Context, s *scratch, err error) {
	m.logger.ErrorContext(ctx, "rate limit store failed; request allowed", "err", err)
	m.count(s.matches[s.enforced[0]].Rule.Name, ResultError)
	s.reqs, s.decs, s.enforced = s.reqs[:0], s.decs[:0], s.enforced[:0]
	s.matches = s.matches[:0]
}

// refuseDelay refuses a request that the queue rule of enforced request j
// would hold past its max_delay. Every rule gives back what it took, and
// the wait is the delay beyond max_delay.
func (m *Middleware) refuseDelay(ctx context.Context, r *http.Request, v verdict, s *scratch, j int) verdict {
	i := s.enforced[j]
	d := s.decs[j]
	m.giveBack(ctx, s)
	d.Allowed = false
	d.RetryAfter = d.Delay - s.matches[i].Rule.MaxDelay
	d.Remaining = 0
	s.decs[j] = d
	s.results[i] = d
	return m.refused(ctx, r, v, s)
}

// giveBack refunds what the enforced rate rules took, and marks their
// decisions refused, so that nothing is given back twice. Their results
// then say what is left, as a refused batch's do.
func (m *Middleware) giveBack(ctx context.Context, s *scratch) {
	m.refundAll(ctx, s)
	for j := range s.decs { // the rate rules: the first len(s.decs) of s.enforced
		if i := s.enforced[j]; s.decs[j].Allowed {
			s.results[i].Remaining = min(s.results[i].Remaining+s.reqs[j].N, s.results[i].Limit)
		}
		s.decs[j].Allowed = false
	}
}

// decideShadow takes for each shadow rule on its own, at now, and counts
// what it would have done. A store that fails reports the rule as
// uncounted and allowed.
func (m *Middleware) decideShadow(ctx context.Context, r *http.Request, v verdict, s *scratch, now time.Time) {
	for _, i := range s.shadow {
		mt := &s.matches[i]
		d, err := m.store.Take(ctx, ratekeeper.Request{Key: mt.Key, Limit: mt.Limit(), N: shadowCost(mt.Rule, r), Now: now})
		if err != nil {
			m.logger.ErrorContext(ctx, "rate limit store failed for a shadow rule", "rule", mt.Rule.Name, "err", err)
			d = ratekeeper.Decision{Allowed: true, Fallback: ratekeeper.FallbackUncounted, Limit: mt.Limit().Capacity()}
		}
		s.results[i] = d
		if !d.Allowed {
			inc(v.c.rules[mt.Rule.Index].counters[cShadow])
			m.logger.DebugContext(ctx, "shadow rule would refuse", "rule", mt.Rule.Name, "client_ip", v.ip, "method", r.Method, "path", r.URL.Path, "retry_after", d.RetryAfter)
		} else {
			inc(v.c.rules[mt.Rule.Index].counters[cAllowed])
		}
	}
}

// shadowCost is shadow rule rl's cost for r. A shadow rule never answers
// 400: a cost header it cannot read counts the request as one.
func shadowCost(rl *rules.Rule, r *http.Request) int {
	if rl.Cost.Header == "" {
		return rl.Cost.Fixed
	}
	n, err := rl.Cost.Request(r.Header)
	if err != nil {
		return 1
	}
	return n
}

// countAdmitted counts the decisions of the enforced rules of an admitted
// request, the quota units it was charged, and its queue delay.
func (m *Middleware) countAdmitted(v verdict, s *scratch) {
	for j, i := range s.enforced {
		rl := s.matches[i].Rule
		ri := &v.c.rules[rl.Index]
		if rl.Mode == rules.Queue && s.results[i].Delay > 0 {
			inc(ri.counters[cQueued])
		} else {
			inc(ri.counters[cAllowed])
		}
		if ri.units != nil && !rl.Cost.AfterResponse() {
			ri.units.Add(float64(s.reqs[j].N)) // a response's cost is counted when charged
		}
	}
	if v.delay > 0 && m.metrics != nil {
		m.metrics.QueueDelay(v.delay)
	}
}

// refused finishes a refusal: the refused rule with the longest wait is the
// one reported, and Retry-After is that wait, since only then can every
// rule allow the request. A refusal that counted nothing (the store's
// failure policy refused: ratekeeper.FallbackUncounted) is reported only
// when no rule refused by its count, and then the request is unavailable,
// not over a limit. Metrics count both as limited.
func (m *Middleware) refused(ctx context.Context, r *http.Request, v verdict, s *scratch) verdict {
	v.outcome = refuse
	v.worst = -1
	counted := false // the reported refusal is a limit's
	for _, i := range s.enforced {
		d := s.results[i]
		if d.Allowed {
			continue
		}
		inc(v.c.rules[s.matches[i].Rule.Index].counters[cLimited])
		c := d.Fallback != ratekeeper.FallbackUncounted
		switch {
		case v.worst < 0, c && !counted, c == counted && d.RetryAfter > v.retry:
			v.worst, v.retry, counted = i, d.RetryAfter, c
		}
	}
	if v.worst < 0 { // cannot happen: a refusal has a refused rule
		v.worst = s.enforced[0]
		counted = true
	}
	if !counted {
		v.outcome = unavailable
	}
	s.shadow = s.shadow[:0] // shadow and over rules are not asked about a refused request
	s.over = s.over[:0]
	msg := "rate limited"
	if v.outcome == unavailable {
		msg = "rate limit store unavailable; refused by its failure policy"
	}
	m.logger.DebugContext(ctx, msg, "rule", s.matches[v.worst].Rule.Name, "client_ip", v.ip, "method", r.Method, "path", r.URL.Path, "retry_after", v.retry)
	return v
}

// mostRestrictive picks the rule whose headers X-RateLimit-* report: the
// one with the least remaining, the longest reset on a tie. Enforced rules
// and those that forward or reroute come before shadow ones. A decision that counted comes before one that
// did not (ratekeeper.FallbackUncounted), whose zero remaining means
// nothing.
func mostRestrictive(c *compiled, s *scratch) int {
	best := -1
	better := func(i int) bool {
		if c.hide && c.rules[s.matches[i].Rule.Index].hide {
			return false
		}
		if best < 0 {
			return true
		}
		a, b := s.results[i], s.results[best]
		if ua, ub := a.Fallback == ratekeeper.FallbackUncounted, b.Fallback == ratekeeper.FallbackUncounted; ua != ub {
			return ub
		}
		if a.Remaining != b.Remaining {
			return a.Remaining < b.Remaining
		}
		return a.ResetAfter > b.ResetAfter
	}
	for _, i := range s.enforced {
		if better(i) {
			best = i
		}
	}
	for _, i := range s.over {
		if better(i) {
			best = i
		}
	}
	if best < 0 {
		for _, i := range s.shadow {
			if better(i) {
				best = i
			}
		}
	}
	return best
}

// count counts one decision of a kind rare enough to look its counter up.
func (m *Middleware) count(rule, result string) {
	if m.metrics != nil {
		m.metrics.Counter(rule, result).Inc()
	}
}

func inc(c Counter) {
	if c != nil {
		c.Inc()
	}
}
