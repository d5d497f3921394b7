package algo

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load %s: %v", name, err)
	}
	return loc
}

func us(t testing.TB, s string) int64 {
	t.Helper()
	tt, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return tt.UnixMicro()
}

const (
	hour = 3600 * usPerSec
	day  = usPerDay
)

// TestCalendarWindow pins windows around boundaries, daylight saving
// changes, leap days, short months and year ends. delta moves now by µs
// from the instant given.
func TestCalendarWindow(t *testing.T) {
	cases := []struct {
		name       string
		zone       string
		unit       Unit
		offset     int64 // µs
		now        string
		delta      int64
		start, end string
	}{
		{"utc leap day", "UTC", Daily, 0, "2024-02-29T12:00:00Z", 0, "2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"utc last µs of a day", "UTC", Daily, 0, "2024-03-01T00:00:00Z", -1, "2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z"},
		{"utc first µs of a day", "UTC", Daily, 0, "2024-03-01T00:00:00Z", 0, "2024-03-01T00:00:00Z", "2024-03-02T00:00:00Z"},
		{"before the epoch", "UTC", Daily, 0, "1969-12-31T12:00:00Z", 0, "1969-12-31T00:00:00Z", "1970-01-01T00:00:00Z"},
		{"week of the epoch starts on a Monday", "UTC", Weekly, 0, "1970-01-01T00:00:00Z", 0, "1969-12-29T00:00:00Z", "1970-01-05T00:00:00Z"},
		{"berlin spring forward: 23 hours", "Europe/Berlin", Daily, 0, "2024-03-31T10:00:00+02:00", 0, "2024-03-31T00:00:00+01:00", "2024-04-01T00:00:00+02:00"},
		{"berlin fall back: 25 hours", "Europe/Berlin", Daily, 0, "2024-10-27T02:30:00+01:00", 0, "2024-10-27T00:00:00+02:00", "2024-10-28T00:00:00+01:00"},
		{"berlin local midnight, last µs", "Europe/Berlin", Daily, 0, "2024-07-02T00:00:00+02:00", -1, "2024-07-01T00:00:00+02:00", "2024-07-02T00:00:00+02:00"},
		{"berlin skipped 02:30 falls at the change", "Europe/Berlin", Daily, 2*hour + 30*60*usPerSec, "2024-03-31T01:00:00Z", -1, "2024-03-30T02:30:00+01:00", "2024-03-31T03:00:00+02:00"},
		{"berlin skipped 02:30, at the change", "Europe/Berlin", Daily, 2*hour + 30*60*usPerSec, "2024-03-31T01:00:00Z", 0, "2024-03-31T03:00:00+02:00", "2024-04-01T02:30:00+02:00"},
		{"berlin repeated 02:30 is its first", "Europe/Berlin", Daily, 2*hour + 30*60*usPerSec, "2024-10-27T02:40:00+01:00", 0, "2024-10-27T02:30:00+02:00", "2024-10-28T02:30:00+01:00"},
		{"new york spring forward", "America/New_York", Daily, 0, "2024-03-10T12:00:00-04:00", 0, "2024-03-10T00:00:00-05:00", "2024-03-11T00:00:00-04:00"},
		{"new york fall back", "America/New_York", Daily, 0, "2024-11-03T01:30:00-05:00", 0, "2024-11-03T00:00:00-04:00", "2024-11-04T00:00:00-05:00"},
		{"new york skipped 02:15", "America/New_York", Daily, 2*hour + 15*60*usPerSec, "2024-03-10T03:00:00-04:00", 0, "2024-03-10T03:00:00-04:00", "2024-03-11T02:15:00-04:00"},
		{"lord howe: 30-minute change, 23.5 hours", "Australia/Lord_Howe", Daily, 0, "2024-10-06T12:00:00+11:00", 0, "2024-10-06T00:00:00+10:30", "2024-10-07T00:00:00+11:00"},
		{"lord howe skipped 02:15", "Australia/Lord_Howe", Daily, 2*hour + 15*60*usPerSec, "2024-10-06T02:30:00+11:00", 0, "2024-10-06T02:30:00+11:00", "2024-10-07T02:15:00+11:00"},
		{"lord howe repeated 01:45", "Australia/Lord_Howe", Daily, hour + 45*60*usPerSec, "2024-04-07T01:50:00+10:30", 0, "2024-04-07T01:45:00+11:00", "2024-04-08T01:45:00+10:30"},
		{"samoa skipped 2011-12-30 whole", "Pacific/Apia", Daily, 0, "2011-12-31T00:00:00+14:00", 0, "2011-12-31T00:00:00+14:00", "2012-01-01T00:00:00+14:00"},
		{"samoa's last day before the skip", "Pacific/Apia", Daily, 0, "2011-12-31T00:00:00+14:00", -1, "2011-12-29T00:00:00-10:00", "2011-12-31T00:00:00+14:00"},
		{"week across a year end", "UTC", Weekly, 0, "2025-01-01T08:00:00Z", 0, "2024-12-30T00:00:00Z", "2025-01-06T00:00:00Z"},
		{"week starting Sunday across a year end", "UTC", Weekly, 6 * day, "2025-01-01T08:00:00Z", 0, "2024-12-29T00:00:00Z", "2025-01-05T00:00:00Z"},
		{"week in berlin across spring forward", "Europe/Berlin", Weekly, 0, "2024-03-31T12:00:00+02:00", 0, "2024-03-25T00:00:00+01:00", "2024-04-01T00:00:00+02:00"},
		{"month", "Europe/Berlin", Monthly, 0, "2024-03-31T12:00:00+02:00", 0, "2024-03-01T00:00:00+01:00", "2024-04-01T00:00:00+02:00"},
		{"month, last µs", "Europe/Berlin", Monthly, 0, "2024-04-01T00:00:00+02:00", -1, "2024-03-01T00:00:00+01:00", "2024-04-01T00:00:00+02:00"},
		{"billing day 15", "Europe/Berlin", Monthly, 14 * day, "2024-03-15T00:00:00+01:00", 0, "2024-03-15T00:00:00+01:00", "2024-04-15T00:00:00+02:00"},
		{"billing day 15, before it", "Europe/Berlin", Monthly, 14 * day, "2024-03-15T00:00:00+01:00", -1, "2024-02-15T00:00:00+01:00", "2024-03-15T00:00:00+01:00"},
		{"day 31 clamps to 29 February", "UTC", Monthly, 30 * day, "2024-02-29T00:00:00Z", 0, "2024-02-29T00:00:00Z", "2024-03-31T00:00:00Z"},
		{"day 31 clamps to 29 February, before", "UTC", Monthly, 30 * day, "2024-02-29T00:00:00Z", -1, "2024-01-31T00:00:00Z", "2024-02-29T00:00:00Z"},
		{"day 31 clamps to 28 February", "UTC", Monthly, 30 * day, "2023-03-01T00:00:00Z", 0, "2023-02-28T00:00:00Z", "2023-03-31T00:00:00Z"},
		{"day 31 clamps to 30 April", "UTC", Monthly, 30*day + 9*hour, "2024-05-01T00:00:00Z", 0, "2024-04-30T09:00:00Z", "2024-05-31T09:00:00Z"},
		{"day 30 at 09:00 clamps in February", "America/New_York", Monthly, 29*day + 9*hour, "2024-03-10T12:00:00-04:00", 0, "2024-02-29T09:00:00-05:00", "2024-03-30T09:00:00-04:00"},
		{"year", "Europe/Berlin", Yearly, 0, "2025-01-01T00:00:00+01:00", -1, "2024-01-01T00:00:00+01:00", "2025-01-01T00:00:00+01:00"},
		{"year from day 60: 29 February in a leap year", "UTC", Yearly, 59 * day, "2024-06-01T00:00:00Z", 0, "2024-02-29T00:00:00Z", "2025-03-01T00:00:00Z"},
		{"day 365 is 30 December in a leap year", "UTC", Yearly, 364 * day, "2024-12-30T00:00:00Z", -1, "2023-12-31T00:00:00Z", "2024-12-30T00:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cal := Calendar{Unit: c.unit, Loc: mustZone(t, c.zone), Days: c.offset / day, Clock: c.offset % day}
			s, e := cal.Window(us(t, c.now) + c.delta)
			if want := us(t, c.start); s != want {
				t.Errorf("start %v, want %v", time.UnixMicro(s).In(cal.Loc), time.UnixMicro(want).In(cal.Loc))
			}
			if want := us(t, c.end); e != want {
				t.Errorf("end %v, want %v", time.UnixMicro(e).In(cal.Loc), time.UnixMicro(want).In(cal.Loc))
			}
		})
	}
}

