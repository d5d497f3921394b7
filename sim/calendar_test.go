package sim

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones, wherever the tests run
)

func runCalendarT(t testing.TB, set func(*Config)) *CalendarResult {
	t.Helper()
	c, err := Scenario("calendar", set)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return r.(*CalendarResult)
}

// small is the scenario at a tenth of its quota: the same instants, with
// less to decide under -race.
func small(c *Config) { c.Rate = 1000 }

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// resets are the instants, in UTC, at which the periods of one case's
// limit started, as the run saw them.
func resets(t *testing.T, r *CalendarResult, name, limit string) []string {
	t.Helper()
	for _, o := range r.Outcomes {
		if o.Case == name && o.Limit == limit {
			var out []string
			for _, p := range o.Periods[1:] {
				out = append(out, p.Start.UTC().Format("2006-01-02T15:04Z"))
			}
			return out
		}
	}
	t.Fatalf("no outcome for %s %s", name, limit)
	return nil
}

// The calendar windows reset at local midnight on the 1st (the 15th with
// the billing offset), or of each date: 23:00 UTC in winter, 22:00 UTC in
// summer. The epoch's windows reset at 00:00 UTC, every 30 days from the
// epoch for period 30d.
func TestCalendarResetsAtLocalBoundaries(t *testing.T) {
	r := runCalendarT(t, small)
	for _, tc := range []struct {
		name, limit string
		want        string
	}{
		{"monthly", "calendar", "2026-02-28T23:00Z 2026-03-31T22:00Z"},
		{"monthly", "offset-14d", "2026-03-14T23:00Z 2026-04-14T22:00Z"},
		{"monthly", "epoch-30d", "2026-03-08T00:00Z 2026-04-07T00:00Z"},
		{"daily-23h", "calendar", "2026-03-27T23:00Z 2026-03-28T23:00Z 2026-03-29T22:00Z 2026-03-30T22:00Z"},
		{"daily-23h", "epoch-24h", "2026-03-27T00:00Z 2026-03-28T00:00Z 2026-03-29T00:00Z 2026-03-30T00:00Z 2026-03-31T00:00Z"},
		{"daily-25h", "calendar", "2026-10-23T22:00Z 2026-10-24T22:00Z 2026-10-25T23:00Z 2026-10-26T23:00Z"},
		{"daily-25h", "epoch-24h", "2026-10-23T00:00Z 2026-10-24T00:00Z 2026-10-25T00:00Z 2026-10-26T00:00Z 2026-10-27T00:00Z"},
	} {
		if got := strings.Join(resets(t, r, tc.name, tc.limit), " "); got != tc.want {
			t.Errorf("%s %s: resets at %s, want %s", tc.name, tc.limit, got, tc.want)
		}
	}
}

