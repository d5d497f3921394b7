package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/shared"
)

// SharedConfig describes a simulation of one limit that instances behind a
// load balancer share through a shared store, decided in each of the
// store's modes (docs/redis.md): exact, then sync and lease at each sync
// period. SharedScenario returns the named ones.
//
// Requests arrive evenly, at Load times the limit in all; the balancer
// deals them to the instances by Split (a smooth weighted round-robin:
// equal weights take turns). Each instance decides through its own engine
// over one in-memory store that behaves as the Redis scripts do
// (shared.Model), on the virtual clock, and syncs every sync period T,
// instance i's period starting i·T/N after instance 0's. A call to the
// store takes no time (δ = 0): at the rates pictured a round trip of a
// millisecond would let the other instances admit less than one request
// more (Σ r_j·2δ).
type SharedConfig struct {
	// Name names the output files (NAME.csv, NAME.svg, NAME.png) and titles
	// the chart.
	Name string
	// Rate per Period is the shared limit L, a fixed window.
	Rate   int
	Period time.Duration
	// Split is the balancer's weights, one per instance: the share of the
	// requests each gets.
	Split []int
	// Load is the requests offered per Period, as a multiple of Rate.
	Load float64
	// SyncPeriods are the periods T sync and lease modes run at.
	SyncPeriods []time.Duration
	// Duration is how long requests arrive: a whole number of Periods, each
	// a window of the chart.
	Duration time.Duration
}

// SharedScenarios lists the named scenarios SharedScenario knows.
var SharedScenarios = []string{"shared-roundrobin", "shared-skewed"}

// SharedScenario returns the named shared scenario, changed by set if not
// nil. Both are 3 instances sharing a fixed window of 100 per second,
// offered 2.5 times that, for 10 windows, at sync periods of 10 ms, 100 ms
// and 1 s:
//
//   - shared-roundrobin: the balancer deals the requests in turn, 83 per
//     second to each instance.
//   - shared-skewed: it sends 70% of them to one instance, 20% and 10% to
//     the others (175, 50 and 25 per second).
func SharedScenario(name string, set func(*SharedConfig)) (SharedConfig, error) {
	c := SharedConfig{
		Name:        name,
		Rate:        100,
		Period:      time.Second,
		Load:        2.5,
		SyncPeriods: []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second},
		Duration:    10 * time.Second,
	}
	switch name {
	case "shared-roundrobin":
		c.Split = []int{1, 1, 1}
	case "shared-skewed":
		c.Split = []int{70, 20, 10}
	default:
		return SharedConfig{}, fmt.Errorf("unknown shared scenario %q (%s)", name, strings.Join(SharedScenarios, ", "))
	}
	if set != nil {
		set(&c)
	}
	return c, nil
}

// Bounds of a shared simulation.
const (
	maxInstances   = 64
	maxSyncPeriods = 6 // one colour each
	maxWindows     = 100
)

func (c SharedConfig) limit() ratekeeper.Limit {
	return ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: c.Rate, Period: c.Period}
}

