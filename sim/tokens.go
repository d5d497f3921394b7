package sim

import (
	"bufio"
	"container/heap"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/rules"
	"github.com/ratekeeper/ratekeeper/sim/chart"
)

// The tokens kind's workload: a burst of long requests at once, then one
// every tokensEvery, each streaming for tokensHoldMin..tokensHoldMax and
// costing tokensCostMin..tokensCostMax, known only when it ends.
const (
	tokensBurst   = 20
	tokensEvery   = 3 * time.Second
	tokensCostMin = 500
	tokensCostMax = 2000
	tokensHoldMin = 5 * time.Second
	tokensHoldMax = 20 * time.Second
	tokensHeader  = "X-Tokens"
)

// Modes of the tokens kind: how the rule's cost is written.
const (
	// TokensAfterResponse is `cost: {response_header: X-Tokens, max: 2000}`:
	// admission takes 1 and the response's end charges the rest as debt.
	TokensAfterResponse = "after-response"
	// TokensReserve adds `reserve: 2000`: admission takes the most a
	// response may cost, and its end gives back what it did not.
	TokensReserve = "reserve"
)

// tokensModes are the runs of the tokens kind, in order, with the reserve
// each one's rule writes.
var tokensModes = []struct {
	name    string
	reserve int
}{{TokensAfterResponse, 0}, {TokensReserve, tokensCostMax}}

// validateTokens is Validate for the tokens kind.
func (c Config) validateTokens() error {
	l := c.limit(ratekeeper.TokenBucket)
	if err := l.Validate(); err != nil {
		return err
	}
	if l.Capacity() < tokensCostMax {
		return fmt.Errorf("burst: %d is less than the %d a response may cost", l.Capacity(), tokensCostMax)
	}
	if c.Tick <= 0 || c.Period%c.Tick != 0 {
		return fmt.Errorf("tick: %v must divide the period %v", c.Tick, c.Period)
	}
	if c.Duration < c.Period || c.Duration%c.Tick != 0 {
		return fmt.Errorf("duration: %v must be a whole number of ticks (%v), at least the period %v", c.Duration, c.Tick, c.Period)
	}
	if n := c.Duration / c.Tick; n > maxTicks {
		return fmt.Errorf("duration: %v makes %d ticks; at most %d", c.Duration, n, maxTicks)
	}
	return nil
}

// tokensString is String for the tokens kind.
func (c Config) tokensString() string {
	return fmt.Sprintf("a token bucket of %s tokens per %s (burst %s); %d long requests at once, then one every %v",
		chart.Thousands(c.Rate), periodUnit(c.Period), chart.Thousands(c.limit(ratekeeper.TokenBucket).Capacity()), tokensBurst, tokensEvery)
}

// tokensWorkloadString describes the requests' holds and costs.
func tokensWorkloadString() string {
	return fmt.Sprintf("each streams %v–%v and costs %s–%s tokens, known at its end",
		tokensHoldMin, tokensHoldMax, chart.Thousands(tokensCostMin), chart.Thousands(tokensCostMax))
}

// TokensSample is one tick of one mode of a tokens simulation: the tokens
// charged by the responses that ended in it, the tokens charged in the
// period that ends with it, and the requests admitted and refused in it.
type TokensSample struct {
	At                time.Duration
	Tokens, Window    int
	Admitted, Refused int
}

// TokensOutcome is one mode's run.
type TokensOutcome struct {
	Samples []TokensSample
	Summary TokensSummary
}

// TokensSummary sums up one mode of a tokens simulation. Its JSON form is
// part of the command line's contract.
type TokensSummary struct {
	Mode     string `json:"mode"`
	Reserve  int    `json:"reserve"`
	Offered  int    `json:"offered"`
	Admitted int    `json:"admitted"`
	Refused  int    `json:"refused"`
	// Tokens are those the responses that ended within Duration charged.
	Tokens int `json:"tokens"`
	// PeakWindow is the most tokens charged in one period (a sliding
	// window, ending at a tick's end), and PeakAtSeconds where it ends.
	PeakWindow    int     `json:"peak_window"`
	PeakAtSeconds float64 `json:"peak_at_seconds"`
	// Limit is the rate per period; OverLimit is PeakWindow above it (or
	// 0), and OverLimitPct that as a share of Limit.
	Limit        int     `json:"limit"`
	OverLimit    int     `json:"over_limit"`
	OverLimitPct float64 `json:"over_limit_pct"`
}

