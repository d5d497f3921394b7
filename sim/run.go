package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// Option configures Run.
type Option interface {
	apply(*options)
}

type options struct {
	store  ratekeeper.Store
	prefix string
	start  time.Time
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithStore runs every algorithm on s, with keys that start with prefix (so
// that runs sharing a Redis server do not meet). Without it each algorithm
// gets a fresh memory store.
func WithStore(s ratekeeper.Store, prefix string) Option {
	return optionFunc(func(o *options) { o.store, o.prefix = s, prefix })
}

// WithStart sets the instant the virtual clock starts from, rounded down to
// a whole number of periods since the Unix epoch so that the simulation
// starts with a window. Default 2026-01-01 UTC. Results do not depend on
// it; a Redis store wants it near the real time, for its keys' expiry.
func WithStart(t time.Time) Option {
	return optionFunc(func(o *options) { o.start = t })
}

// Run simulates c with the simulator of its Kind and measures what each
// limit let through. The Report is a *Result (workers, traffic), a
// *SharedResult (shared), a *ConcurrencyResult (concurrency), a
// *TokensResult (tokens) or a *CalendarResult (calendar). Run returns
// an error for a bad Config or a failing store; a refused request is not an
// error. The options apply to the workers and traffic kinds; the others run
// on stores of their own.
func Run(ctx context.Context, c Config, opts ...Option) (Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	o := options{start: defaultStart}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if o.store != nil && c.Kind != KindWorkers && c.Kind != KindTraffic {
		return nil, fmt.Errorf("store: the %s kind runs on a store of its own", c.Kind)
	}
	switch c.Kind {
	case KindShared:
		return orNil(runShared(ctx, c))
	case KindConcurrency:
		return orNil(runConcurrency(ctx, c))
	case KindTokens:
		return orNil(runTokens(ctx, c))
	case KindCalendar:
		return orNil(runCalendar(ctx, c))
	}
	return orNil(runAlgorithms(ctx, c, o))
}

// orNil returns r as a Report, or a nil Report with err.
func orNil[R Report](r R, err error) (Report, error) {
	if err != nil {
		return nil, err
	}
	return r, nil
}

// defaultStart is where the virtual clock starts unless WithStart says.
var defaultStart = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// startOf is t rounded down to a whole number of periods since the Unix
// epoch, in microseconds: where a virtual clock starts.
func startOf(t time.Time, period time.Duration) time.Time {
	p := period.Microseconds()
	return time.UnixMicro(t.UnixMicro() / p * p).UTC()
}

// runAlgorithms runs every algorithm of c, one after the other.
func runAlgorithms(ctx context.Context, c Config, o options) (*Result, error) {
	base := startOf(o.start, c.Period)
	traces := make([]trace, len(c.Algorithms))
	for i, a := range c.Algorithms {
		tr, err := runAlgorithm(ctx, c, a, o, base)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a, err)
		}
		traces[i] = tr
	}
	res := &Result{Config: c}
	res.measure(traces)
	res.figure = newFigure(c.Name, res.chartHeight(), res.draw, res.WriteCSV)
	return res, nil
}

// runAlgorithm runs algorithm a through c's workload on a virtual clock
// from base, on o's store or a fresh memory store.
func runAlgorithm(ctx context.Context, c Config, a ratekeeper.Algorithm, o options, base time.Time) (trace, error) {
	clock := &virtualClock{base: base}
	store, prefix := o.store, o.prefix+string(a)+":"
	if store == nil {
		m := memstore.New(memstore.WithClock(clock), memstore.WithJanitorInterval(0))
		defer m.Close()
		store, prefix = m, ""
	}
	lim, err := ratekeeper.New(store, c.limit(a), ratekeeper.WithClock(clock))
	if err != nil {
		return trace{}, err
	}
	e := &engine{c: c, lim: lim, clock: clock, prefix: prefix}
	if c.Kind == KindTraffic {
		err = e.traffic(ctx)
	} else {
		err = e.workers(ctx)
	}
	return e.trace, err
}

// trace is what one algorithm's run recorded.
type trace struct {
	done      []time.Duration   // when each item was done (request admitted)
	perKey    [][]time.Duration // traffic: admissions per client, in order
	items     int               // items to do, or requests offered
	refused   int               // traffic: requests refused
	decisions int               // calls to the limiter
	wrongly   [2]int            // traffic: wrongly allowed, wrongly denied
}

// engine runs one algorithm's limiter through a workload, moving the
// virtual clock from event to event.
type engine struct {
	c      Config
	lim    *ratekeeper.Limiter
	clock  *virtualClock
	prefix string
	trace  trace
}

// event is a client's next call to the limiter. Events at one instant run
// in the order they were scheduled, so clients take turns.
type event struct {
	at     time.Duration
	seq    uint64
	client int
}

// queue is a min-heap of events by (at, seq).
type queue struct {
	ev  []event
	seq uint64
}

func (q *queue) less(i, j int) bool {
	a, b := q.ev[i], q.ev[j]
	return a.at < b.at || a.at == b.at && a.seq < b.seq
}

