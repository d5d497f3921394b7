package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/sim/chart"
)

// The calendar kind's year, and the nominal lengths its traffic is
// offered against.
const (
	calendarZone    = "Europe/Berlin" // the scenario's default
	calendarYear    = 2026
	calendarDay     = 24 * time.Hour
	calendarMonth   = 30 * calendarDay
	calendarBilling = 14 * calendarDay // the offset of a quota billed on the 15th
)

// validateCalendar is Validate for the calendar kind.
func (c Config) validateCalendar() error {
	if c.Location == nil {
		return errors.New("time zone: missing")
	}
	if err := (ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: c.Rate, Calendar: ratekeeper.Monthly}).Validate(); err != nil {
		return err
	}
	if !(c.Load > 0) || math.IsInf(c.Load, 0) {
		return fmt.Errorf("load: must be positive, not %v", c.Load)
	}
	if c.Load*float64(c.Rate) < 2 {
		// Then every period, 23 hours or 28 days at least, sees a request,
		// and the run sees each reset.
		return fmt.Errorf("load: %v × the rate %d is fewer than 2 requests per period; the run would miss resets", c.Load, c.Rate)
	}
	if c.Tick < time.Minute || c.Tick%time.Minute != 0 {
		return fmt.Errorf("tick: must be a whole number of minutes, not %v", c.Tick)
	}
	for _, cs := range calendarCases(c) {
		span := cs.to.Sub(cs.from)
		if n := (span + c.Tick - 1) / c.Tick; n > maxTicks {
			return fmt.Errorf("tick: %v makes %d bars over %v; at most %d", c.Tick, n, span, maxTicks)
		}
		if n := c.Load * float64(c.Rate) * float64(span) / float64(cs.nominal); n > maxItems {
			return fmt.Errorf("load: %.0f requests in the %s case; at most %d", n, cs.name, maxItems)
		}
	}
	return nil
}

// calendarString is String for the calendar kind.
func (c Config) calendarString() string {
	return fmt.Sprintf("fixed windows of %s per period in %s, calendar against epoch; offered %s× evenly",
		chart.Thousands(c.Rate), c.Location, trimFloat(c.Load))
}

// calendarCase is one stretch of local time of the calendar kind, with
// the limits it runs, one after the other, on the same requests.
type calendarCase struct {
	name     string
	unit     ratekeeper.Calendar
	nominal  time.Duration // traffic is offered at Load × Rate per nominal
	from, to time.Time     // local midnights
	dst      time.Time     // a daily case's date that is not 24 hours long
	limits   []calendarLimit
}

// calendarLimit is a limit of a case: id names it in the CSV, label in
// the table and the chart.
type calendarLimit struct {
	id, label string
	limit     ratekeeper.Limit
}

// calendarCases are c's cases: a monthly quota across two month ends around
// the year's first daylight saving change, beside one billed on the 15th;
// then a daily quota across each change. Each is compared with a fixed
// window of the same nominal length aligned to the epoch.
func calendarCases(c Config) []calendarCase {
	loc := c.Location
	changes := offsetChanges(loc, calendarYear)
	first := time.Date(calendarYear, time.March, 29, 0, 0, 0, 0, loc)
	if len(changes) > 0 {
		first = changes[0]
	}
	fixed := func(unit ratekeeper.Calendar, offset time.Duration) ratekeeper.Limit {
		return ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: c.Rate, Calendar: unit, Location: loc, Offset: offset}
	}
	epoch := func(p time.Duration) ratekeeper.Limit {
		return ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: c.Rate, Period: p}
	}
	cases := []calendarCase{{name: "monthly", unit: ratekeeper.Monthly, nominal: calendarMonth,
		from: time.Date(calendarYear, first.Month()-1, 22, 0, 0, 0, 0, loc),
		to:   time.Date(calendarYear, first.Month()+1, 16, 0, 0, 0, 0, loc),
		limits: []calendarLimit{
			{"calendar", "monthly", fixed(ratekeeper.Monthly, 0)},
			{"offset-14d", "monthly, offset 14d", fixed(ratekeeper.Monthly, calendarBilling)},
			{"epoch-30d", "period 30d", epoch(calendarMonth)},
		}}}
	if len(changes) == 0 {
		changes = []time.Time{first}
	}
	for _, d := range changes {
		cases = append(cases, calendarCase{name: "daily-" + shortDuration(dayLength(d)), unit: ratekeeper.Daily,
			nominal: calendarDay, dst: d, from: d.AddDate(0, 0, -2), to: d.AddDate(0, 0, 3),
			limits: []calendarLimit{{"calendar", "daily", fixed(ratekeeper.Daily, 0)}, {"epoch-24h", "period 24h", epoch(calendarDay)}}})
	}
	return cases
}

// offsetChanges are the local dates of year in loc that are not 24 hours
// long: at most two.
func offsetChanges(loc *time.Location, year int) []time.Time {
	var out []time.Time
	for d := time.Date(year, time.January, 1, 0, 0, 0, 0, loc); d.Year() == year && len(out) < 2; d = d.AddDate(0, 0, 1) {
		if dayLength(d) != calendarDay {
			out = append(out, d)
		}
	}
	return out
}

// dayLength is how long the local date that starts at d lasts.
func dayLength(d time.Time) time.Duration {
	y, m, day := d.Date()
	return time.Date(y, m, day+1, 0, 0, 0, 0, d.Location()).Sub(time.Date(y, m, day, 0, 0, 0, 0, d.Location()))
}