// TokensResult is what Run measured of the tokens kind: one outcome per
// mode, on the same requests.
type TokensResult struct {
	Config   Config
	Outcomes []TokensOutcome
	figure
}

// tokensRequest is one request of the workload.
type tokensRequest struct {
	at, hold time.Duration
	cost     int
}

// tokensWorkload is the requests c offers, from its seed: the same for
// every mode.
func tokensWorkload(c Config) []tokensRequest {
	rng := rand.New(rand.NewPCG(c.Seed, 0x70c5))
	var reqs []tokensRequest
	for i := 0; ; i++ {
		at := time.Duration(max(0, i-tokensBurst+1)) * tokensEvery
		if at >= c.Duration {
			return reqs
		}
		hold := tokensHoldMin + time.Duration(rng.Int64N(int64((tokensHoldMax-tokensHoldMin)/time.Millisecond)+1))*time.Millisecond
		reqs = append(reqs, tokensRequest{at: at, hold: hold, cost: tokensCostMin + rng.IntN(tokensCostMax-tokensCostMin+1)})
	}
}

// runTokens runs c's workload once per mode.
func runTokens(ctx context.Context, c Config) (*TokensResult, error) {
	reqs := tokensWorkload(c)
	res := &TokensResult{Config: c}
	for _, m := range tokensModes {
		o, err := runTokensMode(ctx, c, reqs, m.name, m.reserve)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		res.Outcomes = append(res.Outcomes, o)
	}
	res.figure = newFigure(c.Name, res.chartHeight(), res.draw, res.WriteCSV)
	return res, nil
}

// tokensRun is one mode's run in progress: the requests in flight, and
// what each took at admission.
type tokensRun struct {
	c       Config
	store   *memstore.Store
	clock   *virtualClock
	cost    *rules.Cost
	limit   ratekeeper.Limit
	reqs    []tokensRequest
	taken   []ratekeeper.Request
	decs    []ratekeeper.Decision
	running ends
	o       *TokensOutcome
}

// runTokensMode runs reqs on a memory store on a virtual clock. It makes
// the store calls httplimit makes for a rule whose cost is read from the
// response. At admission it takes what Cost.Request says: 1, or the
// reserve. At the response's end it refunds what was taken beyond the
// cost, or takes the rest with Reserve (debt).
func runTokensMode(ctx context.Context, c Config, reqs []tokensRequest, mode string, reserve int) (TokensOutcome, error) {
	clock := &virtualClock{base: epoch}
	store := memstore.New(memstore.WithClock(clock), memstore.WithJanitorInterval(0))
	defer store.Close()
	o := TokensOutcome{Samples: make([]TokensSample, c.Duration/c.Tick)}
	for i := range o.Samples {
		o.Samples[i].At = time.Duration(i) * c.Tick
	}
	r := &tokensRun{c: c, store: store, clock: clock, limit: c.limit(ratekeeper.TokenBucket), reqs: reqs,
		taken: make([]ratekeeper.Request, len(reqs)), decs: make([]ratekeeper.Decision, len(reqs)), o: &o,
		cost: &rules.Cost{Response: tokensHeader, Max: tokensCostMax, Default: tokensCostMax, Reserve: reserve}}
	for i, q := range reqs {
		if err := r.settle(ctx, q.at); err != nil {
			return o, err
		}
		if err := r.admit(ctx, i); err != nil {
			return o, err
		}
	}
	if err := r.settle(ctx, c.Duration); err != nil {
		return o, err
	}
	o.Summary = r.sum(mode, reserve)
	return o, nil
}

// admit offers request i at its arrival.
func (r *tokensRun) admit(ctx context.Context, i int) error {
	q := r.reqs[i]
	r.clock.set(q.at)
	n, err := r.cost.Request(nil)
	if err != nil {
		return err
	}
	req := ratekeeper.Request{Key: "k", Limit: r.limit, N: n}
	d, err := r.store.Take(ctx, req)
	if err != nil {
		return err
	}
	x := &r.o.Samples[q.at/r.c.Tick]
	if !d.Allowed {
		x.Refused++
		return nil
	}
	x.Admitted++
	r.taken[i], r.decs[i] = req, d
	heap.Push(&r.running, endAt{q.at + q.hold, strconv.Itoa(i)})
	return nil
}