// naiveBoundary is the first whole second at which loc's clock reads the
// date y-m-d (normalized by time.Date) at clock µs or later, found by
// reading the clock every minute, then every second.
func naiveBoundary(loc *time.Location, y int, m time.Month, d int, clock int64) int64 {
	wall := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Add(time.Duration(clock) * time.Microsecond)
	reads := func(t int64) bool {
		l := time.Unix(t, 0).In(loc)
		return !time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), 0, time.UTC).Before(wall)
	}
	t := wall.Unix() - 15*3600 // no zone is more than 14 hours ahead of UTC
	for !reads(t + 60) {
		t += 60
	}
	for !reads(t) {
		t++
	}
	return t * usPerSec
}

// naiveWindow finds the window holding now among the boundaries of the
// periods around now's local date, computed with time.Date.
func naiveWindow(c Calendar, now int64) (int64, int64) {
	y, m, d := time.UnixMicro(now).In(c.Loc).Date()
	var bs []int64
	for i := -2; i <= 2; i++ {
		switch c.Unit {
		case Daily:
			bs = append(bs, naiveBoundary(c.Loc, y, m, d+i, c.Clock))
		case Weekly:
			wd := int(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Weekday()+6) % 7 // Monday is 0
			bs = append(bs, naiveBoundary(c.Loc, y, m, d-wd+7*i+int(c.Days), c.Clock))
		case Monthly:
			last := time.Date(y, m+time.Month(i)+1, 0, 0, 0, 0, 0, time.UTC).Day()
			bs = append(bs, naiveBoundary(c.Loc, y, m+time.Month(i), min(1+int(c.Days), last), c.Clock))
		case Yearly:
			bs = append(bs, naiveBoundary(c.Loc, y+i, time.January, 1+int(c.Days), c.Clock))
		}
	}
	for i := 0; i+1 < len(bs); i++ {
		if bs[i] <= now && now < bs[i+1] {
			return bs[i], bs[i+1]
		}
	}
	panic("now outside the boundaries around it")
}

