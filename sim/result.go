package sim

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// Result is what Run measured of the workers and traffic kinds: one
// Outcome per algorithm, in the Config's order.
type Result struct {
	Config   Config
	Ticks    int // bars per algorithm: Ticks × Config.Tick covers the run
	Outcomes []Outcome
	figure
}

// Outcome is what one algorithm let through.
type Outcome struct {
	Algorithm ratekeeper.Algorithm
	// Counts holds the items done (requests admitted) per tick.
	Counts []int
	// Summary is the line of the summary table and the JSON object.
	Summary Summary
}

// Summary sums up an Outcome. Its JSON form is part of the command line's
// contract.
type Summary struct {
	Algorithm string `json:"algorithm"`
	// Items is the workers' items, or the traffic's requests.
	Items int `json:"items"`
	// ItemsDone is the items done, or the requests admitted.
	ItemsDone int `json:"items_done"`
	// ItemsRefused is the traffic's requests refused (workers retry, so
	// they have none).
	ItemsRefused int `json:"items_refused"`
	// ItemsLost is what got neither done nor refused: it must be zero.
	ItemsLost int `json:"items_lost"`
	// SecondsToFinish is from the workers' start to their last item (for
	// traffic, its duration).
	SecondsToFinish float64 `json:"seconds_to_finish"`
	// MaxPerTick is the tallest bar.
	MaxPerTick int `json:"max_per_tick"`
	// MaxPerWindow is the most done (admitted, for one key) in any sliding
	// window [t, t+Period).
	MaxPerWindow int `json:"max_per_window"`
	// OverAdmission is how far MaxPerWindow exceeds the rate, or zero.
	OverAdmission int `json:"over_admission"`
	// CVPerTick is the coefficient of variation (standard deviation over
	// mean) of the counts per tick while the workers were at it: 0 is
	// perfectly even.
	CVPerTick float64 `json:"cv_per_tick"`
	// Decisions is how many times the limiter was asked.
	Decisions int `json:"decisions"`
	// WronglyAllowedPct and WronglyDeniedPct (traffic only) are the shares
	// of decisions that the exact sliding window log, given the same
	// history, would have refused or admitted.
	WronglyAllowed    *int     `json:"wrongly_allowed,omitempty"`
	WronglyDenied     *int     `json:"wrongly_denied,omitempty"`
	WronglyAllowedPct *float64 `json:"wrongly_allowed_pct,omitempty"`
	WronglyDeniedPct  *float64 `json:"wrongly_denied_pct,omitempty"`
}

// measure turns the traces into counts and summaries.
func (r *Result) measure(traces []trace) {
	c := r.Config
	end := c.Duration
	if c.Kind == KindWorkers {
		end = c.Begin + 1
		for _, p := range c.Pauses {
			end = max(end, p.end())
		}
		for i := range traces {
			slices.Sort(traces[i].done)
			if n := len(traces[i].done); n > 0 {
				end = max(end, traces[i].done[n-1]+1)
			}
		}
	}
	r.Ticks = max(1, int((end+c.Tick-1)/c.Tick))
	r.Outcomes = make([]Outcome, len(traces))
	for i, tr := range traces {
		r.Outcomes[i] = r.outcome(c.Algorithms[i], tr)
	}
}

// outcome counts and sums up what algorithm a did, as tr traced it.
func (r *Result) outcome(a ratekeeper.Algorithm, tr trace) Outcome {
	c := r.Config
	o := Outcome{Algorithm: a, Counts: make([]int, r.Ticks)}
	for _, t := range tr.done {
		o.Counts[int(t/c.Tick)]++
	}
	s := Summary{
		Algorithm:    string(a),
		Items:        tr.items,
		ItemsDone:    len(tr.done),
		ItemsRefused: tr.refused,
		ItemsLost:    tr.items - len(tr.done) - tr.refused,
		MaxPerTick:   slices.Max(o.Counts),
		Decisions:    tr.decisions,
	}
	first, last := 0, r.Ticks-1
	if c.Kind == KindWorkers {
		s.MaxPerWindow = maxInWindow(tr.done, c.Period)
		first = int(c.Begin / c.Tick)
		if n := len(tr.done); n > 0 {
			s.SecondsToFinish = seconds(tr.done[n-1] - c.Begin)
			last = int(tr.done[n-1] / c.Tick)
		}
	} else {
		for _, k := range tr.perKey {
			s.MaxPerWindow = max(s.MaxPerWindow, maxInWindow(k, c.Period))
		}
		s.SecondsToFinish = seconds(c.Duration)
		wa, wd := tr.wrongly[wronglyAllowed], tr.wrongly[wronglyDenied]
		pa, pd := pct(wa, tr.decisions), pct(wd, tr.decisions)
		s.WronglyAllowed, s.WronglyDenied, s.WronglyAllowedPct, s.WronglyDeniedPct = &wa, &wd, &pa, &pd
	}
	s.OverAdmission = max(0, s.MaxPerWindow-c.Rate)
	s.CVPerTick = cv(o.Counts[first : last+1])
	o.Summary = s
	return o
}

