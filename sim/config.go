package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/sim/chart"
)

// Kind says which simulator runs a Config.
type Kind string

const (
	// KindWorkers is workers that have Items to do and pace themselves on
	// the limiter, losing none: the pacing experiments.
	KindWorkers Kind = "workers"
	// KindTraffic is one-shot requests from many clients, each with its own
	// key (quiet, steady and bursty), judged against an exact sliding
	// window log.
	KindTraffic Kind = "traffic"
	// KindShared is one limit (a fixed window of Rate per Period) that
	// instances behind a load balancer share through a shared store. It
	// runs in each of the store's modes (docs/redis.md): exact, then sync
	// and lease at each of SyncPeriods.
	//
	// Requests arrive evenly, at Load times the limit in all. The balancer
	// deals them to the instances by Split, as a smooth weighted
	// round-robin (equal weights take turns). Each instance decides through
	// its own engine over one in-memory store that behaves as the Redis
	// scripts do (shared.Model), on the virtual clock. The engines run
	// without their loop: the simulator syncs instance i every sync period
	// T of virtual time, starting i·T/N after instance 0. A call to the
	// store takes no time (δ = 0). At the rates pictured, a round trip of a
	// millisecond would let the other instances admit less than one request
	// more (Σ r_j·2δ).
	KindShared Kind = "shared"
	// KindConcurrency is a concurrency limit of Max slots. Requests for one
	// key arrive evenly for Duration, each in flight for Hold; with Jitter,
	// holds are drawn from an exponential distribution of mean Hold, from
	// Seed. Max slots each held Hold serve Max/Hold requests per second, and
	// Load is the requests offered as a multiple of that. By Little's law
	// (L = λW), Load × Max would be in flight without the limit.
	KindConcurrency Kind = "concurrency"
	// KindTokens is a token bucket of Rate tokens per Period (Burst)
	// limiting long requests whose cost is read from the response, such as
	// a language model's tokens. Twenty arrive at once, then one every 3 s,
	// each streaming 5–20 s and costing 500–2,000 tokens (from Seed). It
	// runs twice on the same requests: charged after the response only,
	// then reserving 2,000 at admission and settling at the end.
	KindTokens Kind = "tokens"
	// KindCalendar is fixed windows that follow the calendar of Location,
	// beside epoch-aligned ones of the same nominal length, on requests
	// arriving evenly: Load × Rate per 30 days, or per 24 hours. A monthly
	// quota runs across the two month ends around 2026's first daylight
	// saving change, and a daily one across each change of the year.
	KindCalendar Kind = "calendar"
)

// Behaviour is how a worker paces itself on the limiter.
type Behaviour string

const (
	// AskUntilAllowed asks Allow before each item; when refused it waits
	// RetryAfter and asks again.
	AskUntilAllowed Behaviour = "ask"
	// WaitPacing is Limiter.Wait: Reserve, then wait out Delay (or, when
	// refused, RetryAfter and reserve again). For the leaky bucket this is
	// the FIFO queue, for the token bucket the wait for tokens.
	WaitPacing Behaviour = "wait"
)

// Pause is a stretch of time during which the workers do nothing.
type Pause struct {
	At  time.Duration // from the start of the simulation
	For time.Duration
}

// ParsePause reads a pause written as AT+FOR, such as "4s+1s".
func ParsePause(s string) (Pause, error) {
	at, dur, ok := strings.Cut(s, "+")
	if !ok {
		return Pause{}, fmt.Errorf("pause %q: want AT+FOR, such as 4s+1s", s)
	}
	a, err := time.ParseDuration(at)
	if err != nil {
		return Pause{}, fmt.Errorf("pause %q: start: %w", s, err)
	}
	f, err := time.ParseDuration(dur)
	if err != nil {
		return Pause{}, fmt.Errorf("pause %q: length: %w", s, err)
	}
	p := Pause{At: a, For: f}
	if a < 0 || f <= 0 {
		return Pause{}, fmt.Errorf("pause %q: the start must not be negative and the length must be positive", s)
	}
	return p, nil
}

// String writes p as ParsePause reads it.
func (p Pause) String() string { return p.At.String() + "+" + p.For.String() }

// end is when p is over.
func (p Pause) end() time.Duration { return p.At + p.For }

