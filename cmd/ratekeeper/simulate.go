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
t_ms,peak_in_flight,mean_in_flight,admitted,refused,max; for tokens per mode
and tick, header t_ms,mode,tokens,window_tokens,admitted,refused,limit; for
calendar per case, limit and tick, header
case,limit,tick_utc,admitted,refused,used).

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

tokens scenario (a token bucket of 10,000 tokens per minute, burst 2,000, on
long requests whose cost comes from the response; nothing sleeps):
  tokens              20 requests at once, then one every 3s, each streaming
                      5s-20s and costing 500-2,000 tokens; run charged after
                      the response only, then reserving 2,000 at admission
                      and settling at the end; for 5m, counted per second

calendar scenario (fixed windows that follow the calendar of --time-zone,
beside epoch-aligned ones of the same nominal length; nothing sleeps):
  calendar            a quota of 10,000 per period in Europe/Berlin, offered
                      1.5x evenly: monthly (and billed on the 15th) against
                      period 30d across 2026's ends of February and March;
                      daily against period 24h across the 23-hour and the
                      25-hour day; counted per hour

Every flag overrides the scenario's value; a flag that does not apply to the
scenario is an error. --out, --name and --json apply to every scenario;
--rate to all but concurrency and tokens; --period to all but those and
calendar; --duration to all but calendar; --instances, --split and
--sync-periods to the shared ones only; --load to the shared ones,
concurrency and calendar; --max, --hold and --jitter to concurrency only;
--time-zone to calendar only; --seed to all but the shared ones and
calendar; --tick to all but the shared ones and tokens; the others to the
algorithms' scenarios only.

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

	// The calendar scenario's.
	timeZone string

	// The list flags, as parseLists reads them.
	algorithmList []ratekeeper.Algorithm
	splitList     []int
	periodList    []time.Duration
	location      *time.Location
}

// algorithmFlags are the flags of the scenarios that compare algorithms.
var algorithmFlags = []string{"algorithms", "rate", "period", "burst", "items", "clients", "worker", "tick", "pause", "duration", "seed", "store"}

// kindFlags are the flags each kind of scenario takes besides --out,
// --name and --json: a flag given to a scenario whose kind does not take
// it is an error.
var kindFlags = map[sim.Kind][]string{
	sim.KindWorkers:     algorithmFlags,
	sim.KindTraffic:     algorithmFlags,
	sim.KindShared:      {"rate", "period", "duration", "instances", "split", "load", "sync-periods"},
	sim.KindConcurrency: {"max", "load", "hold", "jitter", "duration", "tick", "seed"},
	sim.KindTokens:      {"duration", "seed"},
	sim.KindCalendar:    {"rate", "load", "tick", "time-zone"},
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
	f, cfg, err := parseSimulate(args, stderr)
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

	res, err := sim.Run(ctx, cfg, opts...)
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
		base := filepath.Join(f.out, cfg.Name)
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
func parseSimulate(args []string, stderr io.Writer) (simulateFlags, sim.Config, error) {
	var f simulateFlags
	fs := f.flagSet(stderr)
	name, err := parseArgs(fs, args)
	if err != nil {
		return f, sim.Config{}, err
	}
	scenario, err := sim.Scenario(name, nil)
	if err != nil {
		return f, sim.Config{}, usageError{err}
	}
	set := map[string]bool{}
	var notHere []string
	fs.Visit(func(fl *flag.Flag) {
		set[fl.Name] = true
		if !slices.Contains(kindFlags[scenario.Kind], fl.Name) && !slices.Contains([]string{"out", "name", "json"}, fl.Name) {
			notHere = append(notHere, fl.Name)
		}
	})
	if len(notHere) > 0 {
		return f, sim.Config{}, usageError{fmt.Errorf("--%s does not apply to the %s scenario", notHere[0], name)}
	}
	if err := f.parseLists(name, set); err != nil {
		return f, sim.Config{}, usageError{err}
	}
	setters := f.setters()
	cfg, err := sim.Scenario(name, func(c *sim.Config) {
		for fl := range set {
			if apply, ok := setters[fl]; ok {
				apply(c)
			}
		}
	})
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return f, sim.Config{}, usageError{err}
	}
	return f, cfg, nil
}

// parseArgs parses args with fs, flags before and after the scenario, and
// returns the scenario's name.
func parseArgs(fs *flag.FlagSet, args []string) (string, error) {
	var positional []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return "", err
			}
			return "", usageError{err}
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(positional) != 1 {
		return "", usageError{fmt.Errorf("want one scenario (%s), got %d arguments",
			strings.Join(sim.Scenarios, ", "), len(positional))}
	}
	return positional[0], nil
}

