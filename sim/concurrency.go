package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// ConcurrencyConfig is a concurrency limit under a workload: requests for
// one key arrive at Rate per second for Span, each in flight for Hold
// (exponentially distributed around Hold when Jitter, from Seed), against
// Max slots. Little's law says about Rate × Hold are in flight when nothing
// is refused.
type ConcurrencyConfig struct {
	Max    int
	Rate   float64
	Hold   time.Duration
	Span   time.Duration
	Jitter bool
	Seed   uint64
	// Step is the width of a sample; zero means Span/40.
	Step time.Duration
}

// ConcurrencySample is one step of a concurrency simulation: the most in
// flight during it, and the requests admitted and refused in it.
type ConcurrencySample struct {
	At                time.Duration
	Peak              int
	Admitted, Refused int
}

// ConcurrencyResult is what RunConcurrency saw.
type ConcurrencyResult struct {
	Config            ConcurrencyConfig
	Samples           []ConcurrencySample
	Admitted, Refused int
	Peak              int // the most in flight at once, at most Max
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
// ends; nothing sleeps.
func RunConcurrency(c ConcurrencyConfig) (ConcurrencyResult, error) {
	if c.Max <= 0 || c.Rate <= 0 || c.Hold <= 0 || c.Span <= 0 {
		return ConcurrencyResult{}, errors.New("sim: concurrency needs a positive max, rate, hold and span")
	}
	step := c.Step
	if step <= 0 {
		step = max(c.Span/40, time.Millisecond)
	}
	store := memstore.New(memstore.WithJanitorInterval(0))
	defer store.Close()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(c.Seed, 0x5eed))
	gap := time.Duration(float64(time.Second) / c.Rate)
	res := ConcurrencyResult{Config: c, Samples: make([]ConcurrencySample, (c.Span+step-1)/step)}
	for i := range res.Samples {
		res.Samples[i].At = time.Duration(i) * step
	}
	// A TTL far beyond the simulation: slots end by release, as with a
	// live instance that refreshes them.
	ttl := c.Span + 100*c.Hold + time.Hour
	var running ends
	inFlight, n := 0, 0
	for t := time.Duration(0); t < c.Span; t += gap {
		for len(running) > 0 && running[0].at <= t {
			e := heap.Pop(&running).(endAt)
			req := ratekeeper.SlotRequest{Key: "k", ID: e.id, Now: epoch.Add(e.at)}
			if err := store.ReleaseSlot(ctx, req, ratekeeper.Decision{Allowed: true}); err != nil {
				return res, err
			}
			inFlight--
		}
		n++
		id := fmt.Sprint(n)
		d, err := store.AcquireSlot(ctx, ratekeeper.SlotRequest{Key: "k", ID: id, Max: c.Max, TTL: ttl, Now: epoch.Add(t)})
		if err != nil {
			return res, err
		}
		s := &res.Samples[t/step]
		if !d.Allowed {
			s.Refused++
			res.Refused++
		} else {
			s.Admitted++
			res.Admitted++
			inFlight++
			hold := c.Hold
			if c.Jitter {
				hold = time.Duration(rng.ExpFloat64() * float64(c.Hold))
			}
			heap.Push(&running, endAt{t + hold, id})
		}
		s.Peak = max(s.Peak, inFlight)
		res.Peak = max(res.Peak, inFlight)
	}
	return res, nil
}

// epoch is the virtual clock's start.
var epoch = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// WriteText writes r as a table of steps with a bar of the peak in flight
// against the limit ('|' marks Max).
func (r ConcurrencyResult) WriteText(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "concurrency: max %d, %g requests/s each held %v%s, for %v (Little: %.1f in flight unlimited)\n",
		c.Max, c.Rate, c.Hold, map[bool]string{true: " (exponential)", false: ""}[c.Jitter], c.Span, c.Rate*c.Hold.Seconds())
	fmt.Fprintf(w, "admitted %d, refused %d, peak in flight %d\n\n", r.Admitted, r.Refused, r.Peak)
	width := 40
	scale := float64(width) / float64(c.Max)
	for _, s := range r.Samples {
		bar := []byte(strings.Repeat(" ", width+1))
		for i := range min(int(float64(s.Peak)*scale+0.5), width) {
			bar[i] = '#'
		}
		bar[width] = '|'
		if _, err := fmt.Fprintf(w, "%8v %s %3d in flight  +%d -%d\n", s.At, bar, s.Peak, s.Admitted, s.Refused); err != nil {
			return err
		}
	}
	return nil
}