// Config describes one simulation of any Kind. Scenario returns the named
// ones. Each field says the kinds that read it; the others ignore it.
type Config struct {
	// Name names the output files (NAME.csv, NAME.svg, NAME.png) and titles
	// the charts.
	Name string
	// Kind is the simulator that runs the Config.
	Kind Kind

	// Algorithms are run one after the other, each on a fresh state
	// (workers, traffic).
	Algorithms []ratekeeper.Algorithm
	// Rate, Period and Burst make the limit; Burst zero means Rate (workers,
	// traffic). The shared kind's limit is a fixed window of Rate per Period.
	Rate   int
	Period time.Duration
	Burst  int
	// Max is how many requests may be in flight at once (concurrency).
	Max int

	// Clients is the number of workers, sharing one key and one limit, or
	// of traffic clients, each with its own key.
	Clients int
	// Items is how many items the workers have to do, split evenly.
	Items int
	// Behaviour is how the workers pace themselves.
	Behaviour Behaviour
	// Begin is when the workers start.
	Begin time.Duration
	// Pauses are stretches with no work. A worker that reserved a place
	// it would reach during a pause cancels it (Limiter.Cancel) and
	// reserves again when the pause ends.
	Pauses []Pause

	// Split is the balancer's weights, one per instance: the share of the
	// requests each gets (shared).
	Split []int
	// SyncPeriods are the periods T that sync and lease modes run at
	// (shared).
	SyncPeriods []time.Duration
	// Load is the requests offered. It is a multiple of Rate per Period
	// (shared), of the Max/Hold per second that the slots serve
	// (concurrency), or of Rate per 30 days or 24 hours (calendar).
	Load float64
	// Hold is how long an admitted request stays in flight: every one of
	// them, or their mean when Jitter (concurrency).
	Hold   time.Duration
	Jitter bool

	// Location is the time zone whose calendar the windows follow
	// (calendar).
	Location *time.Location

	// Duration is how long traffic clients send requests, or requests
	// arrive (traffic, shared, concurrency). The shared kind's is a whole
	// number of Periods, each a window of its chart.
	Duration time.Duration
	// Tick is the width of the bars: what is admitted is counted per Tick
	// (workers, traffic, concurrency, calendar).
	Tick time.Duration
	// Seed drives the traffic generator and the concurrency holds: the same
	// Config gives the same result.
	Seed uint64
}

// Scenarios lists the named scenarios Scenario knows, in the order the
// docs present them.
var Scenarios = []string{"pacing", "pacing-with-pauses", "boundary", "accuracy", "custom",
	"shared-roundrobin", "shared-skewed", "concurrency", "tokens", "calendar"}

// Scenario returns the named scenario. set, if not nil, changes it before
// the values that depend on others are filled in (the boundary run's items
// and start). It is how the command line's flags apply.
//
// The workers' and traffic scenarios compare every algorithm:
//
//   - pacing: the reference experiment. One worker must do 10,000 items at
//     most 1,000 per second (burst 1,000), asking until allowed. It is
//     counted per 100 ms.
//   - pacing-with-pauses: the same, with the worker idle from 4 s to 5 s,
//     and from 6 s for 500 ms.
//   - boundary: 20 workers sharing one limit start together 100 ms before a
//     window's edge, with twice the limit's items between them. A fixed
//     window admits 2x its limit within one window-length.
//   - accuracy: 100 clients (quiet, steady and bursty), each limited to
//     100 per second, for 30 s. Every decision is judged against the exact
//     sliding window log.
//   - custom: pacing, to be changed by set.
//
// The shared ones are 3 instances sharing a fixed window of 100 per second.
// They are offered 2.5 times that for 10 windows, at sync periods of 10 ms,
// 100 ms and 1 s:
//
//   - shared-roundrobin: the balancer deals the requests in turn, 83 per
//     second to each instance.
//   - shared-skewed: the balancer sends 70%, 20% and 10% of the requests to
//     the three instances: 175, 50 and 25 per second.
//
// The concurrency one has 10 slots. Requests are held 100 ms on average
// (exponentially distributed, seed 1), offered at 1.5 times the 100 per
// second the slots serve, for 10 s, counted per 250 ms. Without the limit
// 15 would be in flight; with it, about a third are refused.
//
// The calendar one is a quota of 10,000 per period in Europe/Berlin,
// offered 1.5 times that evenly, counted per hour. It runs monthly from 22
// February to 16 April 2026, then daily across 29 March (23 hours) and 25
// October (25 hours). It fails without the time zone database.
func Scenario(name string, set func(*Config)) (Config, error) {
	c, ok := named(name)
	if !ok {
		return Config{}, fmt.Errorf("unknown scenario %q (%s)", name, strings.Join(Scenarios, ", "))
	}
	if c.Kind == KindCalendar {
		loc, err := time.LoadLocation(calendarZone)
		if err != nil {
			return Config{}, fmt.Errorf("scenario %s: %w", name, err)
		}
		c.Location = loc
	}
	if set != nil {
		set(&c)
	}
	if name == "boundary" {
		if c.Items == 0 {
			c.Items = 2 * c.Rate
		}
		c.Begin = c.Period - c.Period/10
	}
	return c, nil
}

