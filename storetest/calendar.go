package storetest

import (
	"math/rand/v2"
	"time"
	_ "time/tzdata" // Europe/Berlin on a machine without zone files

	"github.com/ratekeeper/ratekeeper"
)

// CalendarTimelines returns the conformance timelines of calendar fixed
// windows, which Timelines includes. They cover the microseconds either
// side of a boundary and days of 23 and 25 hours in Europe/Berlin. They
// cover offsets whose local time is skipped or repeated, 29 February, and
// monthly offsets past a short month's end.
func CalendarTimelines() []Timeline {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err) // time/tzdata is embedded: cannot happen
	}
	const day = 24 * time.Hour
	allowed := func(rem int, reset time.Duration) Want { return Want{Allowed: true, Remaining: rem, ResetAfter: reset} }
	refused := func(rem int, retry, reset time.Duration) Want {
		return Want{Remaining: rem, RetryAfter: retry, ResetAfter: reset}
	}
	fixed := func(rate int, c ratekeeper.Calendar, loc *time.Location, offset time.Duration) ratekeeper.Limit {
		return ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: rate, Calendar: c, Location: loc, Offset: offset}
	}
	utc := func(y int, m time.Month, d, h int) time.Time { return time.Date(y, m, d, h, 0, 0, 0, time.UTC) }
	return []Timeline{
		{
			// The last µs of a UTC day and the first of the next; a clock
			// that steps back keeps counting in the latest window.
			Name:  "calendar/daily_utc_boundary",
			Limit: fixed(2, ratekeeper.Daily, nil, 0),
			Steps: []Step{
				{At: 0, Op: Peek, Want: allowed(2, 0)},
				{At: day - us, N: 2, Want: allowed(0, us)},
				{At: day - us, Want: refused(0, us, us)},
				{At: day, Want: allowed(1, day)},
				{At: day - 2*us, Want: allowed(0, day+2*us)},
			},
		},
		{
			// 29 March 2026 in Berlin is 23 hours long; a refund in the
			// window that counted it gives back, the next day is 24 hours.
			Name:  "calendar/berlin_spring_forward_day",
			Limit: fixed(1, ratekeeper.Daily, berlin, 0),
			Start: time.Date(2026, 3, 29, 0, 0, 0, 0, berlin),
			Steps: []Step{
				{At: 0, Want: allowed(0, 23*time.Hour)},
				{At: 23*time.Hour - us, Want: refused(0, us, us)},
				{At: 23*time.Hour - us, Op: Refund},
				{At: 23*time.Hour - us, Want: allowed(0, us)},
				{At: 23 * time.Hour, Want: allowed(0, day)},
			},
		},
		{
			Name:  "calendar/berlin_fall_back_day",
			Limit: fixed(1, ratekeeper.Daily, berlin, 0),
			Start: time.Date(2026, 10, 25, 0, 0, 0, 0, berlin),
			Steps: []Step{
				{At: 0, Want: allowed(0, 25*time.Hour)},
				{At: 25*time.Hour - us, Want: refused(0, us, us)},
				{At: 25 * time.Hour, Want: allowed(0, day)},
			},
		},
		{
			// Days from 02:30 Berlin time: on 29 March 2026 that time is
			// skipped, and the day starts when the clocks jump (01:00 UTC).
			Name:  "calendar/berlin_offset_skipped",
			Limit: fixed(1, ratekeeper.Daily, berlin, 2*time.Hour+30*min),
			Start: utc(2026, 3, 28, 12),
			Steps: []Step{
				{At: 0, Want: allowed(0, 13*time.Hour)},
				{At: 13*time.Hour - us, Want: refused(0, us, us)},
				{At: 13 * time.Hour, Want: allowed(0, 23*time.Hour+30*min)},
			},
		},
		{
			// On 25 October 2026 02:30 Berlin time happens twice; the day
			// starts at the first (00:30 UTC) and lasts 25 hours.
			Name:  "calendar/berlin_offset_repeated",
			Limit: fixed(1, ratekeeper.Daily, berlin, 2*time.Hour+30*min),
			Start: utc(2026, 10, 24, 12),
			Steps: []Step{
				{At: 0, Want: allowed(0, 12*time.Hour+30*min)},
				{At: 12*time.Hour + 30*min - us, Want: refused(0, us, us)},
				{At: 12*time.Hour + 30*min, Want: allowed(0, 25*time.Hour)},
			},
		},
		{
			// Weeks start on Monday; this one ends an hour late, in CET.
			Name:  "calendar/weekly_berlin_fall_back",
			Limit: fixed(2, ratekeeper.Weekly, berlin, 0),
			Start: time.Date(2026, 10, 19, 0, 0, 0, 0, berlin),
			Steps: []Step{
				{At: 0, Op: Peek, Want: allowed(2, 0)},
				{At: 0, N: 2, Want: allowed(0, 7*day+time.Hour)},
				{At: 3 * day, Want: refused(0, 4*day+time.Hour, 4*day+time.Hour)},
				{At: 7*day + time.Hour, Want: allowed(1, 7*day)},
			},
		},
		{
			// A billing day of the 29th falls on 29 February in 2028.
			Name:  "calendar/monthly_29th_leap_february",
			Limit: fixed(1, ratekeeper.Monthly, nil, 28*day),
			Start: utc(2028, 2, 28, 0),
			Steps: []Step{
				{At: 0, Want: allowed(0, day)},
				{At: day - us, Want: refused(0, us, us)},
				{At: day, Want: allowed(0, 29*day)},
			},
		},
		{
			// The 31st at 09:00, or a shorter month's last day at 09:00.
			Name:  "calendar/monthly_offset_past_short_month",
			Limit: fixed(1, ratekeeper.Monthly, nil, 30*day+9*time.Hour),
			Start: utc(2026, 2, 27, 0),
			Steps: []Step{
				{At: 0, Want: allowed(0, 33*time.Hour)},
				{At: 33*time.Hour - us, Want: refused(0, us, us)},
				{At: 33 * time.Hour, Want: allowed(0, 31*day)},
				{At: 33*time.Hour + 31*day, Want: allowed(0, 30*day)},
			},
		},
		{
			// Years from 1 January plus 59 days: 29 February in 2028, else
			// 1 March, so the year from 29 February 2028 has 366 days.
			Name:  "calendar/yearly_59_days",
			Limit: fixed(1, ratekeeper.Yearly, nil, 59*day),
			Start: utc(2028, 2, 28, 0),
			Steps: []Step{
				{At: 0, Want: allowed(0, day)},
				{At: day, Want: allowed(0, 366*day)},
			},
		},
	}
}