func (q *queue) push(at time.Duration, client int) {
	q.ev = append(q.ev, event{at: at, seq: q.seq, client: client})
	q.seq++
	for i := len(q.ev) - 1; i > 0; {
		parent := (i - 1) / 2
		if !q.less(i, parent) {
			break
		}
		q.ev[i], q.ev[parent] = q.ev[parent], q.ev[i]
		i = parent
	}
}

func (q *queue) pop() event {
	top := q.ev[0]
	last := len(q.ev) - 1
	q.ev[0] = q.ev[last]
	q.ev = q.ev[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && q.less(l, m) {
			m = l
		}
		if r < last && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.ev[i], q.ev[m] = q.ev[m], q.ev[i]
		i = m
	}
	return top
}

// check is called between events: it stops a cancelled run.
func (e *engine) check(ctx context.Context) error {
	if e.trace.decisions%1024 == 0 {
		return ctx.Err()
	}
	return nil
}

// afterPauses moves t out of any pause it falls in.
func (e *engine) afterPauses(t time.Duration) time.Duration {
	for moved := true; moved; {
		moved = false
		for _, p := range e.c.Pauses {
			if t >= p.At && t < p.end() {
				t, moved = p.end(), true
			}
		}
	}
	return t
}

// workers runs c.Clients workers sharing one key until every item is done
// or a safety horizon passes (items not done by then count as lost).
func (e *engine) workers(ctx context.Context) error {
	c := e.c
	key := e.prefix + "workers"
	left := shares(c.Items, c.Clients)
	e.trace.items = c.Items
	e.trace.done = make([]time.Duration, 0, c.Items)
	// However slow an algorithm is, the limit lets Rate through per Period:
	// four times the expected span is far beyond any correct run.
	horizon := 4*c.span() + 10*c.Period
	maxDecisions := 1000*c.Items + 1_000_000
	var q queue
	for i := range left {
		if left[i] > 0 {
			q.push(c.Begin, i)
		}
	}
	for len(q.ev) > 0 {
		ev := q.pop()
		t := e.afterPauses(ev.at)
		if t > horizon || e.trace.decisions >= maxDecisions {
			break
		}
		if t != ev.at {
			q.push(t, ev.client)
			continue
		}
		if err := e.check(ctx); err != nil {
			return err
		}
		next, done, err := e.work(ctx, key, t)
		if err != nil {
			return err
		}
		if done {
			if left[ev.client]--; left[ev.client] == 0 {
				continue
			}
		}
		q.push(next, ev.client)
	}
	return nil
}

// shares splits items between clients as evenly as whole items go.
func shares(items, clients int) []int {
	left := make([]int, clients)
	for i := range left {
		left[i] = items / clients
		if i < items%clients {
			left[i]++
		}
	}
	return left
}

// work is a worker's call to the limiter for key at t. It returns when the
// worker calls again, and whether it did an item, which it did then.
func (e *engine) work(ctx context.Context, key string, t time.Duration) (next time.Duration, done bool, err error) {
	e.clock.set(t)
	e.trace.decisions++
	var d ratekeeper.Decision
	if e.c.Behaviour == WaitPacing {
		d, err = e.lim.Reserve(ctx, key)
	} else {
		d, err = e.lim.Allow(ctx, key)
	}
	if err != nil {
		return 0, false, err
	}
	if !d.Allowed {
		return t + max(d.RetryAfter, time.Microsecond), false, nil
	}
	// Allowed: the item is done now, or, reserved, once its delay is
	// waited out. A worker whose wait would end during a pause gives its
	// place back and reserves again when the pause is over.
	doneAt := t + d.Delay
	if after := e.afterPauses(doneAt); after != doneAt {
		return after, false, e.lim.Cancel(ctx, key, 1, d)
	}
	e.trace.done = append(e.trace.done, doneAt)
	return doneAt, true, nil
}

// traffic runs c.Clients traffic clients, each with its own key, and judges
// every decision against an exact sliding window log of what the algorithm
// admitted for that key.
func (e *engine) traffic(ctx context.Context) error {
	c := e.c
	gens := make([]*generator, c.Clients)
	judges := make([]judge, c.Clients)
	keys := make([]string, c.Clients)
	e.trace.perKey = make([][]time.Duration, c.Clients)
	var q queue
	for i := range gens {
		gens[i] = newGenerator(c, i)
		keys[i] = fmt.Sprintf("%sclient-%d", e.prefix, i)
		judges[i] = judge{window: c.Period, limit: c.Rate}
		if t := gens[i].next(); t < c.Duration {
			q.push(t, i)
		}
	}
	for len(q.ev) > 0 {
		ev := q.pop()
		if err := e.check(ctx); err != nil {
			return err
		}
		t := ev.at
		e.clock.set(t)
		e.trace.decisions++
		e.trace.items++
		d, err := e.lim.Allow(ctx, keys[ev.client])
		if err != nil {
			return err
		}
		if w := judges[ev.client].judge(t, d.Allowed); w >= 0 {
			e.trace.wrongly[w]++
		}
		if d.Allowed {
			e.trace.done = append(e.trace.done, t)
			e.trace.perKey[ev.client] = append(e.trace.perKey[ev.client], t)
		} else {
			e.trace.refused++
		}
		if next := gens[ev.client].next(); next < c.Duration {
			q.push(next, ev.client)
		}
	}
	slices.Sort(e.trace.done)
	return nil
}
