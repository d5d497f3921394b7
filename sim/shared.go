package sim

import (
	"bufio"
	"context"
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

// Bounds of a shared simulation.
const (
	maxInstances   = 64
	maxSyncPeriods = 6 // one colour each
	maxWindows     = 100
)

// sharedLimit is the shared kind's limit: a fixed window.
func (c Config) sharedLimit() ratekeeper.Limit {
	return ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: c.Rate, Period: c.Period}
}

// validateShared is Validate for the shared kind.
func (c Config) validateShared() error {
	if err := c.sharedLimit().Validate(); err != nil {
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
	if err := c.validateSyncPeriods(); err != nil {
		return err
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

func (c Config) validateSyncPeriods() error {
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
	return nil
}

// rates are the requests each instance is offered per Period.
func (c Config) rates() []float64 {
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
func (c Config) roundRobin() bool {
	return slices.Min(c.Split) == slices.Max(c.Split)
}

// SyncBound is the most sync mode at period T may admit in a window, by
// docs/redis.md's formula with δ = 0 (shared kind). It is the limit plus
// what the other instances are offered in 2T, for the instance offered
// least: the one that knows least of the others. It is never more than N·L.
func (c Config) SyncBound(T time.Duration) float64 {
	rates := c.rates()
	var total float64
	for _, r := range rates {
		total += r
	}
	others := total - slices.Min(rates)
	n := float64(len(rates))
	return min(n*float64(c.Rate), float64(c.Rate)+others*2*float64(T)/float64(c.Period))
}

// sharedString is String for the shared kind.
func (c Config) sharedString() string {
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

// SharedResult is what Run measured of the shared kind: one SharedOutcome
// per mode, exact first, then sync and lease at each sync period.
type SharedResult struct {
	Config   Config
	Outcomes []SharedOutcome
	figure
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

// runShared simulates c in every mode, one after the other, each on a
// fresh store.
func runShared(ctx context.Context, c Config) (*SharedResult, error) {
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
	res.figure = newFigure(c.Name, res.chartHeight(), res.draw, res.WriteCSV)
	return res, nil
}

// runMode runs c's instances in mode m at sync period T.
func runMode(ctx context.Context, c Config, m shared.Mode, T time.Duration) (SharedOutcome, error) {
	o := SharedOutcome{Mode: m.String(), mode: m, SyncPeriod: T, Bound: float64(c.Rate)}
	if m == shared.Sync {
		o.Bound = c.SyncBound(T)
	}
	store := shared.NewModel()
	in, err := newInstances(c, store, m, T)
	if err != nil {
		return o, err
	}
	defer in.close()
	o.Admitted = make([]int, int(c.Duration/c.Period))
	perInstance := make([]int, len(c.Split))
	offered, err := in.serve(ctx, c, func(at time.Duration, to int) {
		o.Admitted[at/c.Period]++
		perInstance[to]++
	})
	if err != nil {
		return o, err
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

// instances are a shared run's engines over one store, each with its own
// limiter, on one virtual clock.
type instances struct {
	clock   *virtualClock
	engines []*shared.Store
	lims    []*ratekeeper.Limiter
	syncAt  []time.Duration // each instance's next sync
	period  time.Duration   // T
}

// newInstances starts c's instances in mode m at sync period T, without
// their loops: instance i first syncs at T + i·T/N.
func newInstances(c Config, store *shared.Model, m shared.Mode, T time.Duration) (*instances, error) {
	if T == 0 {
		T = shared.DefaultPeriod // exact mode's period only forgets idle keys
	}
	n := len(c.Split)
	in := &instances{clock: &virtualClock{base: startOf(defaultStart, c.Period)}, period: T}
	for i := range n {
		e := shared.New(store, m, T, shared.WithoutLoop(), shared.WithClock(in.clock))
		in.engines = append(in.engines, e)
		lim, err := ratekeeper.New(e, c.sharedLimit(), ratekeeper.WithClock(in.clock))
		if err != nil {
			in.close()
			return nil, err
		}
		in.lims = append(in.lims, lim)
		in.syncAt = append(in.syncAt, T+time.Duration(i)*T/time.Duration(n))
	}
	return in, nil
}

func (in *instances) close() {
	for _, e := range in.engines {
		e.Close()
	}
}

// serve offers c's requests, arriving evenly and dealt by the balancer,
// and calls admitted with the instant and instance of each one admitted.
// It returns how many were offered.
func (in *instances) serve(ctx context.Context, c Config, admitted func(at time.Duration, to int)) (int, error) {
	gap := float64(c.Period.Microseconds()) / (c.Load * float64(c.Rate))
	bal := newBalancer(c.Split)
	for k := 0; ; k++ {
		at := time.Duration(math.Round(float64(k)*gap)) * time.Microsecond
		if at >= c.Duration {
			return k, nil
		}
		if k%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return k, err
			}
		}
		in.syncUntil(at)
		to := bal.next()
		in.clock.set(at)
		d, err := in.lims[to].Allow(ctx, "shared")
		if err != nil {
			return k, err
		}
		if d.Allowed {
			admitted(at, to)
		}
	}
}

// syncUntil runs the syncs due by at, in order: at the same instant as a
// request, the sync comes first.
func (in *instances) syncUntil(at time.Duration) {
	for {
		i := 0
		for j := range in.syncAt {
			if in.syncAt[j] < in.syncAt[i] {
				i = j
			}
		}
		if in.syncAt[i] > at {
			return
		}
		in.clock.set(in.syncAt[i])
		in.engines[i].Flush()
		in.syncAt[i] += in.period
	}
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

// WriteCSV writes the requests admitted per window, mode by mode. The
// header is `t_ms,mode,sync_period_ms,admitted,bound`. A row is a window's
// start in milliseconds, the mode, T in milliseconds (empty for exact),
// the requests admitted in the window and the most it may admit.
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
func (r *SharedResult) WriteJSON(w io.Writer) error { return writeJSON(w, r.Summaries()) }

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
