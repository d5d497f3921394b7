package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

const simulateUsage = `usage: ratekeeper simulate SCENARIO [flags]

Runs the real limiter on a virtual clock and shows how each algorithm (or each
shared store mode) shapes the workload: a summary table (or --json), and with
--out DIR the counts (DIR/NAME.csv: per tick, header t_ms,algorithm,count; for
the shared scenarios per window, header t_ms,mode,sync_period_ms,admitted,bound)
and the charts (DIR/NAME.svg, DIR/NAME.png); for concurrency per tick, header
t_ms,peak_in_flight,mean_in_flight,admitted,refused,max).

scenarios:
  pacing              1 worker, 10,000 items at most 1,000/s (burst 1,000),
                      asking until allowed; counted per 100ms
  pacing-with-pauses  the same, the worker idle 4s-5s and 6s-6.5s
  boundary            20 workers, 2x the limit's items, starting 100ms before
                      a fixed window's edge
  accuracy            100 clients (quiet, steady, bursty) limited to 100/s
                      each for 30s; every decision judged against the exact
                      sliding window log
  custom              pacing, to change with the flags

shared scenarios (one limit of 100/s, a fixed window, shared by 3 instances
through a store that behaves as Redis, offered 250/s for 10s; exact, then
sync and lease at sync periods of 10ms, 100ms and 1s; store calls take no
time):
  shared-roundrobin   the balancer deals the requests in turn
  shared-skewed       it sends 70% of them to one instance, 20% and 10% to
                      the others

concurrency scenario (at most --max requests in flight at once, each held
--hold; nothing sleeps):
  concurrency         10 slots, requests held 100ms on average (exponential),
                      arriving evenly at 1.5x the 100/s the slots serve, for
                      10s; counted per 250ms. Without the limit Little's law
                      (L = λW) puts 15 in flight: about a third is refused

Every flag overrides the scenario's value; a flag that does not apply to the
scenario is an error. --out, --name and --json apply to every scenario;
--rate and --period to all but concurrency; --duration to all; --instances,
--split and --sync-periods to the shared ones only; --load to the shared ones
and concurrency; --max, --hold and --jitter to concurrency only; --tick and
--seed to all but the shared ones; the others to the algorithms' scenarios
only.

flags:
`

// simulateFlags holds the command line; the scenario supplies what is not
// given.
type simulateFlags struct {
	algorithms string
	rate       int
	period     time.Duration
	burst      int
	items      int
	clients    int
	worker     string
	tick       time.Duration
	pauses     pauseList
	duration   time.Duration
	seed       uint64
	out        string
	name       string
	json       bool
	store      string

	// The shared scenarios'.
	instances   int
	split       string
	load        float64
	syncPeriods string

	// The concurrency scenario's.
	max    int
	hold   time.Duration
	jitter bool
}

// The kinds of scenario, each with the flags it takes besides --out, --name
// and --json: a flag given to a scenario whose kind does not take it is an
// error.
const (
	algorithmsKind  = "algorithms"
	sharedKind      = "shared"
	concurrencyKind = "concurrency"
)

var kindFlags = map[string][]string{
	algorithmsKind:  {"algorithms", "rate", "period", "burst", "items", "clients", "worker", "tick", "pause", "duration", "seed", "store"},
	sharedKind:      {"rate", "period", "duration", "instances", "split", "load", "sync-periods"},
	concurrencyKind: {"max", "load", "hold", "jitter", "duration", "tick", "seed"},
}

// kindOf is the kind of the scenario name; algorithmsKind for a name no
// kind knows, for sim.Scenario to refuse.
func kindOf(name string) string {
	switch {
	case slices.Contains(sim.SharedScenarios, name):
		return sharedKind
	case slices.Contains(sim.ConcurrencyScenarios, name):
		return concurrencyKind
	}
	return algorithmsKind
}

// report is what a simulation gives: a sim.Result, a sim.SharedResult or a
// sim.ConcurrencyResult.
type report interface {
	WriteTable(io.Writer) error
	WriteJSON(io.Writer) error
	WriteCSV(io.Writer) error
	WriteSVG(io.Writer) error
	WritePNG(io.Writer) error
	WriteFiles(dir string) error
}