// Validate reports what is wrong with c, naming the field, or nil.
func (c SharedConfig) Validate() error {
	if c.Name == "" {
		return errors.New("name is missing")
	}
	if strings.ContainsAny(c.Name, `/\`) {
		return fmt.Errorf("name %q must not contain a path separator", c.Name)
	}
	if err := c.limit().Validate(); err != nil {
		return err
	}
	if len(c.Split) == 0 || len(c.Split) > maxInstances {
		return fmt.Errorf("split: one weight per instance, 1 to %d of them, not %d", maxInstances, len(c.Split))
	}
	for _, w := range c.Split {
		if w <= 0 {
			return fmt.Errorf("split: weights must be positive, not %d", w)
		}
	}
	if !(c.Load > 0) || math.IsInf(c.Load, 0) {
		return fmt.Errorf("load: must be positive, not %v", c.Load)
	}
	if len(c.SyncPeriods) == 0 || len(c.SyncPeriods) > maxSyncPeriods {
		return fmt.Errorf("sync periods: 1 to %d of them, not %d", maxSyncPeriods, len(c.SyncPeriods))
	}
	for i, t := range c.SyncPeriods {
		if t < time.Millisecond || t%time.Microsecond != 0 {
			return fmt.Errorf("sync periods: %v is not a whole number of microseconds of at least 1ms", t)
		}
		if slices.Contains(c.SyncPeriods[:i], t) {
			return fmt.Errorf("sync periods: %v is given twice", t)
		}
	}
	if c.Duration <= 0 || c.Duration%c.Period != 0 || c.Duration/c.Period > maxWindows {
		return fmt.Errorf("duration: must be 1 to %d whole periods of %v, not %v", maxWindows, c.Period, c.Duration)
	}
	if n := c.Load * float64(c.Rate) * float64(c.Duration/c.Period); n > maxItems {
		return fmt.Errorf("load: %.0f requests in %v; at most %d", n, c.Duration, maxItems)
	}
	if n := int64(c.Duration/slices.Min(c.SyncPeriods)) * int64(len(c.Split)); n > maxItems {
		return fmt.Errorf("sync periods: %d syncs in %v; at most %d", n, c.Duration, maxItems)
	}
	return nil
}

// rates are the requests each instance is offered per Period.
func (c SharedConfig) rates() []float64 {
	sum := 0
	for _, w := range c.Split {
		sum += w
	}
	r := make([]float64, len(c.Split))
	for i, w := range c.Split {
		r[i] = c.Load * float64(c.Rate) * float64(w) / float64(sum)
	}
	return r
}

// roundRobin reports whether the balancer deals the requests in turn.
func (c SharedConfig) roundRobin() bool {
	return slices.Min(c.Split) == slices.Max(c.Split)
}

// SyncBound is the most sync mode at period T may admit in a window by
// docs/redis.md's formula, with δ = 0: the limit plus what the other
// instances are offered in 2T, for the instance offered least (the one
// that knows least of the others), and never more than N·L.
func (c SharedConfig) SyncBound(T time.Duration) float64 {
	rates := c.rates()
	var total float64
	for _, r := range rates {
		total += r
	}
	others := total - slices.Min(rates)
	n := float64(len(rates))
	return min(n*float64(c.Rate), float64(c.Rate)+others*2*float64(T)/float64(c.Period))
}

// String describes c in one line, for chart titles.
func (c SharedConfig) String() string {
	rates := c.rates()
	per := func(r float64) string { return trimFloat(math.Round(r)) }
	var b strings.Builder
	fmt.Fprintf(&b, "%d instances, ", len(c.Split))
	if c.roundRobin() {
		fmt.Fprintf(&b, "round-robin (%s/%s each)", per(rates[0]), periodUnit(c.Period))
	} else {
		ws := make([]string, len(c.Split))
		rs := make([]string, len(rates))
		for i := range rates {
			ws[i], rs[i] = strconv.Itoa(c.Split[i]), per(rates[i])
		}
		fmt.Fprintf(&b, "skewed %s (%s/%s)", strings.Join(ws, ":"), strings.Join(rs, ", "), periodUnit(c.Period))
	}
	fmt.Fprintf(&b, "; %s offered, limit %s (fixed window)",
		rateString(int(math.Round(c.Load*float64(c.Rate))), c.Period), rateString(c.Rate, c.Period))
	return b.String()
}

// periodUnit writes a period as the unit of a rate: "s", or "2m0s".
func periodUnit(p time.Duration) string {
	if p == time.Second {
		return "s"
	}
	return p.String()
}

// SharedResult is what a shared simulation measured: exact first, then
// sync and lease at each sync period.
type SharedResult struct {
	Config   SharedConfig
	Outcomes []SharedOutcome
}

// SharedOutcome is what one mode admitted.
type SharedOutcome struct {
	// Mode is "exact", "sync" or "lease".
	Mode       string
	SyncPeriod time.Duration // zero for exact
	// Admitted holds the requests admitted per window, by all instances.
	Admitted []int
	// Bound is the most a window may admit: the limit for exact and lease,
	// SyncBound for sync.
	Bound   float64
	Summary SharedSummary

	mode shared.Mode
}

// SharedSummary sums up a SharedOutcome. Its JSON form is part of the
// command line's contract.
type SharedSummary struct {
	Mode string `json:"mode"`
	// SyncPeriod is T, as Go writes durations ("100ms"); empty for exact.
	SyncPeriod string `json:"sync_period,omitempty"`
	// Offered and Admitted are the requests of the whole run.
	Offered  int `json:"offered"`
	Admitted int `json:"admitted"`
	// AdmittedPerInstance is what each instance admitted.
	AdmittedPerInstance []int `json:"admitted_per_instance"`
	// MaxPerWindow and MinPerWindow are the most and the least admitted in
	// a window.
	MaxPerWindow int `json:"max_per_window"`
	MinPerWindow int `json:"min_per_window"`
	// Bound is the most a window may admit (SharedOutcome.Bound).
	Bound float64 `json:"bound"`
	// StoreCalls is how many calls the instances made to the shared store.
	StoreCalls int64 `json:"store_calls"`
}

// label names an outcome: "exact", "sync 100ms".
func (o SharedOutcome) label() string {
	if o.mode == shared.Exact {
		return o.mode.String()
	}
	return o.mode.String() + " " + o.SyncPeriod.String()
}

// RunShared simulates c in every mode, one after the other, each on a
// fresh store. It returns an error for a bad SharedConfig; a refused
// request is not an error.
func RunShared(ctx context.Context, c SharedConfig) (*SharedResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	res := &SharedResult{Config: c}
	add := func(m shared.Mode, T time.Duration) error {
		o, err := runMode(ctx, c, m, T)
		if err != nil {
			return fmt.Errorf("%s: %w", o.label(), err)
		}
		res.Outcomes = append(res.Outcomes, o)
		return nil
	}
	if err := add(shared.Exact, 0); err != nil {
		return nil, err
	}
	for _, m := range []shared.Mode{shared.Sync, shared.Lease} {
		for _, T := range c.SyncPeriods {
			if err := add(m, T); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

// runMode runs c's instances in mode m at sync period T.
func runMode(ctx context.Context, c SharedConfig, m shared.Mode, T time.Duration) (SharedOutcome, error) {
	o := SharedOutcome{Mode: m.String(), mode: m, SyncPeriod: T, Bound: float64(c.Rate)}
	if m == shared.Sync {
		o.Bound = c.SyncBound(T)
	}
	if T == 0 {
		T = shared.DefaultPeriod // exact mode's period only forgets idle keys
	}
	p := c.Period.Microseconds()
	start := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	clock := &virtualClock{base: time.UnixMicro(start / p * p).UTC()}
	store := shared.NewModel()
	n := len(c.Split)
	engines := make([]*shared.Store, n)
	lims := make([]*ratekeeper.Limiter, n)
	syncAt := make([]time.Duration, n) // each instance's next sync
	for i := range n {
		engines[i] = shared.New(store, m, T, shared.WithoutLoop(), shared.WithClock(clock))
		defer engines[i].Close()
		lim, err := ratekeeper.New(engines[i], c.limit(), ratekeeper.WithClock(clock))
		if err != nil {
			return o, err
		}
		lims[i] = lim
		syncAt[i] = T + time.Duration(i)*T/time.Duration(n)
	}
	windows := int(c.Duration / c.Period)
	o.Admitted = make([]int, windows)
	perInstance := make([]int, n)
	// Arrivals at k·gap, dealt by the balancer.
	gap := float64(c.Period.Microseconds()) / (c.Load * float64(c.Rate))
	bal := newBalancer(c.Split)
	offered := 0
	for k := 0; ; k++ {
		at := time.Duration(math.Round(float64(k)*gap)) * time.Microsecond
		if at >= c.Duration {
			break
		}
		if k%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return o, err
			}
		}
		// The syncs due by then, in order; at the same instant as a
		// request, the sync first.
		for {
			i := 0
			for j := range syncAt {
				if syncAt[j] < syncAt[i] {
					i = j
				}
			}
			if syncAt[i] > at {
				break
			}
			clock.set(syncAt[i])
			engines[i].Flush()
			syncAt[i] += T
		}
		to := bal.next()
		clock.set(at)
		offered++
		d, err := lims[to].Allow(ctx, "shared")
		if err != nil {
			return o, err
		}
		if d.Allowed {
			o.Admitted[at/c.Period]++
			perInstance[to]++
		}
	}
	s := SharedSummary{Mode: m.String(), Offered: offered, AdmittedPerInstance: perInstance,
		MaxPerWindow: slices.Max(o.Admitted), MinPerWindow: slices.Min(o.Admitted), Bound: round(o.Bound, 3),
		StoreCalls: store.Calls()}
	if m != shared.Exact {
		s.SyncPeriod = o.SyncPeriod.String()
	}
	for _, a := range perInstance {
		s.Admitted += a
	}
	o.Summary = s
	return o, nil
}

// balancer deals requests by weight, as a smooth weighted round-robin
// (nginx's): each instance gains its weight, and the one furthest ahead
// (the first on a tie) gets the request and falls back by the total. Equal
// weights take turns; any weights spread each instance's requests evenly.
type balancer struct {
	weights []int
	credit  []int
	total   int
}

func newBalancer(weights []int) *balancer {
	b := &balancer{weights: weights, credit: make([]int, len(weights))}
	for _, w := range weights {
		b.total += w
	}
	return b
}

// next is the instance that gets the next request.
func (b *balancer) next() int {
	to := 0
	for i, w := range b.weights {
		b.credit[i] += w
		if b.credit[i] > b.credit[to] {
			to = i
		}
	}
	b.credit[to] -= b.total
	return to
}

// Summaries returns the Outcomes' summaries.
func (r *SharedResult) Summaries() []SharedSummary {
	out := make([]SharedSummary, len(r.Outcomes))
	for i, o := range r.Outcomes {
		out[i] = o.Summary
	}
	return out
}

// WriteCSV writes the requests admitted per window: a header
// `t_ms,mode,sync_period_ms,admitted,bound`, then one row per mode and
// window (the window's start in milliseconds, the mode, T in milliseconds
// or empty for exact, the requests admitted in the window, the most it may
// admit), mode by mode.
func (r *SharedResult) WriteCSV(w io.Writer) error {
	b := bufio.NewWriter(w)
	b.WriteString("t_ms,mode,sync_period_ms,admitted,bound\n")
	for _, o := range r.Outcomes {
		T := ""
		if o.mode != shared.Exact {
			T = strconv.FormatFloat(float64(o.SyncPeriod)/float64(time.Millisecond), 'f', -1, 64)
		}
		for i, n := range o.Admitted {
			ms := float64(time.Duration(i)*r.Config.Period) / float64(time.Millisecond)
			fmt.Fprintf(b, "%s,%s,%s,%d,%s\n", strconv.FormatFloat(ms, 'f', -1, 64), o.mode, T, n,
				strconv.FormatFloat(round(o.Bound, 3), 'f', -1, 64))
		}
	}
	return b.Flush()
}

// WriteJSON writes the summaries as a JSON array, one object per mode and
// sync period.
func (r *SharedResult) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.Summaries())
}

// WriteTable writes the summary table people read in a terminal.
func (r *SharedResult) WriteTable(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "%s: %s; %d windows of %v\n\n", c.Name, c, int(c.Duration/c.Period), c.Period)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "mode\toffered\tadmitted\tmost/window\tleast/window\tbound\tstore calls\t\n")
	for _, o := range r.Outcomes {
		s := o.Summary
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%d\t\n", o.label(), s.Offered, s.Admitted, s.MaxPerWindow, s.MinPerWindow,
			strconv.FormatFloat(s.Bound, 'f', 1, 64), s.StoreCalls)
	}
	return tw.Flush()
}