// settle ends the responses that end before t: each charges its cost,
// read from its header as httplimit reads it, as chargeCost does.
func (r *tokensRun) settle(ctx context.Context, t time.Duration) error {
	for len(r.running) > 0 && r.running[0].at < t {
		e := heap.Pop(&r.running).(endAt)
		i, _ := strconv.Atoi(e.id)
		r.clock.set(e.at)
		n, _ := r.cost.FromResponse(http.Header{tokensHeader: {strconv.Itoa(r.reqs[i].cost)}})
		req := r.taken[i]
		var err error
		switch taken := req.N; {
		case n < taken:
			req.N = taken - n
			err = r.store.Refund(ctx, req, r.decs[i])
		case n > taken:
			req.N, req.Reserve = n-taken, true
			_, err = r.store.Take(ctx, req)
		}
		if err != nil {
			return err
		}
		r.o.Samples[e.at/r.c.Tick].Tokens += n
	}
	return nil
}

// sum fills in the sliding windows and the summary.
func (r *tokensRun) sum(mode string, reserve int) TokensSummary {
	s := TokensSummary{Mode: mode, Reserve: reserve, Offered: len(r.reqs), Limit: r.c.Rate}
	per := int(r.c.Period / r.c.Tick)
	window := 0
	for i := range r.o.Samples {
		x := &r.o.Samples[i]
		window += x.Tokens
		if i >= per {
			window -= r.o.Samples[i-per].Tokens
		}
		x.Window = window
		s.Admitted += x.Admitted
		s.Refused += x.Refused
		s.Tokens += x.Tokens
		if window > s.PeakWindow {
			s.PeakWindow, s.PeakAtSeconds = window, (x.At + r.c.Tick).Seconds()
		}
	}
	s.OverLimit = max(0, s.PeakWindow-s.Limit)
	s.OverLimitPct = round(100*float64(s.OverLimit)/float64(s.Limit), 1)
	return s
}

// Summaries are the modes' summaries, in order.
func (r *TokensResult) Summaries() []TokensSummary {
	out := make([]TokensSummary, len(r.Outcomes))
	for i, o := range r.Outcomes {
		out[i] = o.Summary
	}
	return out
}

// WriteCSV writes the samples: a header
// `t_ms,mode,tokens,window_tokens,admitted,refused,limit`, then one row
// per mode and tick. A row has the tick's start in milliseconds and the
// tokens the responses that ended in it charged. Then come those charged
// in the period ending with it, the requests admitted and refused in it,
// and the rate per period.
func (r *TokensResult) WriteCSV(w io.Writer) error {
	b := bufio.NewWriter(w)
	b.WriteString("t_ms,mode,tokens,window_tokens,admitted,refused,limit\n")
	for _, o := range r.Outcomes {
		for _, x := range o.Samples {
			fmt.Fprintf(b, "%d,%s,%d,%d,%d,%d,%d\n", x.At.Milliseconds(), o.Summary.Mode, x.Tokens, x.Window,
				x.Admitted, x.Refused, r.Config.Rate)
		}
	}
	return b.Flush()
}

// WriteJSON writes the summaries as a JSON array, one object per mode.
func (r *TokensResult) WriteJSON(w io.Writer) error { return writeJSON(w, r.Summaries()) }

// WriteTable writes the summaries as the table people read in a terminal.
func (r *TokensResult) WriteTable(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "%s: %s; %s; for %v, refused requests not retried\n\n", c.Name, c, tokensWorkloadString(), c.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "mode\treserve\toffered\tadmitted\trefused\ttokens\tpeak per %s\tends at (s)\tover the limit\tover %%\t\n", periodUnit(c.Period))
	for _, s := range r.Summaries() {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%.1f\t\n", s.Mode, s.Reserve, s.Offered, s.Admitted, s.Refused,
			s.Tokens, s.PeakWindow, trimFloat(s.PeakAtSeconds), s.OverLimit, s.OverLimitPct)
	}
	return tw.Flush()
}