// flagSet defines simulate's flags on f.
func (f *simulateFlags) flagSet(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simulateUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.algorithms, "algorithms", "all", "comma-separated `list` of algorithms to compare: "+algorithmNames())
	fs.IntVar(&f.rate, "rate", 0, "the limit's rate per period (default 1000; accuracy and shared 100; calendar 10000); not for concurrency, whose limit is --max, nor tokens")
	fs.DurationVar(&f.period, "period", 0, "the limit's period (default 1s)")
	fs.IntVar(&f.burst, "burst", 0, "the buckets' capacity (default: the rate)")
	fs.IntVar(&f.items, "items", 0, "items the workers must do (default 10000; boundary: twice the rate)")
	fs.IntVar(&f.clients, "clients", 0, "workers sharing one limit, or traffic clients with a limit each (default 1; boundary 20; accuracy 100)")
	fs.StringVar(&f.worker, "worker", "", "how workers pace themselves: ask (Allow until allowed, waiting RetryAfter) or wait (Reserve and wait out Delay, as Limiter.Wait) (default ask)")
	fs.DurationVar(&f.tick, "tick", 0, "width of a bar: items (requests) are counted per tick (default 100ms; concurrency 250ms; calendar 1h, whole minutes)")
	fs.Var(&f.pauses, "pause", "pause the workers: they do nothing from AT for FOR, written `AT+FOR` such as 4s+1s; repeatable (replaces the scenario's pauses)")
	fs.DurationVar(&f.duration, "duration", 0, "how long traffic clients send requests (accuracy; default 30s), or requests arrive (shared: whole periods; default 10s; concurrency 10s; tokens 5m, whole seconds)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the traffic generator, or of concurrency's holds, or of tokens' holds and costs: the same seed gives the same output")
	fs.StringVar(&f.out, "out", "", "write NAME.csv, NAME.svg and NAME.png into `DIR`")
	fs.StringVar(&f.name, "name", "", "base name of the output files and title of the charts (default: the scenario)")
	fs.BoolVar(&f.json, "json", false, "print the summary as JSON (an array: one object per algorithm or mode; concurrency: one object) instead of a table")
	fs.StringVar(&f.store, "store", storeconfig.DefaultURL, "store `URL`: memory:// or a Redis URL (redis://host:port/db), decided at the virtual clock's instants")
	fs.IntVar(&f.instances, "instances", 0, "shared-roundrobin: how many instances share the limit (default 3)")
	fs.StringVar(&f.split, "split", "", "shared: the balancer's `weights`, one per instance, such as 70,20,10 (default: 1,1,1 round-robin; 70,20,10 skewed)")
	fs.Float64Var(&f.load, "load", 0, "shared: the requests offered, as a multiple of the limit (default 2.5); concurrency: as a multiple of the max/hold per second the slots serve (default 1.5); calendar: as a multiple of the quota per 30 days or 24 hours (default 1.5)")
	fs.StringVar(&f.syncPeriods, "sync-periods", "", "shared: the sync periods T of sync and lease modes, comma-separated `durations` (default 10ms,100ms,1s)")
	fs.IntVar(&f.max, "max", 0, "concurrency: how many requests may be in flight at once (default 10)")
	fs.DurationVar(&f.hold, "hold", 0, "concurrency: how long an admitted request stays in flight, the mean with --jitter (default 100ms)")
	fs.BoolVar(&f.jitter, "jitter", false, "concurrency: holds drawn from an exponential distribution of mean --hold (from --seed); --jitter=false holds every request exactly --hold (default true)")
	fs.StringVar(&f.timeZone, "time-zone", "", "calendar: the IANA time `zone` whose calendar the windows follow (default Europe/Berlin)")
	return fs
}

// parseLists reads the list flags that are set (--algorithms, --split,
// --instances and --sync-periods) for the scenario name.
func (f *simulateFlags) parseLists(name string, set map[string]bool) error {
	var err error
	if set["algorithms"] {
		if f.algorithmList, err = parseAlgorithms(f.algorithms); err != nil {
			return err
		}
	}
	if set["split"] {
		for _, w := range strings.Split(f.split, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(w))
			if err != nil {
				return fmt.Errorf("--split: %q is not a whole number", w)
			}
			f.splitList = append(f.splitList, n)
		}
	}
	if set["instances"] {
		if name != "shared-roundrobin" || set["split"] {
			return errors.New("--instances is for shared-roundrobin; give the weights with --split")
		}
		f.splitList = slices.Repeat([]int{1}, max(0, f.instances))
	}
	if set["time-zone"] {
		if f.location, err = time.LoadLocation(f.timeZone); err != nil || f.timeZone == "" {
			return fmt.Errorf("--time-zone: %q is not a time zone (Europe/Berlin, America/New_York, UTC)", f.timeZone)
		}
	}
	if set["sync-periods"] {
		for _, p := range strings.Split(f.syncPeriods, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(p))
			if err != nil {
				return fmt.Errorf("--sync-periods: %w", err)
			}
			f.periodList = append(f.periodList, d)
		}
	}
	return nil
}

// setters change a scenario's Config as the flag of their name says, once
// parseLists has read the lists.
func (f *simulateFlags) setters() map[string]func(*sim.Config) {
	return map[string]func(*sim.Config){
		"algorithms":   func(c *sim.Config) { c.Algorithms = f.algorithmList },
		"rate":         func(c *sim.Config) { c.Rate = f.rate },
		"period":       func(c *sim.Config) { c.Period = f.period },
		"burst":        func(c *sim.Config) { c.Burst = f.burst },
		"items":        func(c *sim.Config) { c.Items = f.items },
		"clients":      func(c *sim.Config) { c.Clients = f.clients },
		"worker":       func(c *sim.Config) { c.Behaviour = sim.Behaviour(f.worker) },
		"tick":         func(c *sim.Config) { c.Tick = f.tick },
		"pause":        func(c *sim.Config) { c.Pauses = f.pauses },
		"duration":     func(c *sim.Config) { c.Duration = f.duration },
		"seed":         func(c *sim.Config) { c.Seed = f.seed },
		"name":         func(c *sim.Config) { c.Name = f.name },
		"split":        func(c *sim.Config) { c.Split = f.splitList },
		"instances":    func(c *sim.Config) { c.Split = f.splitList },
		"load":         func(c *sim.Config) { c.Load = f.load },
		"sync-periods": func(c *sim.Config) { c.SyncPeriods = f.periodList },
		"max":          func(c *sim.Config) { c.Max = f.max },
		"hold":         func(c *sim.Config) { c.Hold = f.hold },
		"jitter":       func(c *sim.Config) { c.Jitter = f.jitter },
		"time-zone":    func(c *sim.Config) { c.Location = f.location },
	}
}
