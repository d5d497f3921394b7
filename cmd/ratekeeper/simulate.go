package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

const simulateUsage = `usage: ratekeeper simulate SCENARIO [flags]

Runs the real limiter on a virtual clock and shows how each algorithm shapes
the workload: a summary table (or --json), and with --out DIR the counts per
tick (DIR/NAME.csv, header t_ms,algorithm,count) and the charts (DIR/NAME.svg,
DIR/NAME.png).

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

Every flag overrides the scenario's value.

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
	for _, s := range res.Summaries() {
		if s.ItemsLost > 0 {
			return fmt.Errorf("%s lost %d items", s.Algorithm, s.ItemsLost)
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
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, simulateUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.algorithms, "algorithms", "all", "comma-separated `list` of algorithms to compare: "+algorithmNames())
	fs.IntVar(&f.rate, "rate", 0, "the limit's rate per period (default 1000; accuracy 100)")
	fs.DurationVar(&f.period, "period", 0, "the limit's period (default 1s)")
	fs.IntVar(&f.burst, "burst", 0, "the buckets' capacity (default: the rate)")
	fs.IntVar(&f.items, "items", 0, "items the workers must do (default 10000; boundary: twice the rate)")
	fs.IntVar(&f.clients, "clients", 0, "workers sharing one limit, or traffic clients with a limit each (default 1; boundary 20; accuracy 100)")
	fs.StringVar(&f.worker, "worker", "", "how workers pace themselves: ask (Allow until allowed, waiting RetryAfter) or wait (Reserve and wait out Delay, as Limiter.Wait) (default ask)")
	fs.DurationVar(&f.tick, "tick", 0, "width of a bar: items are counted per tick (default 100ms)")
	fs.Var(&f.pauses, "pause", "pause the workers: they do nothing from AT for FOR, written `AT+FOR` such as 4s+1s; repeatable (replaces the scenario's pauses)")
	fs.DurationVar(&f.duration, "duration", 0, "how long traffic clients send requests (accuracy; default 30s)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the traffic generator: the same seed gives the same output")
	fs.StringVar(&f.out, "out", "", "write NAME.csv, NAME.svg and NAME.png into `DIR`")
	fs.StringVar(&f.name, "name", "", "base name of the output files and title of the charts (default: the scenario)")
	fs.BoolVar(&f.json, "json", false, "print the summary as JSON (one object per algorithm) instead of a table")
	fs.StringVar(&f.store, "store", storeconfig.DefaultURL, "store `URL`: memory:// or a Redis URL (redis://host:port/db), decided at the virtual clock's instants")

	// Flags may come before and after the scenario.
	var positional []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return f, sim.Config{}, err
			}
			return f, sim.Config{}, usageError{err}
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(positional) != 1 {
		return f, sim.Config{}, usageError{fmt.Errorf("want one scenario (%s), got %d arguments", strings.Join(sim.Scenarios, ", "), len(positional))}
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })

	algorithms, err := parseAlgorithms(f.algorithms)
	if err != nil {
		return f, sim.Config{}, usageError{err}
	}
	cfg, err := sim.Scenario(positional[0], func(c *sim.Config) {
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
		return f, sim.Config{}, usageError{err}
	}
	if err := cfg.Validate(); err != nil {
		return f, sim.Config{}, usageError{err}
	}
	return f, cfg, nil
}
