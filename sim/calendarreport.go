package sim

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// CalendarSummary sums up one limit of one case of a calendar simulation.
// Its JSON form is part of the command line's contract.
type CalendarSummary struct {
	Case     string `json:"case"`
	Limit    string `json:"limit"`
	Label    string `json:"label"`
	Quota    int    `json:"quota"`
	Offered  int    `json:"offered"`
	Admitted int    `json:"admitted"`
	Refused  int    `json:"refused"`
	// Resets are the instants its periods ended, as the limiter said.
	Resets []CalendarReset `json:"resets"`
	// MostInPeriod is the most admitted in one of its periods: at most
	// Quota.
	MostInPeriod int `json:"most_in_period"`
	// MostInCalendar is the most admitted in one local period of the
	// case's unit (a calendar month, a local date) that the run saw whole.
	MostInCalendar int `json:"most_in_calendar_period"`
}

// CalendarReset is a period's start that the run saw.
type CalendarReset struct {
	// Local and UTC are the instant in RFC 3339, in the zone and in UTC.
	Local string `json:"local"`
	UTC   string `json:"utc"`
	// Hours is the length of the period that starts there, or 0 when it
	// ended after the run.
	Hours float64 `json:"hours"`
	// Admitted and Refused are the requests of that period, up to the
	// run's end.
	Admitted int `json:"admitted"`
	Refused  int `json:"refused"`
}

// Summaries are the outcomes' summaries, in order.
func (r *CalendarResult) Summaries() []CalendarSummary {
	out := make([]CalendarSummary, len(r.Outcomes))
	for i, o := range r.Outcomes {
		s := CalendarSummary{Case: o.Case, Limit: o.Limit, Label: o.Label, Quota: r.Config.Rate,
			Offered: o.Offered, Resets: []CalendarReset{}}
		for j, p := range o.Periods {
			s.Admitted += p.Admitted
			s.Refused += p.Refused
			s.MostInPeriod = max(s.MostInPeriod, p.Admitted)
			if j == 0 {
				continue
			}
			x := CalendarReset{Local: p.Start.In(r.Config.Location).Format(time.RFC3339), UTC: p.Start.UTC().Format(time.RFC3339),
				Admitted: p.Admitted, Refused: p.Refused}
			if p.Whole {
				x.Hours = p.End.Sub(p.Start).Hours()
			}
			s.Resets = append(s.Resets, x)
		}
		s.MostInCalendar = mostIn(o.admits, r.calendarPeriods(o.Case))
		out[i] = s
	}
	return out
}

// calendarPeriods are the whole periods of the case's first limit, which
// follows its calendar.
func (r *CalendarResult) calendarPeriods(name string) []CalendarPeriod {
	for _, o := range r.Outcomes {
		if o.Case == name {
			var whole []CalendarPeriod
			for _, p := range o.Periods {
				if p.Whole {
					whole = append(whole, p)
				}
			}
			return whole
		}
	}
	return nil
}

// mostIn is the most of the sorted instants ts in one of the periods.
func mostIn(ts []time.Time, periods []CalendarPeriod) int {
	most := 0
	for _, p := range periods {
		lo, _ := slices.BinarySearchFunc(ts, p.Start, time.Time.Compare)
		hi, _ := slices.BinarySearchFunc(ts, p.End, time.Time.Compare)
		most = max(most, hi-lo)
	}
	return most
}

// WriteCSV writes the samples: a header
// `case,limit,tick_utc,admitted,refused,used`, then one row per case,
// limit and tick. A row has the tick's start in UTC, the requests
// admitted and refused in it, and what the limit's period had counted at
// its end.
func (r *CalendarResult) WriteCSV(w io.Writer) error {
	b := bufio.NewWriter(w)
	b.WriteString("case,limit,tick_utc,admitted,refused,used\n")
	for _, o := range r.Outcomes {
		for _, x := range o.Samples {
			fmt.Fprintf(b, "%s,%s,%s,%d,%d,%d\n", o.Case, o.Limit, x.At.UTC().Format("2006-01-02T15:04Z"), x.Admitted, x.Refused, x.Used)
		}
	}
	return b.Flush()
}

// WriteJSON writes the summaries as a JSON array, one object per case and
// limit.
func (r *CalendarResult) WriteJSON(w io.Writer) error { return writeJSON(w, r.Summaries()) }

// WriteTable writes the summaries, then every reset, as the tables people
// read in a terminal.
func (r *CalendarResult) WriteTable(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "%s: %s; counted per %s\n\n", c.Name, c, shortDuration(c.Tick))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "case\tlimit\toffered\tadmitted\trefused\tresets\tmost in a period\tmost in a calendar period\t\n")
	sums := r.Summaries()
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", s.Case, s.Label, s.Offered, s.Admitted, s.Refused,
			len(s.Resets), s.MostInPeriod, s.MostInCalendar)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nresets, and the period each starts: its length, what it admitted and refused (up to the run's end)\n\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "case\tlimit\tlocal\tUTC\tlength\tadmitted\trefused\t\n")
	for _, o := range r.Outcomes {
		for _, p := range o.Periods[1:] {
			hours := 0.0
			if p.Whole {
				hours = p.End.Sub(p.Start).Hours()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n", o.Case, o.Label, p.Start.In(c.Location).Format("Mon 2006-01-02 15:04 MST"),
				p.Start.UTC().Format("2006-01-02 15:04"), periodLength(hours), p.Admitted, p.Refused)
		}
	}
	return tw.Flush()
}

// periodLength writes a period's length in hours, with days beyond two:
// "23h", "743h (30d 23h)"; 0 is "-", a period the run did not see end.
func periodLength(hours float64) string {
	switch {
	case hours == 0:
		return "-"
	case hours < 48:
		return trimFloat(hours) + "h"
	}
	d := time.Duration(hours * float64(time.Hour))
	return fmt.Sprintf("%sh (%dd %sh)", trimFloat(hours), int(d/calendarDay), trimFloat((d % calendarDay).Hours()))
}

// shortDuration writes d without its zero units: 1h, 30m, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