// A daily period lasts its local date: 23 hours on 29 March, 25 on 25
// October, 24 on the others. Calendar March lasts 743 hours, and so does
// the billing month from 15 March; the epoch's periods last 720.
func TestCalendarPeriodLengths(t *testing.T) {
	r := runCalendarT(t, small)
	want := map[string][]float64{
		"monthly/calendar":    {743, 0},
		"monthly/offset-14d":  {743, 0},
		"monthly/epoch-30d":   {720, 0},
		"daily-23h/calendar":  {24, 23, 24, 24},
		"daily-23h/epoch-24h": {24, 24, 24, 24, 0},
		"daily-25h/calendar":  {24, 25, 24, 24},
		"daily-25h/epoch-24h": {24, 24, 24, 24, 0},
	}
	sums := r.Summaries()
	if len(sums) != len(want) {
		t.Fatalf("%d outcomes, want %d", len(sums), len(want))
	}
	for _, s := range sums {
		var got []float64
		for _, x := range s.Resets {
			got = append(got, x.Hours)
		}
		if w := want[s.Case+"/"+s.Limit]; !equalFloats(got, w) {
			t.Errorf("%s %s: periods of %v hours, want %v", s.Case, s.Limit, got, w)
		}
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkCalendar demands that no period admits more than the quota, that
// the ticks add up to the periods, and that every calendar reset is a
// local boundary: midnight, on the 1st (the 15th with the offset) for a
// monthly one.
func checkCalendar(t *testing.T, r *CalendarResult) {
	t.Helper()
	c := r.Config
	for _, o := range r.Outcomes {
		admitted, refused := 0, 0
		for _, x := range o.Samples {
			admitted += x.Admitted
			refused += x.Refused
			if x.Used < 0 || x.Used > c.Rate {
				t.Errorf("%s %s at %v: %d counted, quota %d", o.Case, o.Limit, x.At, x.Used, c.Rate)
			}
		}
		sum := 0
		for _, p := range o.Periods {
			sum += p.Admitted + p.Refused
			if p.Admitted > c.Rate {
				t.Errorf("%s %s: the period from %v admitted %d, quota %d", o.Case, o.Limit, p.Start, p.Admitted, c.Rate)
			}
		}
		if admitted+refused != o.Offered || sum != o.Offered {
			t.Errorf("%s %s: offered %d; the ticks admitted %d and refused %d; the periods decided %d", o.Case, o.Limit, o.Offered, admitted, refused, sum)
		}
		if o.Limit == "calendar" || o.Limit == "offset-14d" {
			checkBoundaries(t, o, c.Location)
		}
	}
}

// checkBoundaries demands that each reset of a calendar outcome is the
// local midnight that starts its date.
func checkBoundaries(t *testing.T, o CalendarOutcome, loc *time.Location) {
	t.Helper()
	for _, p := range o.Periods[1:] {
		l := p.Start.In(loc)
		y, m, d := l.Date()
		day := 1
		if o.Limit == "offset-14d" {
			day = 15
		}
		if !p.Start.Equal(time.Date(y, m, d, 0, 0, 0, 0, loc)) || o.Case == "monthly" && d != day {
			t.Errorf("%s %s: a reset at %v, not a local midnight starting day %d", o.Case, o.Limit, l, day)
		}
	}
}

// In any zone and at any load, no period admits more than the quota and
// the calendar resets at local midnight. A zone's cases are its changes:
// Sydney's summer ends in April (25 hours) and starts in October (23), Lord
// Howe moves by half an hour, and a zone without daylight saving has one
// daily case of 24-hour days.
func TestCalendarZonesAndLoads(t *testing.T) {
	for _, tc := range []struct {
		zone  string
		load  float64
		cases string
	}{
		{"Europe/Berlin", 0.5, "monthly daily-23h daily-25h"},
		{"Europe/Berlin", 4, "monthly daily-23h daily-25h"},
		{"America/New_York", 1.5, "monthly daily-23h daily-25h"},
		{"Australia/Sydney", 1.5, "monthly daily-25h daily-23h"},
		{"Asia/Kolkata", 2, "monthly daily-24h"},
		{"UTC", 1.5, "monthly daily-24h"},
		{"Australia/Lord_Howe", 0.2, "monthly daily-24h30m daily-23h30m"},
	} {
		r := runCalendarT(t, func(c *Config) { c.Location, c.Load, c.Rate = zone(t, tc.zone), tc.load, 500 })
		var names []string
		for _, cs := range r.cases {
			names = append(names, cs.name)
		}
		if got := strings.Join(names, " "); got != tc.cases {
			t.Errorf("%s: cases %s, want %s", tc.zone, got, tc.cases)
		}
		checkCalendar(t, r)
	}
}

// The default run: every period that saw enough traffic admits the quota,
// and the epoch's 30 days let more than the quota into calendar March.
func TestCalendarScenario(t *testing.T) {
	r := runCalendarT(t, small)
	checkCalendar(t, r)
	for _, s := range r.Summaries() {
		if s.MostInPeriod != s.Quota {
			t.Errorf("%s %s: at most %d in a period, want the quota %d", s.Case, s.Limit, s.MostInPeriod, s.Quota)
		}
		over := s.MostInCalendar > s.Quota
		if s.Limit == "calendar" && over || s.Case == "monthly" && s.Limit != "calendar" && !over {
			t.Errorf("%s %s: at most %d in a calendar period, quota %d", s.Case, s.Limit, s.MostInCalendar, s.Quota)
		}
	}
}

// The same Config gives the same bytes; the CSV's header is a contract.
func TestCalendarDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	r := runCalendarT(t, small)
	if err := r.WriteCSV(&a); err != nil {
		t.Fatal(err)
	}
	if err := runCalendarT(t, small).WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two runs gave two CSVs")
	}
	if want := "case,limit,tick_utc,admitted,refused,used\nmonthly,calendar,2026-02-21T23:00Z,"; !strings.HasPrefix(a.String(), want) {
		t.Errorf("CSV starts %q, want %q", a.String()[:min(a.Len(), 80)], want)
	}
	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(table.String(), "\n") {
		f := strings.Fields(line)
		found = found || strings.Join(f[:min(len(f), 9)], " ") == "daily-23h daily Sun 2026-03-29 00:00 CET 2026-03-28 23:00 23h"
	}
	if !found {
		t.Errorf("no row for the 23-hour day in the table:\n%s", table.String())
	}
}

func TestCalendarValidate(t *testing.T) {
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Location = nil }, "time zone: missing"},
		{func(c *Config) { c.Rate = 0 }, "rate"},
		{func(c *Config) { c.Load = 0 }, "load: must be positive"},
		{func(c *Config) { c.Tick = 30 * time.Second }, "tick: must be a whole number of minutes"},
		{func(c *Config) { c.Tick = 90 * time.Second }, "tick: must be a whole number of minutes"},
		{func(c *Config) { c.Rate, c.Load = 10_000_000, 10 }, "load: "},
		{func(c *Config) { c.Rate, c.Load = 3, 0.5 }, "fewer than 2 requests per period"},
	} {
		c, err := Scenario("calendar", tc.set)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want %q", err, tc.want)
		}
	}
}