// named is the named scenario before set, and whether there is one.
func named(name string) (Config, bool) {
	c := Config{Name: name, Kind: KindWorkers, Algorithms: slices.Clone(ratekeeper.Algorithms),
		Rate: 1000, Period: time.Second, Tick: 100 * time.Millisecond, Seed: 1,
		Clients: 1, Items: 10_000, Behaviour: AskUntilAllowed}
	shared := Config{Name: name, Kind: KindShared, Rate: 100, Period: time.Second, Load: 2.5,
		SyncPeriods: []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second},
		Duration:    10 * time.Second}
	switch name {
	case "pacing", "custom":
	case "pacing-with-pauses":
		c.Pauses = []Pause{{At: 4 * time.Second, For: time.Second}, {At: 6 * time.Second, For: 500 * time.Millisecond}}
	case "boundary":
		c.Clients = 20
		c.Items = 0 // twice the rate, in Scenario
	case "accuracy":
		c.Kind, c.Rate, c.Clients, c.Items, c.Duration = KindTraffic, 100, 100, 0, 30*time.Second
	case "shared-roundrobin":
		shared.Split = []int{1, 1, 1}
		return shared, true
	case "shared-skewed":
		shared.Split = []int{70, 20, 10}
		return shared, true
	case "concurrency":
		return Config{Name: name, Kind: KindConcurrency, Max: 10, Load: 1.5, Hold: 100 * time.Millisecond,
			Jitter: true, Seed: 1, Duration: 10 * time.Second, Tick: 250 * time.Millisecond}, true
	case "tokens":
		return Config{Name: name, Kind: KindTokens, Rate: 10_000, Period: time.Minute, Burst: tokensCostMax,
			Seed: 1, Duration: 5 * time.Minute, Tick: time.Second}, true
	case "calendar":
		return Config{Name: name, Kind: KindCalendar, Rate: 10_000, Load: 1.5, Tick: time.Hour}, true
	default:
		return Config{}, false
	}
	return c, true
}

