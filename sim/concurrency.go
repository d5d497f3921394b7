package sim

import (
	"bufio"
	"container/heap"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/sim/chart"
)

// offered is the requests offered per second: Load × Max/Hold.
func (c Config) offered() float64 {
	return c.Load * c.capacity()
}

// capacity is the requests per second Max slots each held Hold serve.
func (c Config) capacity() float64 {
	return float64(c.Max) / c.Hold.Seconds()
}

// arrival is the instant request n (from 0) arrives. Requests come evenly,
// each instant computed afresh and rounded to the nanosecond. So errors do
// not add up: 1.1 × 50/s offers 550 in 10 s, not 551.
func (c Config) arrival(n int) time.Duration {
	return time.Duration(math.Round(float64(n) * float64(time.Second) / c.offered()))
}

// validateConcurrency is Validate for the concurrency kind.
func (c Config) validateConcurrency() error {
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
	if n := c.Duration.Seconds() * c.offered(); n > maxItems {
		return fmt.Errorf("load: %.0f requests in %v; at most %d", n, c.Duration, maxItems)
	}
	return nil
}

// concurrencyString is String for the concurrency kind.
func (c Config) concurrencyString() string {
	hold := "hold " + c.Hold.String()
	if c.Jitter {
		hold += " (exponential)"
	}
	return fmt.Sprintf("max %s, %s, %s/s offered: %s× what the slots serve",
		chart.Thousands(c.Max), hold, trimFloat(round(c.offered(), 1)), trimFloat(c.Load))
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

// ConcurrencyResult is what Run measured of a concurrency limit.
type ConcurrencyResult struct {
	Config  Config
	Samples []ConcurrencySample
	Summary ConcurrencySummary
	figure
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

// runConcurrency runs c on the memory store's slots on a virtual clock
// (every call gives its instant), releasing each admitted request when it
// ends; nothing sleeps.
func runConcurrency(ctx context.Context, c Config) (*ConcurrencyResult, error) {
	store := memstore.New(memstore.WithJanitorInterval(0))
	defer store.Close()
	res := &ConcurrencyResult{Config: c, Samples: make([]ConcurrencySample, (c.Duration+c.Tick-1)/c.Tick)}
	for i := range res.Samples {
		res.Samples[i].At = time.Duration(i) * c.Tick
	}
	sl := &slots{c: c, store: store, samples: res.Samples, area: make([]float64, len(res.Samples)),
		rng: rand.New(rand.NewPCG(c.Seed, 0x5eed)), s: &res.Summary}
	if err := sl.offer(ctx); err != nil {
		return nil, err
	}
	sl.sum()
	res.figure = newFigure(c.Name, res.chartHeight(), res.draw, res.WriteCSV)
	return res, nil
}

// slots runs a concurrency workload on a store's slots, tick by tick.
type slots struct {
	c       Config
	store   *memstore.Store
	samples []ConcurrencySample
	area    []float64 // per tick: in flight × seconds
	rng     *rand.Rand
	s       *ConcurrencySummary

	running  ends
	inFlight int
	last     time.Duration // what is in flight is summed up to here
	held     time.Duration // the admitted requests' holds
}

// offer offers every request of the workload: each acquires a slot, or is
// refused, and releases it when its hold ends.
func (sl *slots) offer(ctx context.Context) error {
	c, s := sl.c, sl.s
	// A TTL far beyond the simulation: slots end by release, as with a
	// live instance that refreshes them.
	ttl := c.Duration + 100*c.Hold + time.Hour
	for ; ; s.Offered++ {
		t := c.arrival(s.Offered)
		if t >= c.Duration {
			break
		}
		if err := sl.release(ctx, t, true); err != nil {
			return err
		}
		sl.advance(t)
		id := strconv.Itoa(s.Offered)
		d, err := sl.store.AcquireSlot(ctx, ratekeeper.SlotRequest{Key: "k", ID: id, Max: c.Max, TTL: ttl, Now: epoch.Add(t)})
		if err != nil {
			return err
		}
		sl.record(t, id, d.Allowed)
	}
	if err := sl.release(ctx, c.Duration, false); err != nil {
		return err
	}
	sl.advance(c.Duration)
	return nil
}

// record counts request id, offered at t, as admitted or refused; an
// admitted one is in flight until its hold ends.
func (sl *slots) record(t time.Duration, id string, admitted bool) {
	x := &sl.samples[t/sl.c.Tick]
	if !admitted {
		x.Refused++
		sl.s.Refused++
		return
	}
	x.Admitted++
	sl.s.Admitted++
	sl.inFlight++
	hold := sl.c.Hold
	if sl.c.Jitter {
		hold = time.Duration(sl.rng.ExpFloat64() * float64(sl.c.Hold))
	}
	sl.held += hold
	heap.Push(&sl.running, endAt{t + hold, id})
	x.Peak = max(x.Peak, sl.inFlight)
}

// advance sums what is in flight up to t, tick by tick.
func (sl *slots) advance(t time.Duration) {
	for sl.last < t {
		i := sl.last / sl.c.Tick
		end := min(t, (i+1)*sl.c.Tick)
		sl.samples[i].Peak = max(sl.samples[i].Peak, sl.inFlight)
		sl.area[i] += float64(sl.inFlight) * (end - sl.last).Seconds()
		sl.last = end
	}
}

// release ends the requests that end by t (before t unless at).
func (sl *slots) release(ctx context.Context, t time.Duration, at bool) error {
	for len(sl.running) > 0 && (sl.running[0].at < t || at && sl.running[0].at == t) {
		e := heap.Pop(&sl.running).(endAt)
		sl.advance(e.at)
		req := ratekeeper.SlotRequest{Key: "k", ID: e.id, Now: epoch.Add(e.at)}
		if err := sl.store.ReleaseSlot(ctx, req, ratekeeper.Decision{Allowed: true}); err != nil {
			return err
		}
		sl.inFlight--
	}
	return nil
}

// sum fills in the samples' means and the summary.
func (sl *slots) sum() {
	c, s := sl.c, sl.s
	secs := c.Duration.Seconds()
	var total float64
	for i := range sl.samples {
		x := &sl.samples[i]
		width := min(c.Tick, c.Duration-x.At).Seconds()
		x.Mean = round(sl.area[i]/width, 3)
		total += sl.area[i]
		s.PeakInFlight = max(s.PeakInFlight, x.Peak)
	}
	s.Max = c.Max
	s.RefusedPct = round(pct(s.Refused, s.Offered), 2)
	s.MeanInFlight = round(total/secs, 3)
	s.OfferedPerSecond = round(float64(s.Offered)/secs, 3)
	s.AdmittedPerSecond = round(float64(s.Admitted)/secs, 3)
	s.CapacityPerSecond = round(c.capacity(), 3)
	if s.Admitted > 0 {
		s.MeanHoldSeconds = round(sl.held.Seconds()/float64(s.Admitted), 6)
	}
	s.LittleInFlight = round(sl.held.Seconds()/secs, 3) // admitted/s × mean hold
	s.UnlimitedInFlight = round(float64(s.Offered)/secs*c.Hold.Seconds(), 3)
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
func (r *ConcurrencyResult) WriteJSON(w io.Writer) error { return writeJSON(w, r.Summary) }

// WriteTable writes the summary table people read in a terminal, with
// Little's law for what was offered and for what was admitted.
func (r *ConcurrencyResult) WriteTable(w io.Writer) error {
	c, s := r.Config, r.Summary
	fmt.Fprintf(w, "%s: %s (%s/s), for %v; counted per %v\n", c.Name, c, trimFloat(round(c.capacity(), 1)), c.Duration, c.Tick)
	fmt.Fprintf(w, "Little's law, L = λW: without the limit %s/s × %v = %s would be in flight; admitted %s/s × %ss held = %s\n\n",
		trimFloat(s.OfferedPerSecond), c.Hold, trimFloat(round(s.UnlimitedInFlight, 1)),
		trimFloat(round(s.AdmittedPerSecond, 1)), strconv.FormatFloat(round(s.MeanHoldSeconds, 3), 'f', -1, 64), trimFloat(round(s.LittleInFlight, 1)))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "max\toffered\tadmitted\trefused\trefused %%\tpeak in flight\tmean in flight\tLittle λW\twithout limit\t\n")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%.2f\t%d\t%.2f\t%.2f\t%.2f\t\n", s.Max, s.Offered, s.Admitted, s.Refused, s.RefusedPct,
		s.PeakInFlight, s.MeanInFlight, s.LittleInFlight, s.UnlimitedInFlight)
	return tw.Flush()
}
