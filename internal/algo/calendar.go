package algo

import (
	"math"
	"time"
)

// Unit is a calendar unit in the algorithms' terms. The zero Unit means
// windows aligned to the epoch.
type Unit int8

// The calendar units.
const (
	NoCalendar Unit = iota
	Daily
	Weekly
	Monthly
	Yearly
)

const (
	usPerSec = int64(time.Second / time.Microsecond)
	usPerDay = 86400 * usPerSec
	hourUS   = 3600 * usPerSec
)

// Calendar places fixed windows on the calendar of a time zone.
//
// A period's boundary is a local date and a wall-clock time: its unit's
// first date plus Days (in a month shorter than that, its last date), at
// Clock µs after midnight. The boundary is the first instant at which the
// local clock reads that date and time or later. So a time skipped by a
// daylight saving change falls on the instant the change happens, and a
// time that occurs twice falls on its first occurrence.
type Calendar struct {
	Unit  Unit
	Loc   *time.Location // nil is UTC
	Days  int64          // whole days of the offset: less than the unit
	Clock int64          // µs of wall-clock time, in [0, one day)
}

// Window is the calendar window holding now: [start, end) in µs.
func (c *Calendar) Window(now int64) (start, end int64) {
	y, m, d := time.UnixMicro(now).In(c.location()).Date()
	k := c.index(y, m, d)
	start = c.boundary(k)
	for now < start {
		k--
		start = c.boundary(k)
	}
	end = c.boundary(k + 1)
	for end <= now {
		k++
		start, end = end, c.boundary(k+1)
	}
	return start, end
}

func (c *Calendar) location() *time.Location {
	if c.Loc == nil {
		return time.UTC
	}
	return c.Loc
}

// index numbers the period whose unit holds the local date y-m-d. Daily
// periods are numbered by their date, weekly ones by their Monday's date
// (counted in days from 1970-01-01, a Thursday), months from year 0 and
// years by their number. Each period's successor is index+1.
func (c *Calendar) index(y int, m time.Month, d int) int64 {
	switch c.Unit {
	case Weekly:
		return floorDiv(dayNumber(y, m, d)+3, 7)
	case Monthly:
		return int64(y)*12 + int64(m-1)
	case Yearly:
		return int64(y)
	}
	return dayNumber(y, m, d)
}

// boundary is the instant period k starts.
func (c *Calendar) boundary(k int64) int64 {
	var day int64
	switch c.Unit {
	case Weekly:
		day = k*7 - 3 + c.Days
	case Monthly:
		y, m := int(floorDiv(k, 12)), time.Month(k-floorDiv(k, 12)*12+1)
		last := int64(time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day())
		day = dayNumber(y, m, 1) + min(c.Days, last-1)
	case Yearly:
		day = dayNumber(int(k), time.January, 1) + c.Days
	default:
		day = k
	}
	return firstAtLeast(c.location(), day*usPerDay+c.Clock)
}

// dayNumber is the date y-m-d counted in days from 1970-01-01.
func dayNumber(y int, m time.Month, d int) int64 {
	return floorDiv(time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix(), 86400)
}

// firstAtLeast is the first instant at which the local clock of loc reads
// wall or later, wall being a local date and time in µs from 1970-01-01
// 00:00. It assumes at most one change of loc's offset within 26 hours of
// wall (no zone is further from UTC), so that the offsets there are those
// 26 hours before and after.
func firstAtLeast(loc *time.Location, wall int64) int64 {
	if loc == time.UTC {
		return wall
	}
	early, late := offset(loc, wall-26*hourUS), offset(loc, wall+26*hourUS)
	if early == late {
		return wall - early
	}
	best := int64(math.MaxInt64)
	for _, o := range [2]int64{early, late} {
		if t := wall - o; offset(loc, t) == o {
			best = min(best, t) // the clock reads wall at t: a repeated time's first
		}
	}
	if best != math.MaxInt64 {
		return best
	}
	return change(loc, wall-max(early, late), wall-min(early, late), late)
}

// offset is loc's offset from UTC at instant t, in µs.
func offset(loc *time.Location, t int64) int64 {
	_, off := time.UnixMicro(t).In(loc).Zone()
	return int64(off) * usPerSec
}

// change is the first instant in (lo, hi] whose offset is to, where the
// offset changes once: the time a skipped wall-clock time falls on.
func change(loc *time.Location, lo, hi, to int64) int64 {
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if offset(loc, mid) == to {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}