// simulation is a parsed command line: the name of the files it writes,
// and how to run it.
type simulation struct {
	name string
	run  func(ctx context.Context, opts ...sim.Option) (report, error)
}

// pauseList is the repeatable --pause flag.
type pauseList []sim.Pause

func (p *pauseList) String() string {
	s := make([]string, len(*p))
	for i, x := range *p {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

func (p *pauseList) Set(v string) error {
	x, err := sim.ParsePause(v)
	if err != nil {
		return err
	}
	*p = append(*p, x)
	return nil
}

func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, s, err := parseSimulate(args, stderr)
	if err != nil {
		return err
	}
	var opts []sim.Option
	if sc := (storeconfig.Config{URL: f.store}); !sc.IsMemory() {
		if err := sc.Validate(); err != nil {
			return usageError{fmt.Errorf("--store: %w", err)}
		}
		// The Redis store itself, not storeconfig's failsafe wrapper: a
		// failing call must stop the run, not make up a decision. Redis
		// expires keys on its own clock, so they live at least a minute
		// whatever the virtual clock says; the prefix keeps this run's keys
		// apart, and the virtual clock starts at the real time.
		rs, err := redisstore.Open(ctx, sc.URL,
			redisstore.WithMinTTL(time.Minute),
			redisstore.WithAutoPipeline(false),
			redisstore.WithPrefix(fmt.Sprintf("ratekeeper-sim:%d:", time.Now().UnixNano())))
		if err != nil {
			return err
		}
		defer rs.Close()
		opts = append(opts, sim.WithStore(rs, ""), sim.WithStart(time.Now()))
	}

	res, err := s.run(ctx, opts...)
	if err != nil {
		return err
	}
	if f.json {
		err = res.WriteJSON(stdout)
	} else {
		err = res.WriteTable(stdout)
	}
	if err != nil {
		return err
	}
	if f.out != "" {
		if err := res.WriteFiles(f.out); err != nil {
			return err
		}
		base := filepath.Join(f.out, s.name)
		msg := fmt.Sprintf("\nwrote %[1]s.csv, %[1]s.svg and %[1]s.png\n", base)
		if f.json {
			fmt.Fprint(stderr, msg)
		} else {
			fmt.Fprint(stdout, msg)
		}
	}
	if r, ok := res.(*sim.Result); ok {
		for _, s := range r.Summaries() {
			if s.ItemsLost > 0 {
				return fmt.Errorf("%s lost %d items", s.Algorithm, s.ItemsLost)
			}
		}
	}
	return nil
}

func algorithmNames() string {
	s := make([]string, len(ratekeeper.Algorithms))
	for i, a := range ratekeeper.Algorithms {
		s[i] = string(a)
	}
	return strings.Join(s, ", ") + " or all"
}

// parseAlgorithms reads --algorithms.
func parseAlgorithms(v string) ([]ratekeeper.Algorithm, error) {
	if v == "all" || v == "" {
		return append([]ratekeeper.Algorithm(nil), ratekeeper.Algorithms...), nil
	}
	var out []ratekeeper.Algorithm
	for _, s := range strings.Split(v, ",") {
		a := ratekeeper.Algorithm(strings.TrimSpace(s))
		if !a.Valid() {
			return nil, fmt.Errorf("--algorithms: unknown algorithm %q (%s)", s, algorithmNames())
		}
		out = append(out, a)
	}
	return out, nil
}

// parseSimulate reads the command line: the scenario it names, changed by
// the flags.
func parseSimulate(args []string, stderr io.Writer) (simulateFlags, simulation, error) {
	var f simulateFlags
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simulateUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.algorithms, "algorithms", "all", "comma-separated `list` of algorithms to compare: "+algorithmNames())
	fs.IntVar(&f.rate, "rate", 0, "the limit's rate per period (default 1000; accuracy and shared 100); not for concurrency, whose limit is --max")
	fs.DurationVar(&f.period, "period", 0, "the limit's period (default 1s)")
	fs.IntVar(&f.burst, "burst", 0, "the buckets' capacity (default: the rate)")
	fs.IntVar(&f.items, "items", 0, "items the workers must do (default 10000; boundary: twice the rate)")
	fs.IntVar(&f.clients, "clients", 0, "workers sharing one limit, or traffic clients with a limit each (default 1; boundary 20; accuracy 100)")
	fs.StringVar(&f.worker, "worker", "", "how workers pace themselves: ask (Allow until allowed, waiting RetryAfter) or wait (Reserve and wait out Delay, as Limiter.Wait) (default ask)")
	fs.DurationVar(&f.tick, "tick", 0, "width of a bar: items (requests) are counted per tick (default 100ms; concurrency 250ms)")
	fs.Var(&f.pauses, "pause", "pause the workers: they do nothing from AT for FOR, written `AT+FOR` such as 4s+1s; repeatable (replaces the scenario's pauses)")
	fs.DurationVar(&f.duration, "duration", 0, "how long traffic clients send requests (accuracy; default 30s), or requests arrive (shared: whole periods; default 10s; concurrency 10s)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the traffic generator, or of concurrency's holds: the same seed gives the same output")
	fs.StringVar(&f.out, "out", "", "write NAME.csv, NAME.svg and NAME.png into `DIR`")
	fs.StringVar(&f.name, "name", "", "base name of the output files and title of the charts (default: the scenario)")
	fs.BoolVar(&f.json, "json", false, "print the summary as JSON (an array: one object per algorithm or mode; concurrency: one object) instead of a table")
	fs.StringVar(&f.store, "store", storeconfig.DefaultURL, "store `URL`: memory:// or a Redis URL (redis://host:port/db), decided at the virtual clock's instants")
	fs.IntVar(&f.instances, "instances", 0, "shared-roundrobin: how many instances share the limit (default 3)")
	fs.StringVar(&f.split, "split", "", "shared: the balancer's `weights`, one per instance, such as 70,20,10 (default: 1,1,1 round-robin; 70,20,10 skewed)")
	fs.Float64Var(&f.load, "load", 0, "shared: the requests offered, as a multiple of the limit (default 2.5); concurrency: as a multiple of the max/hold per second the slots serve (default 1.5)")
	fs.StringVar(&f.syncPeriods, "sync-periods", "", "shared: the sync periods T of sync and lease modes, comma-separated `durations` (default 10ms,100ms,1s)")
	fs.IntVar(&f.max, "max", 0, "concurrency: how many requests may be in flight at once (default 10)")
	fs.DurationVar(&f.hold, "hold", 0, "concurrency: how long an admitted request stays in flight, the mean with --jitter (default 100ms)")
	fs.BoolVar(&f.jitter, "jitter", false, "concurrency: holds drawn from an exponential distribution of mean --hold (from --seed); --jitter=false holds every request exactly --hold (default true)")

	// Flags may come before and after the scenario.
	var positional []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return f, simulation{}, err
			}
			return f, simulation{}, usageError{err}
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(positional) != 1 {
		return f, simulation{}, usageError{fmt.Errorf("want one scenario (%s), got %d arguments",
			strings.Join(slices.Concat(sim.Scenarios, sim.SharedScenarios, sim.ConcurrencyScenarios), ", "), len(positional))}
	}
	name := positional[0]
	kind := kindOf(name)
	set := map[string]bool{}
	var notHere []string
	fs.Visit(func(fl *flag.Flag) {
		set[fl.Name] = true
		if !slices.Contains(kindFlags[kind], fl.Name) && !slices.Contains([]string{"out", "name", "json"}, fl.Name) {
			notHere = append(notHere, fl.Name)
		}
	})
	if len(notHere) > 0 {
		return f, simulation{}, usageError{fmt.Errorf("--%s does not apply to the %s scenario", notHere[0], name)}
	}
	switch kind {
	case sharedKind:
		s, err := parseShared(name, f, set)
		return f, s, err
	case concurrencyKind:
		s, err := parseConcurrency(name, f, set)
		return f, s, err
	}

	algorithms, err := parseAlgorithms(f.algorithms)
	if err != nil {
		return f, simulation{}, usageError{err}
	}
	cfg, err := sim.Scenario(name, func(c *sim.Config) {
		c.Algorithms = algorithms
		c.Seed = f.seed
		if set["rate"] {
			c.Rate = f.rate
		}
		if set["period"] {
			c.Period = f.period
		}
		if set["burst"] {
			c.Burst = f.burst
		}
		if set["items"] {
			c.Items = f.items
		}
		if set["clients"] {
			c.Clients = f.clients
		}
		if set["worker"] {
			c.Behaviour = sim.Behaviour(f.worker)
		}
		if set["tick"] {
			c.Tick = f.tick
		}
		if set["pause"] {
			c.Pauses = f.pauses
		}
		if set["duration"] {
			c.Duration = f.duration
		}
		if set["name"] {
			c.Name = f.name
		}
	})
	if err != nil {
		return f, simulation{}, usageError{err}
	}
	if err := cfg.Validate(); err != nil {
		return f, simulation{}, usageError{err}
	}
	return f, simulation{name: cfg.Name, run: func(ctx context.Context, opts ...sim.Option) (report, error) {
		r, err := sim.Run(ctx, cfg, opts...)
		if err != nil {
			return nil, err
		}
		return r, nil
	}}, nil
}