// Validate reports what is wrong with c, naming the field, or nil.
func (c Config) Validate() error {
	if c.Name == "" {
		return errors.New("name is missing")
	}
	if strings.ContainsAny(c.Name, `/\`) {
		return fmt.Errorf("name %q must not contain a path separator", c.Name)
	}
	switch c.Kind {
	case KindWorkers, KindTraffic:
		return c.validateAlgorithms()
	case KindShared:
		return c.validateShared()
	case KindConcurrency:
		return c.validateConcurrency()
	case KindTokens:
		return c.validateTokens()
	case KindCalendar:
		return c.validateCalendar()
	}
	return fmt.Errorf("kind: %q is not %s, %s, %s, %s, %s or %s", c.Kind, KindWorkers, KindTraffic, KindShared, KindConcurrency, KindTokens, KindCalendar)
}

// String describes c in one line, for the tables and the charts' titles.
func (c Config) String() string {
	switch c.Kind {
	case KindShared:
		return c.sharedString()
	case KindConcurrency:
		return c.concurrencyString()
	case KindTokens:
		return c.tokensString()
	case KindCalendar:
		return c.calendarString()
	}
	return c.algorithmsString()
}

// Bounds that keep a simulation's memory and time in check.
const (
	maxItems   = 10_000_000
	maxClients = 100_000
	maxTicks   = 100_000
)

// limit is the Limit c gives algorithm a.
func (c Config) limit(a ratekeeper.Algorithm) ratekeeper.Limit {
	return ratekeeper.Limit{Algorithm: a, Rate: c.Rate, Period: c.Period, Burst: c.Burst}
}

// perTick is the limit's rate per tick: the height of the rate line.
func (c Config) perTick() float64 {
	return float64(c.Rate) * float64(c.Tick) / float64(c.Period)
}

// validateAlgorithms is Validate for the workers and traffic kinds.
func (c Config) validateAlgorithms() error {
	if len(c.Algorithms) == 0 {
		return errors.New("algorithms: none given")
	}
	for i, a := range c.Algorithms {
		if err := c.limit(a).Validate(); err != nil {
			return fmt.Errorf("algorithms: %w", err)
		}
		if slices.Contains(c.Algorithms[:i], a) {
			return fmt.Errorf("algorithms: %s is given twice", a)
		}
	}
	if c.Tick <= 0 || c.Tick%time.Microsecond != 0 {
		return fmt.Errorf("tick: must be a positive whole number of microseconds, not %v", c.Tick)
	}
	if c.Clients <= 0 {
		return fmt.Errorf("clients: must be positive, not %d", c.Clients)
	}
	var err error
	if c.Kind == KindWorkers {
		err = c.validateWorkers()
	} else {
		err = c.validateTraffic()
	}
	if err != nil {
		return err
	}
	if n := c.span() / c.Tick; n > maxTicks {
		return fmt.Errorf("tick: %v makes %d bars over %v; at most %d", c.Tick, n, c.span(), maxTicks)
	}
	return nil
}

func (c Config) validateWorkers() error {
	if c.Items <= 0 {
		return fmt.Errorf("items: must be positive, not %d", c.Items)
	}
	if c.Items > maxItems {
		return fmt.Errorf("items: at most %d, not %d", maxItems, c.Items)
	}
	if c.Behaviour != AskUntilAllowed && c.Behaviour != WaitPacing {
		return fmt.Errorf("worker: %q is not %s or %s", c.Behaviour, AskUntilAllowed, WaitPacing)
	}
	if c.Begin < 0 {
		return fmt.Errorf("begin: must not be negative, not %v", c.Begin)
	}
	for _, p := range c.Pauses {
		if p.At < 0 || p.For <= 0 {
			return fmt.Errorf("pause %v: the start must not be negative and the length must be positive", p)
		}
	}
	return nil
}

func (c Config) validateTraffic() error {
	if c.Duration <= 0 {
		return fmt.Errorf("duration: must be positive, not %v", c.Duration)
	}
	if c.Clients > maxClients {
		return fmt.Errorf("clients: at most %d, not %d", maxClients, c.Clients)
	}
	return nil
}

// span is roughly how long the simulation lasts: what the workers would
// take at the limit's rate, plus their pauses; or the traffic's duration.
func (c Config) span() time.Duration {
	if c.Kind == KindTraffic {
		return c.Duration
	}
	d := c.Begin + time.Duration(float64(c.Period)*float64(c.Items)/float64(c.Rate))
	for _, p := range c.Pauses {
		d += p.For
	}
	return d
}

// algorithmsString is String for the workers and traffic kinds.
func (c Config) algorithmsString() string {
	var b strings.Builder
	switch c.Kind {
	case KindTraffic:
		fmt.Fprintf(&b, "%d clients (quiet, steady and bursty), each limited to %s, for %v", c.Clients, rateString(c.Rate, c.Period), c.Duration)
	default:
		who := "1 worker"
		if c.Clients > 1 {
			who = fmt.Sprintf("%d workers", c.Clients)
		}
		fmt.Fprintf(&b, "%s, %s items at most %s", who, chart.Thousands(c.Items), rateString(c.Rate, c.Period))
	}
	burst := c.Burst
	if burst == 0 {
		burst = c.Rate
	}
	fmt.Fprintf(&b, " (burst %s)", chart.Thousands(burst))
	if c.Kind == KindWorkers {
		if c.Behaviour == WaitPacing {
			b.WriteString(", Wait pacing")
		} else {
			b.WriteString(", ask until allowed")
		}
		if c.Begin > 0 {
			fmt.Fprintf(&b, ", from %v", c.Begin)
		}
	}
	return b.String()
}

// rateString writes a rate as "1,000/s" or "5/2m0s".
func rateString(rate int, period time.Duration) string {
	return chart.Thousands(rate) + "/" + periodUnit(period)
}

// periodUnit writes a period as the unit of a rate: "s", or "2m0s".
func periodUnit(p time.Duration) string {
	switch p {
	case time.Second:
		return "s"
	case time.Minute:
		return "min"
	}
	return p.String()
}