// RandomCalendarLimit draws a valid calendar fixed window with a random
// offset, in UTC or a zone with daylight saving (Lord Howe's moves by 30
// minutes). Its start is an instant shortly before a daylight saving
// change, 29 February or a short month's end. Its span is the unit's usual
// length, which scales the gaps between requests.
func RandomCalendarLimit(rng *rand.Rand) (l ratekeeper.Limit, start time.Time, span time.Duration) {
	const day = 24 * time.Hour
	units := []ratekeeper.Calendar{ratekeeper.Daily, ratekeeper.Weekly, ratekeeper.Monthly, ratekeeper.Yearly}
	spans := []time.Duration{day, 7 * day, 30 * day, 365 * day}
	u := rng.IntN(len(units))
	l = ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1 + rng.IntN(20), Calendar: units[u]}
	if zone := []string{"", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"}[rng.IntN(4)]; zone != "" {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			panic(err) // time/tzdata is embedded: cannot happen
		}
		l.Location = loc
	}
	if rng.IntN(3) > 0 {
		l.Offset = time.Duration(rng.Int64N(int64(l.Calendar.MaxOffset()))).Truncate(time.Microsecond)
		if rng.IntN(2) == 0 {
			l.Offset = l.Offset.Truncate(time.Hour) // a whole hour, where changes happen
		}
	}
	starts := []time.Time{
		time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC),  // Europe's spring change
		time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC), // Europe's autumn change
		time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC),  // New York's autumn change
		time.Date(2026, 4, 4, 15, 0, 0, 0, time.UTC),  // Lord Howe's
		time.Date(2028, 2, 29, 0, 0, 0, 0, time.UTC),
		time.Date(2027, 2, 28, 0, 0, 0, 0, time.UTC),
	}
	span = spans[u]
	start = starts[rng.IntN(len(starts))].Add(-time.Duration(rng.Int64N(int64(span))).Truncate(time.Microsecond))
	return l, start, span
}