// parseShared makes the shared scenario name, changed by the flags set.
func parseShared(name string, f simulateFlags, set map[string]bool) (simulation, error) {
	var split []int
	if set["split"] {
		for _, w := range strings.Split(f.split, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(w))
			if err != nil {
				return simulation{}, usageError{fmt.Errorf("--split: %q is not a whole number", w)}
			}
			split = append(split, n)
		}
	}
	if set["instances"] {
		if name != "shared-roundrobin" || set["split"] {
			return simulation{}, usageError{errors.New("--instances is for shared-roundrobin; give the weights with --split")}
		}
		split = slices.Repeat([]int{1}, max(0, f.instances))
	}
	var periods []time.Duration
	if set["sync-periods"] {
		for _, p := range strings.Split(f.syncPeriods, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(p))
			if err != nil {
				return simulation{}, usageError{fmt.Errorf("--sync-periods: %w", err)}
			}
			periods = append(periods, d)
		}
	}
	cfg, err := sim.SharedScenario(name, func(c *sim.SharedConfig) {
		if split != nil {
			c.Split = split
		}
		if periods != nil {
			c.SyncPeriods = periods
		}
		if set["rate"] {
			c.Rate = f.rate
		}
		if set["period"] {
			c.Period = f.period
		}
		if set["load"] {
			c.Load = f.load
		}
		if set["duration"] {
			c.Duration = f.duration
		}
		if set["name"] {
			c.Name = f.name
		}
	})
	if err != nil {
		return simulation{}, usageError{err}
	}
	if err := cfg.Validate(); err != nil {
		return simulation{}, usageError{err}
	}
	return simulation{name: cfg.Name, run: func(ctx context.Context, _ ...sim.Option) (report, error) {
		r, err := sim.RunShared(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return r, nil
	}}, nil
}

// parseConcurrency makes the concurrency scenario name, changed by the
// flags set.
func parseConcurrency(name string, f simulateFlags, set map[string]bool) (simulation, error) {
	cfg, err := sim.ConcurrencyScenario(name, func(c *sim.ConcurrencyConfig) {
		if set["max"] {
			c.Max = f.max
		}
		if set["load"] {
			c.Load = f.load
		}
		if set["hold"] {
			c.Hold = f.hold
		}
		if set["jitter"] {
			c.Jitter = f.jitter
		}
		if set["seed"] {
			c.Seed = f.seed
		}
		if set["duration"] {
			c.Duration = f.duration
		}
		if set["tick"] {
			c.Tick = f.tick
		}
		if set["name"] {
			c.Name = f.name
		}
	})
	if err != nil {
		return simulation{}, usageError{err}
	}
	if err := cfg.Validate(); err != nil {
		return simulation{}, usageError{err}
	}
	return simulation{name: cfg.Name, run: func(ctx context.Context, _ ...sim.Option) (report, error) {
		r, err := sim.RunConcurrency(ctx, cfg)
		if err != nil {
			return nil, err
		}
		return r, nil
	}}, nil
}