// TestCalendarWindowMatchesNaive compares Window with naiveWindow at random
// instants and at each side of the boundaries it finds, in zones with odd
// changes: 30 minutes (Lord Howe), 45-minute offsets (Chatham), a skipped
// day (Apia), two hours (Troll), none (UTC, Kolkata).
func TestCalendarWindowMatchesNaive(t *testing.T) {
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe",
		"Pacific/Chatham", "Pacific/Apia", "Antarctica/Troll", "Asia/Kolkata", "America/Santiago"}
	maxDays := map[Unit]int64{Daily: 1, Weekly: 7, Monthly: 31, Yearly: 365}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	lo, hi := us(t, "1995-01-01T00:00:00Z"), us(t, "2045-01-01T00:00:00Z")
	n := 100
	if testing.Short() {
		n = 20
	}
	for range n {
		c := Calendar{Unit: Unit(1 + rng.IntN(4)), Loc: mustZone(t, zones[rng.IntN(len(zones))])}
		c.Days = rng.Int64N(maxDays[c.Unit])
		if rng.IntN(2) == 0 {
			c.Clock = rng.Int64N(24*60) * 60 * usPerSec // a whole minute
		}
		now := lo + rng.Int64N(hi-lo)
		if c.Unit == Yearly {
			now = us(t, "2011-06-01T00:00:00Z") + rng.Int64N(3*365*day) // around Apia's skipped day
		}
		ws, we := naiveWindow(c, now)
		for _, at := range []int64{now, ws - 1, ws, we - 1, we} {
			s, e := c.Window(at)
			ns, ne := naiveWindow(c, at)
			if s != ns || e != ne {
				t.Fatalf("seed %d: %+v at %v: [%v, %v), naive [%v, %v)", seed, c, time.UnixMicro(at).In(c.Loc),
					time.UnixMicro(s).In(c.Loc), time.UnixMicro(e).In(c.Loc), time.UnixMicro(ns).In(c.Loc), time.UnixMicro(ne).In(c.Loc))
			}
		}
	}
}