// maxInWindow is the most instants of sorted ts within any [t, t+w).
func maxInWindow(ts []time.Duration, w time.Duration) int {
	best, lo := 0, 0
	for hi, t := range ts {
		for ts[lo] <= t-w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// cv is the coefficient of variation of xs, rounded to 3 decimals.
func cv(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += float64(x)
	}
	mean := sum / float64(len(xs))
	if mean == 0 {
		return 0
	}
	var ss float64
	for _, x := range xs {
		d := float64(x) - mean
		ss += d * d
	}
	return round(math.Sqrt(ss/float64(len(xs)))/mean, 3)
}

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return round(100*float64(n)/float64(of), 4)
}

func seconds(d time.Duration) float64 { return round(d.Seconds(), 6) }

func round(x float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(x*p) / p
}

// Summaries returns the Outcomes' summaries.
func (r *Result) Summaries() []Summary {
	out := make([]Summary, len(r.Outcomes))
	for i, o := range r.Outcomes {
		out[i] = o.Summary
	}
	return out
}

// WriteCSV writes the counts per tick: a header `t_ms,algorithm,count`,
// then one row per algorithm and tick (the tick's start in milliseconds, the
// algorithm's name, the items done in it), algorithm by algorithm.
func (r *Result) WriteCSV(w io.Writer) error {
	b := bufio.NewWriter(w)
	b.WriteString("t_ms,algorithm,count\n")
	for _, o := range r.Outcomes {
		for i, n := range o.Counts {
			ms := float64(time.Duration(i)*r.Config.Tick) / float64(time.Millisecond)
			fmt.Fprintf(b, "%s,%s,%d\n", strconv.FormatFloat(ms, 'f', -1, 64), o.Algorithm, n)
		}
	}
	return b.Flush()
}

// WriteJSON writes the summaries as a JSON array, one object per algorithm.
func (r *Result) WriteJSON(w io.Writer) error { return writeJSON(w, r.Summaries()) }

// WriteTable writes the summary table people read in a terminal.
func (r *Result) WriteTable(w io.Writer) error {
	c := r.Config
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "%s: %s; counted per %v\n\n", c.Name, c, c.Tick)
	window := "max/" + c.Period.String()
	if c.Kind == KindTraffic {
		fmt.Fprintf(tw, "algorithm\trequests\tallowed\trefused\twrongly allowed\twrongly denied\t%s (per key)\tover limit\tlost\t\n", window)
		for _, o := range r.Outcomes {
			s := o.Summary
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.3f%%\t%.3f%%\t%d\t%d\t%d\t\n", s.Algorithm, s.Items, s.ItemsDone, s.ItemsRefused,
				*s.WronglyAllowedPct, *s.WronglyDeniedPct, s.MaxPerWindow, s.OverAdmission, s.ItemsLost)
		}
	} else {
		fmt.Fprintf(tw, "algorithm\titems done\tlost\tfinished after\tmax/tick\t%s\tCV per tick\tdecisions\t\n", window)
		for _, o := range r.Outcomes {
			s := o.Summary
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.3fs\t%d\t%d\t%.3f\t%d\t\n", s.Algorithm, s.ItemsDone, s.ItemsLost, s.SecondsToFinish,
				s.MaxPerTick, s.MaxPerWindow, s.CVPerTick, s.Decisions)
		}
	}
	return tw.Flush()
}
