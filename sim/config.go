package sim

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// Kind says what a simulation's clients do.
type Kind string

const (
	// KindWorkers is workers that have Items to do and pace themselves on the
	// limiter, losing none: the pacing experiments.
	KindWorkers Kind = "workers"
	// KindTraffic is one-shot requests from many clients, each with its own
	// key (quiet, steady and bursty), judged against an exact sliding
	// window log.
	KindTraffic Kind = "traffic"
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

// Config describes one simulation. Scenario returns the named ones.
type Config struct {
	// Name names the output files (NAME.csv, NAME.svg, NAME.png) and titles
	// the charts.
	Name string
	// Algorithms are run one after the other, each on a fresh state.
	Algorithms []ratekeeper.Algorithm
	// Rate, Period and Burst make the limit; Burst zero means Rate.
	Rate   int
	Period time.Duration
	Burst  int
	// Tick is the width of the bars: items done are counted per Tick.
	Tick time.Duration
	// Seed drives the traffic generator; the same Config gives the same
	// Result.
	Seed uint64

	// Kind is what the clients do.
	Kind Kind
	// Clients is the number of workers (sharing one key, one limit) or of
	// traffic clients (each with its own key).
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

	// Duration is how long traffic clients send requests.
	Duration time.Duration
}

// Scenarios lists the named scenarios Scenario knows, in the order the
// docs present them.
var Scenarios = []string{"pacing", "pacing-with-pauses", "boundary", "accuracy", "custom"}

// Scenario returns the named scenario. set, if not nil, changes it before
// the values that depend on others (the boundary run's items and start) are
// filled in: it is how the command line's flags apply.
//
//   - pacing: the reference experiment. One worker must do 10,000 items at
//     most 1,000 per second (burst 1,000), asking until allowed; counted per
//     100 ms.
//   - pacing-with-pauses: the same, with the worker idle from 4 s to 5 s and
//     from 6 s to 6.5 s.
//   - boundary: 20 workers sharing one limit start together 100 ms before a
//     window's edge (at 900 ms) with twice the limit's items between them, so
//     a fixed window admits 2x its limit within one window-length.
//   - accuracy: 100 clients (quiet, steady and bursty), each limited to
//     100 per second, for 30 s; every decision is judged against the exact
//     sliding window log.
//   - custom: pacing, to be changed by set.
func Scenario(name string, set func(*Config)) (Config, error) {
	c := Config{
		Name:       name,
		Algorithms: slices.Clone(ratekeeper.Algorithms),
		Rate:       1000,
		Period:     time.Second,
		Tick:       100 * time.Millisecond,
		Seed:       1,
		Kind:       KindWorkers,
		Clients:    1,
		Items:      10_000,
		Behaviour:  AskUntilAllowed,
	}
	switch name {
	case "pacing", "custom":
	case "pacing-with-pauses":
		c.Pauses = []Pause{{At: 4 * time.Second, For: time.Second}, {At: 6 * time.Second, For: 500 * time.Millisecond}}
	case "boundary":
		c.Clients = 20
		c.Items = 0 // twice the rate, below
	case "accuracy":
		c.Kind = KindTraffic
		c.Rate = 100
		c.Clients = 100
		c.Items = 0
		c.Duration = 30 * time.Second
	default:
		return Config{}, fmt.Errorf("unknown scenario %q (%s)", name, strings.Join(Scenarios, ", "))
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

// limit is the Limit c gives algorithm a.
func (c Config) limit(a ratekeeper.Algorithm) ratekeeper.Limit {
	return ratekeeper.Limit{Algorithm: a, Rate: c.Rate, Period: c.Period, Burst: c.Burst}
}

// perTick is the limit's rate per tick: the height of the rate line.
func (c Config) perTick() float64 {
	return float64(c.Rate) * float64(c.Tick) / float64(c.Period)
}

// Validate reports what is wrong with c, naming the field, or nil.
func (c Config) Validate() error {
	if c.Name == "" {
		return errors.New("name is missing")
	}
	if strings.ContainsAny(c.Name, `/\`) {
		return fmt.Errorf("name %q must not contain a path separator", c.Name)
	}
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
	switch c.Kind {
	case KindWorkers:
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
	case KindTraffic:
		if c.Duration <= 0 {
			return fmt.Errorf("duration: must be positive, not %v", c.Duration)
		}
		if c.Clients > maxClients {
			return fmt.Errorf("clients: at most %d, not %d", maxClients, c.Clients)
		}
	default:
		return fmt.Errorf("kind: %q is not %s or %s", c.Kind, KindWorkers, KindTraffic)
	}
	if n := c.span() / c.Tick; n > maxTicks {
		return fmt.Errorf("tick: %v makes %d bars over %v; at most %d", c.Tick, n, c.span(), maxTicks)
	}
	return nil
}

// Bounds that keep a simulation's memory and time in check.
const (
	maxItems   = 10_000_000
	maxClients = 100_000
	maxTicks   = 100_000
)

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

// String describes c in one line, for chart titles.
func (c Config) String() string {
	var b strings.Builder
	switch c.Kind {
	case KindTraffic:
		fmt.Fprintf(&b, "%d clients (quiet, steady and bursty), each limited to %s, for %v", c.Clients, rateString(c.Rate, c.Period), c.Duration)
	default:
		who := "1 worker"
		if c.Clients > 1 {
			who = fmt.Sprintf("%d workers", c.Clients)
		}
		fmt.Fprintf(&b, "%s, %s items at most %s", who, thousands(c.Items), rateString(c.Rate, c.Period))
	}
	burst := c.Burst
	if burst == 0 {
		burst = c.Rate
	}
	fmt.Fprintf(&b, " (burst %s)", thousands(burst))
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
	if period == time.Second {
		return thousands(rate) + "/s"
	}
	return thousands(rate) + "/" + period.String()
}

// thousands writes n with commas: 10,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
