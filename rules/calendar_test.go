package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// TestCalendarErrors: each mistake in a calendar limit is reported at its
// file:line and field, in words a user can act on.
func TestCalendarErrors(t *testing.T) {
	rule := func(limit string) string { return "rules:\n  - name: a\n    limit:\n" + limit }
	for _, c := range []struct{ yaml, want string }{
		{rule("      algorithm: fixed_window\n      rate: 5\n      calendar: monthly\n      time_zone: Europe/Berlinn\n"),
			`f.yaml:7: rules[0].limit.time_zone: "Europe/Berlinn" is not a time zone: give an IANA name like Europe/Berlin`},
		{rule("      {algorithm: fixed_window, rate: 5, calendar: daily, time_zone: Local}\n"),
			`f.yaml:4: rules[0].limit.time_zone: "Local" is this machine's zone`},
		{rule("      {algorithm: fixed_window, rate: 5, calendar: daily, time_zone: ../../etc/passwd}\n"),
			`rules[0].limit.time_zone: "../../etc/passwd" is not a time zone`},
		{rule("      algorithm: sliding_window\n      rate: 5\n      calendar: daily\n"),
			`f.yaml:6: rules[0].limit.calendar: sliding_window cannot follow the calendar; use algorithm: fixed_window`},
		{rule("      algorithm: token_bucket\n      rate: 5\n      calendar: weekly\n"),
			`f.yaml:6: rules[0].limit.calendar: token_bucket cannot follow the calendar`},
		{rule("      algorithm: fixed_window\n      rate: 5\n      calendar: monthly\n      offset: 31d\n"),
			`f.yaml:7: rules[0].limit.offset: 31d is not in 0 up to less than 31d, the unit of a monthly calendar`},
		{rule("      {algorithm: fixed_window, rate: 5, calendar: daily, offset: 24h}\n"),
			`rules[0].limit.offset: 1d is not in 0 up to less than 1d, the unit of a daily calendar`},
		{rule("      {algorithm: fixed_window, rate: 5, calendar: weekly, offset: 2w}\n"),
			`rules[0].limit.offset: 2w is not in 0 up to less than 1w`},
		{rule("      {algorithm: fixed_window, rate: 5, calendar: yearly, offset: -1h}\n"),
			`rules[0].limit.offset: -1h0m0s is not in 0 up to less than 365d`},
		{rule("      algorithm: fixed_window\n      rate: 5\n      period: 1h\n      time_zone: Europe/Berlin\n"),
			`f.yaml:7: rules[0].limit.time_zone: applies to a calendar window: add calendar (daily, weekly, monthly or yearly) or remove time_zone`},
		{rule("      algorithm: fixed_window\n      rate: 5\n      period: 1h\n      offset: 14d\n"),
			`f.yaml:7: rules[0].limit.offset: applies to a calendar window: add calendar`},
		{rule("      algorithm: fixed_window\n      rate: 5\n      calendar: month\n"),
			`f.yaml:6: rules[0].limit.calendar: "month" is not a calendar; use daily, weekly, monthly or yearly`},
		{rule("      algorithm: fixed_window\n      rate: 5\n      calendar: Monthly\n"),
			`rules[0].limit.calendar: "Monthly" is not a calendar`},
		{rule("      algorithm: fixed_window\n      rate: 5\n      calendar: daily\n      period: 1d\n"),
			`f.yaml:7: rules[0].limit.period: a calendar window lasts its daily period: remove period`},
		{rule("      {algorithm: fixed_window, rate: 5, calendar: daily, stagger: true}\n"),
			`rules[0].limit.stagger: a calendar window is not staggered`},
		{rule("      algorithm: fixed_window\n      rate: 5\n      calendar: daily\n      time_zone: [Europe/Berlin]\n"),
			`f.yaml:7: rules[0].limit.time_zone: expected text, not a list`},
		{rule("      algorithm: fixed_window\n      rate: 5\n      calendar: daily\n      offset: 1ns\n"),
			`f.yaml:7: rules[0].limit.offset: offset 1ns is not a whole number of microseconds`},
		{rule("      {algorithm: fixed_window, rate: 5, calendar: daily, offset: soon}\n"),
			`"soon" is not a duration`},
		{rule("      {algorithm: fixed_window, rate: 5, calendar: monthly}\n    overrides:\n      x: {rate: 9, calendar: fortnightly}\n    key: [header:X-K]\n"),
			`f.yaml:6: rules[0].overrides.x.calendar: "fortnightly" is not a calendar`},
	} {
		_, err := Parse("f.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
		var e *Error
		if err != nil && !errors.As(err, &e) {
			t.Errorf("%q: %T is not an *Error", c.yaml, err)
		}
	}
}

// TestCalendarLimit: the example compiles to the library's limit,
// and an override inherits the rule's calendar, zone and offset, unless
// it writes one: offset 0s is none.
func TestCalendarLimit(t *testing.T) {
	c, err := Parse("f.yaml", []byte(`rules:
  - name: plan
    key: [header:X-Key]
    limit: {algorithm: fixed_window, rate: 10000, calendar: monthly, time_zone: Europe/Berlin, offset: 14d}
    overrides:
      acme: {rate: 50000}
      beta: {rate: 5, offset: 2d}
      gamma: {rate: 5, period: 1h}
      delta: {rate: 5, calendar: daily}
      zero: {rate: 5, offset: 0s}
`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	l := s.Rules[0].Limit
	if l.Calendar != ratekeeper.Monthly || l.Location.String() != "Europe/Berlin" || l.Offset != 14*24*time.Hour || l.Period != 0 {
		t.Fatalf("limit %+v", l)
	}
	alts := map[string]ratekeeper.Limit{}
	for _, a := range s.Rules[0].Alts {
		alts[a.Name] = a.Limit
	}
	want := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 50000, Calendar: ratekeeper.Monthly, Location: berlin, Offset: 14 * 24 * time.Hour}
	if got := alts["acme"]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("acme %v, want %v", got, want)
	}
	if got := alts["beta"]; got.Offset != 2*24*time.Hour || got.Location.String() != "Europe/Berlin" {
		t.Errorf("beta %v", got)
	}
	if got := alts["zero"]; got.Calendar != ratekeeper.Monthly || got.Location.String() != "Europe/Berlin" || got.Offset != 0 {
		t.Errorf("zero %v: want monthly in Berlin, with the offset 0s it writes", got)
	}
	if got := alts["gamma"]; got.Calendar != "" || got.Period != time.Hour {
		t.Errorf("gamma %v", got)
	}
	if got := alts["delta"]; got.Calendar != ratekeeper.Daily || got.Location.String() != "Europe/Berlin" || got.Offset != 0 {
		t.Errorf("delta %v: want daily in Berlin, without the monthly offset", got)
	}
	if d := s.Rules[0].Describe(); !strings.Contains(d, "fixed window: 10000 per calendar month in Europe/Berlin, boundaries moved 2w later") {
		t.Errorf("describe: %s", d)
	}
}

// TestCalendarKeyPrefix: a reload that changes a calendar rule's unit,
// time zone or offset starts its counts afresh (another key prefix); an
// epoch limit keeps the prefix it had before calendars existed.
func TestCalendarKeyPrefix(t *testing.T) {
	prefix := func(limit string) string {
		t.Helper()
		c, err := Parse("f.yaml", []byte("rules:\n  - name: a\n    limit: {algorithm: fixed_window, rate: 5, "+limit+"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Compile(c)
		if err != nil {
			t.Fatal(err)
		}
		return s.Rules[0].KeyPrefix()
	}
	seen := map[string]string{}
	for _, l := range []string{
		"calendar: daily",
		"calendar: daily, time_zone: Europe/Berlin",
		"calendar: daily, time_zone: Europe/Paris",
		"calendar: daily, time_zone: Europe/Berlin, offset: 9h",
		"calendar: weekly, time_zone: Europe/Berlin, offset: 9h",
		"period: 1d",
	} {
		p := prefix(l)
		if other, ok := seen[p]; ok {
			t.Errorf("%q and %q share key prefix %s", l, other, p)
		}
		seen[p] = l
	}
	if prefix("calendar: daily, time_zone: Europe/Berlin") != prefix("time_zone: Europe/Berlin, calendar: daily") ||
		prefix("calendar: daily") != prefix("calendar: daily, time_zone: UTC") {
		t.Errorf("the same limit has two prefixes")
	}
	if got := prefix("period: 1s"); got != "a:82e33fe7:" {
		t.Errorf("an epoch limit's prefix changed: %s", got)
	}
}

// FuzzCalendarLimit: whatever a file writes in the calendar fields, the
// parser never panics, and a limit it accepts is one the library accepts,
// whose windows are ordered around any instant.
func FuzzCalendarLimit(f *testing.F) {
	for _, s := range [][3]string{
		{"monthly", "Europe/Berlin", "14d"}, {"daily", "America/New_York", "9h"}, {"weekly", "", "6d23h"},
		{"yearly", "Pacific/Apia", "59d"}, {"daily", "Local", ""}, {"monthly", "../zoneinfo/UTC", "30d"},
		{"daily", "/etc/localtime", ""}, {"weekly", "Europe/Berlin\x00", "1w"}, {"", "UTC", "1h"},
		{"monthly", "Asia/Kathmandu", "1ns"}, {"daily", "Australia/Lord_Howe", "23h59m59.999999s"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, cal, zone, offset string) {
		y := fmt.Sprintf("rules:\n  - name: a\n    limit: {algorithm: fixed_window, rate: 5, calendar: %q, time_zone: %q, offset: %q}\n", cal, zone, offset)
		if cal == "" {
			y = strings.Replace(y, `calendar: "", `, "period: 1s, ", 1)
		}
		c, err := Parse("f.yaml", []byte(y))
		if err != nil {
			return
		}
		s, err := Compile(c)
		if err != nil {
			t.Fatalf("parsed but did not compile: %v\n%s", err, y)
		}
		l := s.Rules[0].Limit
		if err := l.Validate(); err != nil {
			t.Fatalf("accepted a limit the library refuses: %v\n%s", err, y)
		}
	})
}

// TestZoneData: the fingerprint follows a zone's offsets and their
// instants, not its names: the same data, loaded twice or named apart,
// shows the same one; data an hour apart shows another.
func TestZoneData(t *testing.T) {
	berlin, err := LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadZone("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	old, tz2024b := time.FixedZone("America/Asuncion", -4*3600), time.FixedZone("America/Asuncion", -3*3600)
	for _, c := range []struct {
		a, b *time.Location
		same bool
	}{
		{berlin, again, true},
		{nil, time.UTC, true},
		{time.FixedZone("A", 3600), time.FixedZone("B", 3600), true},
		{old, tz2024b, false},
		{berlin, time.FixedZone("Europe/Berlin", 3600), false},
		{berlin, nil, false},
	} {
		a, b := ZoneData(c.a), ZoneData(c.b)
		if len(a) != 8 || (a == b) != c.same {
			t.Errorf("%v %q, %v %q: want same %v", c.a, a, c.b, b, c.same)
		}
	}
}
