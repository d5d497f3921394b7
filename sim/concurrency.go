package sim

import (
	"bufio"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// ConcurrencyConfig is a concurrency limit under a workload: requests for
// one key arrive evenly for Duration, each in flight for Hold (drawn from an
// exponential distribution of mean Hold, from Seed, when Jitter), against
// Max slots. Max slots each held Hold serve Max/Hold requests per second:
// Load is the requests offered as a multiple of that. By Little's law
// (L = λW), Load × Max would be in flight without the limit.
// ConcurrencyScenario returns the named ones.
type ConcurrencyConfig struct {
	// Name names the output files (NAME.csv, NAME.svg, NAME.png) and titles
	// the chart.
	Name string
	// Max is how many requests may be in flight at once.
	Max int
	// Load is the requests offered, as a multiple of Max/Hold per second.
	Load float64
	// Hold is how long an admitted request stays in flight: every one of
	// them, or their mean when Jitter.
	Hold   time.Duration
	Jitter bool
	Seed   uint64
	// Duration is how long requests arrive.
	Duration time.Duration
	// Tick is the width of a sample and of a bar of the chart.
	Tick time.Duration
}

// ConcurrencyScenarios lists the named scenarios ConcurrencyScenario
// knows.
var ConcurrencyScenarios = []string{"concurrency"}

// ConcurrencyScenario returns the named concurrency scenario, changed by
// set if not nil. There is one, concurrency: 10 slots, requests held 100 ms
// on average (exponentially distributed, seed 1), offered at 1.5 times the
// 100 per second the slots serve, for 10 s, counted per 250 ms. Without the
// limit 15 would be in flight; with it, about a third are refused.
func ConcurrencyScenario(name string, set func(*ConcurrencyConfig)) (ConcurrencyConfig, error) {
	if name != "concurrency" {
		return ConcurrencyConfig{}, fmt.Errorf("unknown concurrency scenario %q (%s)", name, strings.Join(ConcurrencyScenarios, ", "))
	}
	c := ConcurrencyConfig{
		Name:     name,
		Max:      10,
		Load:     1.5,
		Hold:     100 * time.Millisecond,
		Jitter:   true,
		Seed:     1,
		Duration: 10 * time.Second,
		Tick:     250 * time.Millisecond,
	}
	if set != nil {
		set(&c)
	}
	return c, nil
}

// Rate is the requests offered per second: Load × Max/Hold.
func (c ConcurrencyConfig) Rate() float64 {
	return c.Load * c.Capacity()
}

// Capacity is the requests per second Max slots each held Hold serve.
func (c ConcurrencyConfig) Capacity() float64 {
	return float64(c.Max) / c.Hold.Seconds()
}

// arrival is the instant request n (from 0) arrives: requests come evenly,
// each instant computed afresh and rounded to the nanosecond, so that
// errors do not add up and a rate such as 1.1 × 50/s offers 550 in 10 s,
// not 551.
func (c ConcurrencyConfig) arrival(n int) time.Duration {
	return time.Duration(math.Round(float64(n) * float64(time.Second) / c.Rate()))
}

// Validate reports what is wrong with c, naming the field, or nil.
func (c ConcurrencyConfig) Validate() error {
	if c.Name == "" {
		return errors.New("name is missing")
	}
	if strings.ContainsAny(c.Name, `/\`) {
		return fmt.Errorf("name %q must not contain a path separator", c.Name)
	}
	if err := (ratekeeper.Concurrency{Max: c.Max}).Validate(); err != nil {
		return err
	}
	if c.Max > maxClients {
		return fmt.Errorf("max: at most %d, not %d", maxClients, c.Max)
	}
	if c.Hold <= 0 || c.Hold%time.Microsecond != 0 {
		return fmt.Errorf("hold: must be a positive whole number of microseconds, not %v", c.Hold)
	}
	if !(c.Load > 0) || math.IsInf(c.Load, 0) {
		return fmt.Errorf("load: must be positive, not %v", c.Load)
	}
	if c.Duration <= 0 {
		return fmt.Errorf("duration: must be positive, not %v", c.Duration)
	}
	if c.Tick <= 0 || c.Tick%time.Microsecond != 0 {
		return fmt.Errorf("tick: must be a positive whole number of microseconds, not %v", c.Tick)
	}
	if n := (c.Duration + c.Tick - 1) / c.Tick; n > maxTicks {
		return fmt.Errorf("tick: %v makes %d bars over %v; at most %d", c.Tick, n, c.Duration, maxTicks)
	}
	if n := c.Duration.Seconds() * c.Rate(); n > maxItems {
		return fmt.Errorf("load: %.0f requests in %v; at most %d", n, c.Duration, maxItems)
	}
	return nil
}

// String describes c in one line, for the table and the chart's title.
func (c ConcurrencyConfig) String() string {
	hold := "hold " + c.Hold.String()
	if c.Jitter {
		hold += " (exponential)"
	}
	return fmt.Sprintf("max %s, %s, %s/s offered: %s× what the slots serve",
		thousands(c.Max), hold, trimFloat(round(c.Rate(), 1)), trimFloat(c.Load))
}

// ConcurrencySample is one tick of a concurrency simulation: the most and
// the mean in flight during it, and the requests admitted and refused in
// it.
type ConcurrencySample struct {
	At                time.Duration
	Peak              int
	Mean              float64
	Admitted, Refused int
}

// ConcurrencyResult is what RunConcurrency measured.
type ConcurrencyResult struct {
	Config  ConcurrencyConfig
	Samples []ConcurrencySample
	Summary ConcurrencySummary
}

// ConcurrencySummary sums up a ConcurrencyResult. Its JSON form is part of
// the command line's contract.
type ConcurrencySummary struct {
	Max      int `json:"max"`
	Offered  int `json:"offered"`
	Admitted int `json:"admitted"`
	Refused  int `json:"refused"`
	// RefusedPct is Refused as a share of Offered.
	RefusedPct float64 `json:"refused_pct"`
	// PeakInFlight is the most in flight at once: never more than Max.
	PeakInFlight int `json:"peak_in_flight"`
	// MeanInFlight is the time average of what was in flight over
	// Duration.
	MeanInFlight float64 `json:"mean_in_flight"`
	// OfferedPerSecond, AdmittedPerSecond and CapacityPerSecond (Max/Hold)
	// are rates over Duration.
	OfferedPerSecond  float64 `json:"offered_per_second"`
	AdmittedPerSecond float64 `json:"admitted_per_second"`
	CapacityPerSecond float64 `json:"capacity_per_second"`
	// MeanHoldSeconds is the mean of the admitted requests' holds.
	MeanHoldSeconds float64 `json:"mean_hold_seconds"`
	// LittleInFlight is Little's law's L = λW for what was admitted:
	// AdmittedPerSecond × MeanHoldSeconds, which MeanInFlight is close to
	// (it misses what was still in flight at the end).
	LittleInFlight float64 `json:"little_in_flight"`
	// UnlimitedInFlight is L for what was offered, OfferedPerSecond × Hold:
	// what would be in flight without the limit.
	UnlimitedInFlight float64 `json:"unlimited_in_flight"`
}

// ends is a min-heap of the instants at which admitted requests end.
type ends []endAt

type endAt struct {
	at time.Duration
	id string
}

func (h ends) Len() int           { return len(h) }
func (h ends) Less(i, j int) bool { return h[i].at < h[j].at }
func (h ends) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *ends) Push(x any)        { *h = append(*h, x.(endAt)) }
func (h *ends) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// RunConcurrency runs c on the memory store's slots on a virtual clock
// (every call gives its instant), releasing each admitted request when it
// ends; nothing sleeps. It returns an error for a bad ConcurrencyConfig; a
// refused request is not an error.
func RunConcurrency(ctx context.Context, c ConcurrencyConfig) (*ConcurrencyResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	store := memstore.New(memstore.WithJanitorInterval(0))
	defer store.Close()
	rng := rand.New(rand.NewPCG(c.Seed, 0x5eed))
	res := &ConcurrencyResult{Config: c, Samples: make([]ConcurrencySample, (c.Duration+c.Tick-1)/c.Tick)}
	for i := range res.Samples {
		res.Samples[i].At = time.Duration(i) * c.Tick
	}
	// A TTL far beyond the simulation: slots end by release, as with a
	// live instance that refreshes them.
	ttl := c.Duration + 100*c.Hold + time.Hour
	var (
		running  ends
		inFlight int
		last     time.Duration // what was in flight is summed up to here
		area     = make([]float64, len(res.Samples))
		held     time.Duration
		s        = &res.Summary
	)
	// advance sums what is in flight up to t, tick by tick.
	advance := func(t time.Duration) {
		for last < t {
			i := last / c.Tick
			end := min(t, (i+1)*c.Tick)
			res.Samples[i].Peak = max(res.Samples[i].Peak, inFlight)
			area[i] += float64(inFlight) * (end - last).Seconds()
			last = end
		}
	}
	// release ends the requests that end by t (before t unless at).
	release := func(t time.Duration, at bool) error {
		for len(running) > 0 && (running[0].at < t || at && running[0].at == t) {
			e := heap.Pop(&running).(endAt)
			advance(e.at)
			req := ratekeeper.SlotRequest{Key: "k", ID: e.id, Now: epoch.Add(e.at)}
			if err := store.ReleaseSlot(ctx, req, ratekeeper.Decision{Allowed: true}); err != nil {
				return err
			}
			inFlight--
		}
		return nil
	}
	for ; ; s.Offered++ {
		t := c.arrival(s.Offered)
		if t >= c.Duration {
			break
		}
		if err := release(t, true); err != nil {
			return nil, err
		}
		advance(t)
		id := strconv.Itoa(s.Offered)
		d, err := store.AcquireSlot(ctx, ratekeeper.SlotRequest{Key: "k", ID: id, Max: c.Max, TTL: ttl, Now: epoch.Add(t)})
		if err != nil {
			return nil, err
		}
		x := &res.Samples[t/c.Tick]
		if !d.Allowed {
			x.Refused++
			s.Refused++
			continue
		}
		x.Admitted++
		s.Admitted++
		inFlight++
		hold := c.Hold
		if c.Jitter {
			hold = time.Duration(rng.ExpFloat64() * float64(c.Hold))
		}
		held += hold
		heap.Push(&running, endAt{t + hold, id})
		x.Peak = max(x.Peak, inFlight)
	}
	if err := release(c.Duration, false); err != nil {
		return nil, err
	}
	advance(c.Duration)

	secs := c.Duration.Seconds()
	var total float64
	for i := range res.Samples {
		x := &res.Samples[i]
		width := min(c.Tick, c.Duration-x.At).Seconds()
		x.Mean = round(area[i]/width, 3)
		total += area[i]
		s.PeakInFlight = max(s.PeakInFlight, x.Peak)
	}
	s.Max = c.Max
	s.RefusedPct = round(pct(s.Refused, s.Offered), 2)
	s.MeanInFlight = round(total/secs, 3)
	s.OfferedPerSecond = round(float64(s.Offered)/secs, 3)
	s.AdmittedPerSecond = round(float64(s.Admitted)/secs, 3)
	s.CapacityPerSecond = round(c.Capacity(), 3)
	if s.Admitted > 0 {
		s.MeanHoldSeconds = round(held.Seconds()/float64(s.Admitted), 6)
	}
	s.LittleInFlight = round(held.Seconds()/secs, 3) // admitted/s × mean hold
	s.UnlimitedInFlight = round(float64(s.Offered)/secs*c.Hold.Seconds(), 3)
	return res, nil
}

// epoch is the virtual clock's start.
var epoch = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// WriteCSV writes the samples: a header
// `t_ms,peak_in_flight,mean_in_flight,admitted,refused,max`, then one row
// per tick (its start in milliseconds, the most and the mean in flight
// during it, the requests admitted and refused in it, and Max).
func (r *ConcurrencyResult) WriteCSV(w io.Writer) error {
	b := bufio.NewWriter(w)
	b.WriteString("t_ms,peak_in_flight,mean_in_flight,admitted,refused,max\n")
	for _, x := range r.Samples {
		ms := float64(x.At) / float64(time.Millisecond)
		fmt.Fprintf(b, "%s,%d,%s,%d,%d,%d\n", strconv.FormatFloat(ms, 'f', -1, 64), x.Peak,
			strconv.FormatFloat(x.Mean, 'f', -1, 64), x.Admitted, x.Refused, r.Config.Max)
	}
	return b.Flush()
}

// WriteJSON writes the summary as one JSON object.
func (r *ConcurrencyResult) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.Summary)
}

// WriteTable writes the summary table people read in a terminal, with
// Little's law for what was offered and for what was admitted.
func (r *ConcurrencyResult) WriteTable(w io.Writer) error {
	c, s := r.Config, r.Summary
	fmt.Fprintf(w, "%s: %s (%s/s), for %v; counted per %v\n", c.Name, c, trimFloat(round(c.Capacity(), 1)), c.Duration, c.Tick)
	fmt.Fprintf(w, "Little's law, L = λW: without the limit %s/s × %v = %s would be in flight; admitted %s/s × %ss held = %s\n\n",
		trimFloat(s.OfferedPerSecond), c.Hold, trimFloat(round(s.UnlimitedInFlight, 1)),
		trimFloat(round(s.AdmittedPerSecond, 1)), strconv.FormatFloat(round(s.MeanHoldSeconds, 3), 'f', -1, 64), trimFloat(round(s.LittleInFlight, 1)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "max\toffered\tadmitted\trefused\trefused %%\tpeak in flight\tmean in flight\tLittle λW\twithout limit\t\n")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.2f\t%d\t%.2f\t%.2f\t%.2f\t\n", s.Max, s.Offered, s.Admitted, s.Refused, s.RefusedPct,
		s.PeakInFlight, s.MeanInFlight, s.LittleInFlight, s.UnlimitedInFlight)
	return tw.Flush()
}