// CalendarSample is one tick of one limit of a calendar case: the requests
// admitted and refused in it, and what the limit's period had counted
// after its last decision.
type CalendarSample struct {
	At                time.Time
	Admitted, Refused int
	Used              int
}

// CalendarPeriod is one period of a limit that the run saw, from Start to
// End. Whole says that the run saw both ends; the first period starts with
// the run, and the last ends after it.
type CalendarPeriod struct {
	Start, End        time.Time
	Whole             bool
	Admitted, Refused int
}

// CalendarOutcome is one limit's run in one case.
type CalendarOutcome struct {
	Case, Limit, Label string
	Samples            []CalendarSample
	Periods            []CalendarPeriod
	Offered            int
	admits             []time.Time
}

// CalendarResult is what Run measured of the calendar kind: the outcomes
// of every limit of every case, in order.
type CalendarResult struct {
	Config   Config
	Outcomes []CalendarOutcome
	cases    []calendarCase
	figure
}

// runCalendar runs every limit of every case of c.
func runCalendar(ctx context.Context, c Config) (*CalendarResult, error) {
	res := &CalendarResult{Config: c, cases: calendarCases(c)}
	for _, cs := range res.cases {
		for _, cl := range cs.limits {
			o, err := runCalendarLimit(ctx, c, cs, cl)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", cs.name, cl.id, err)
			}
			res.Outcomes = append(res.Outcomes, o)
		}
	}
	res.figure = newFigure(c.Name, res.chartHeight(), res.draw, res.WriteCSV)
	return res, nil
}

// calendarArrival is when request n of a case arrives: Load × Rate per
// nominal, evenly, each instant rounded to the µs.
func (c Config) calendarArrival(n int, nominal time.Duration) time.Duration {
	us := math.Round(float64(n) * float64(nominal/time.Microsecond) / (c.Load * float64(c.Rate)))
	return time.Duration(us) * time.Microsecond
}

// calendarRun is one limit's run in progress.
type calendarRun struct {
	o    *CalendarOutcome
	base time.Time
	tick time.Duration
	end  time.Duration // the current period's end, as the last decision said; 0 before the first
	cur  CalendarPeriod
}

// runCalendarLimit offers a case's requests to one limit through
// ratekeeper.New over a memory store, on a virtual clock from the case's
// start. A period ends where the limiter said it would: at the instant of
// the last decision plus its ResetAfter.
func runCalendarLimit(ctx context.Context, c Config, cs calendarCase, cl calendarLimit) (CalendarOutcome, error) {
	clock := &virtualClock{base: cs.from.UTC()}
	store := memstore.New(memstore.WithClock(clock), memstore.WithJanitorInterval(0))
	defer store.Close()
	lim, err := ratekeeper.New(store, cl.limit, ratekeeper.WithClock(clock))
	if err != nil {
		return CalendarOutcome{}, err
	}
	span := cs.to.Sub(cs.from)
	o := CalendarOutcome{Case: cs.name, Limit: cl.id, Label: cl.label, Samples: make([]CalendarSample, (span+c.Tick-1)/c.Tick)}
	for i := range o.Samples {
		o.Samples[i].At = clock.base.Add(time.Duration(i) * c.Tick)
	}
	r := &calendarRun{o: &o, base: clock.base, tick: c.Tick, cur: CalendarPeriod{Start: clock.base}}
	for ; ; o.Offered++ {
		t := c.calendarArrival(o.Offered, cs.nominal)
		if t >= span {
			break
		}
		if o.Offered%1024 == 0 && ctx.Err() != nil {
			return o, ctx.Err()
		}
		clock.set(t)
		d, err := lim.Allow(ctx, "k")
		if err != nil {
			return o, err
		}
		r.record(t, d)
	}
	r.cur.End, r.cur.Whole = r.base.Add(r.end), r.cur.Whole && r.end <= span
	o.Periods = append(o.Periods, r.cur)
	r.carry()
	return o, nil
}

// record counts decision d, made at t, in its tick and its period; a
// decision after the last one's period ended starts a new period there.
func (r *calendarRun) record(t time.Duration, d ratekeeper.Decision) {
	if r.end > 0 && t >= r.end {
		r.cur.End = r.base.Add(r.end)
		r.o.Periods = append(r.o.Periods, r.cur)
		r.cur = CalendarPeriod{Start: r.cur.End, Whole: true}
	}
	if d.ResetAfter > 0 {
		r.end = t + d.ResetAfter
	}
	x := &r.o.Samples[t/r.tick]
	if d.Allowed {
		x.Admitted++
		r.cur.Admitted++
		r.o.admits = append(r.o.admits, r.base.Add(t))
	} else {
		x.Refused++
		r.cur.Refused++
	}
	x.Used = d.Limit - d.Remaining
}

// carry gives a tick without decisions the count of the one before, or
// none after a period ended within or before it.
func (r *calendarRun) carry() {
	ends := make(map[int]bool)
	for _, p := range r.o.Periods[:len(r.o.Periods)-1] {
		ends[int(p.End.Sub(r.base)/r.tick)] = true
	}
	for i := range r.o.Samples {
		x := &r.o.Samples[i]
		if i > 0 && x.Admitted+x.Refused == 0 && !ends[i] {
			x.Used = r.o.Samples[i-1].Used
		}
	}
}