// TestFixedFollowsCalendar: a monthly window in Berlin admits Rate until
// the last µs of March, says so to the µs, and starts fresh on 1 April.
// A clock that goes back into March keeps counting in April.
func TestFixedFollowsCalendar(t *testing.T) {
	l := &Limit{Rate: 2, Cal: Calendar{Unit: Monthly, Loc: mustZone(t, "Europe/Berlin")}}
	april := us(t, "2024-04-01T00:00:00+02:00")
	may := us(t, "2024-05-01T00:00:00+02:00")
	var w Window
	var r Result
	for i := range 2 {
		if w, r = w.Fixed(l, april-10*day, 1); !r.Allowed || r.Remaining != int64(1-i) {
			t.Fatalf("request %d in March: %+v", i, r)
		}
	}
	if w, r = w.Fixed(l, april-1, 1); r.Allowed || r.RetryAfter != 1 || r.ResetAfter != 1 {
		t.Fatalf("last µs of March: %+v, want refused for 1µs", r)
	}
	if w, r = w.Fixed(l, april, 1); !r.Allowed || r.Remaining != 1 || r.ResetAfter != may-april {
		t.Fatalf("1 April: %+v, want a fresh window until 1 May", r)
	}
	w = w.Refund(l, 1, april-1) // counted in March: nothing to give back
	if w, r = w.Fixed(l, april-day, 1); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("clock back in March: %+v, want the April window's last request", r)
	}
	if _, r = w.Fixed(l, april+1, 1); r.Allowed || r.RetryAfter != may-april-1 {
		t.Fatalf("April, full: %+v, want refused until 1 May", r)
	}
}

// TestParamsCalendar: a limit's offset splits into whole days and clock.
func TestParamsCalendar(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	p := Params("k", ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 3, Calendar: ratekeeper.Monthly,
		Location: berlin, Offset: 14*24*time.Hour + 9*time.Hour + time.Microsecond})
	want := Calendar{Unit: Monthly, Loc: berlin, Days: 14, Clock: 9*hour + 1}
	if p.Cal != want || p.Period != 0 || p.Offset != 0 {
		t.Fatalf("params %+v, want calendar %+v and no period", p, want)
	}
	if p := Params("k", ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 3, Period: time.Minute}); p.Cal.Unit != NoCalendar {
		t.Fatalf("epoch limit got a calendar: %+v", p.Cal)
	}
}

// BenchmarkFixed compares a decision in an epoch window, in a calendar
// window, and the calendar arithmetic a new key or a new period costs.
func BenchmarkFixed(b *testing.B) {
	berlin := mustZone(b, "Europe/Berlin")
	now := us(b, "2024-03-15T12:00:00Z")
	for _, c := range []struct {
		name string
		l    Limit
	}{
		{"epoch", Limit{Rate: 1 << 40, Period: 30 * day}},
		{"monthly", Limit{Rate: 1 << 40, Cal: Calendar{Unit: Monthly, Loc: berlin, Days: 14}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var w Window
			for i := range b.N {
				w, _ = w.Fixed(&c.l, now+int64(i), 1)
			}
		})
		b.Run(c.name+"/new-key", func(b *testing.B) {
			for i := range b.N {
				Window{}.Fixed(&c.l, now+int64(i), 1)
			}
		})
	}
}

// FuzzCalendarWindow: the window holds now, is its own window from its
// first µs to its last, the next one starts where it ends, and it is no
// longer than its unit can be (a year of 366 days and a changed offset).
func FuzzCalendarWindow(f *testing.F) {
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia", "Antarctica/Troll"}
	f.Add(int64(1711846800000000), uint8(1), uint8(1), int64(0), int64(0))
	f.Add(int64(1325239200000000), uint8(4), uint8(1), int64(30), int64(9*hour))
	f.Fuzz(func(t *testing.T, now int64, zone, unit uint8, days, clock int64) {
		maxDays := []int64{1, 7, 31, 365}
		u := Unit(1 + unit%4)
		c := Calendar{Unit: u, Loc: mustZone(t, zones[int(zone)%len(zones)])}
		c.Days = max(0, days) % maxDays[u-1]
		c.Clock = max(0, clock) % day
		now = max(-1<<50, min(now, 1<<51)) // 1934 to 2041
		s, e := c.Window(now)
		if s > now || now >= e || e-s > 367*day {
			t.Fatalf("%+v at %d: window [%d, %d)", c, now, s, e)
		}
		for _, at := range []int64{s, e - 1} {
			if s2, e2 := c.Window(at); s2 != s || e2 != e {
				t.Fatalf("%+v at %d: [%d, %d), but at %d [%d, %d)", c, now, s, e, at, s2, e2)
			}
		}
		if s2, _ := c.Window(e); s2 != e {
			t.Fatalf("%+v: the window after [%d, %d) starts at %d", c, s, e, s2)
		}
	})
}
