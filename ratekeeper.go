package ratekeeper

import (
	"errors"
	"fmt"
	"time"
)

// Algorithm names one of the five rate limiting algorithms. Its string value
// is what configuration files and metrics use.
type Algorithm string

// The five algorithms. docs/algorithms.md says when to choose which.
const (
	// TokenBucket holds up to Burst tokens, refilled continuously at Rate per
	// Period; a request takes n tokens or is refused. It starts full.
	TokenBucket Algorithm = "token_bucket"
	// LeakyBucket drains at Rate per Period. Allow meters it (a request
	// passes iff the level plus n is at most Burst); Reserve shapes with it (a
	// FIFO queue of at most Burst waiting requests, each given the next slot).
	LeakyBucket Algorithm = "leaky_bucket"
	// FixedWindow counts requests in windows of Period aligned to the Unix
	// epoch and admits at most Rate per window.
	FixedWindow Algorithm = "fixed_window"
	// SlidingLog logs the timestamps of admitted requests and admits at most
	// Rate in any window [t-Period, t).
	SlidingLog Algorithm = "sliding_log"
	// SlidingWindow weighs the previous fixed window's count by how much of
	// it still overlaps the sliding window: floor(prev·(1-f)) + cur.
	SlidingWindow Algorithm = "sliding_window"
)

// Algorithms lists every algorithm, in the order docs present them.
var Algorithms = []Algorithm{TokenBucket, LeakyBucket, FixedWindow, SlidingLog, SlidingWindow}

// Valid reports whether a is one of the five algorithms.
func (a Algorithm) Valid() bool {
	switch a {
	case TokenBucket, LeakyBucket, FixedWindow, SlidingLog, SlidingWindow:
		return true
	}
	return false
}

// maxUnits bounds the products the algorithms compute, so that every store,
// Redis's Lua doubles included, counts exactly: 2^53.
const maxUnits = 1 << 53

// maxLogEntries bounds a sliding log's length (8 bytes an entry, per key).
const maxLogEntries = 1 << 24

// Limit says how many requests may pass per period, and how.
//
// Rate requests per Period; Burst is the buckets' capacity (zero means Rate)
// and is ignored by the window algorithms, whose limit is Rate per window of
// Period. A Limit is a plain value: compare it with ==, copy it freely.
type Limit struct {
	Algorithm Algorithm
	Rate      int
	Period    time.Duration
	Burst     int

	// Stagger offsets each key's windows (fixed and sliding window counters)
	// by a hash of the key, so that clients do not all reset at the same
	// instant. Off by default: windows are aligned to the Unix epoch.
	Stagger bool
	// LogRejected makes the sliding log record refused requests too, as a
	// penalty: a client that keeps asking while refused stays refused. Off by
	// default, which admits exactly Rate per window.
	LogRejected bool

	// Calendar makes a fixed window follow the calendar of Location
	// instead of the epoch. Period must then be zero. The zero Calendar
	// keeps epoch windows.
	Calendar Calendar
	// Location is the time zone of a calendar window. Nil is UTC.
	Location *time.Location
	// Offset moves every calendar boundary later: its whole days as dates,
	// the rest as wall-clock time. It is less than the unit: a day, 7 days,
	// 31 days (a month's boundary falls on its last day if the month is
	// shorter) or 365 days.
	Offset time.Duration
}

// Calendar names a calendar unit that fixed windows may follow. Its string
// value is what configuration files use.
type Calendar string

// The calendar units. The zero Calendar means windows aligned to the epoch.
const (
	// Daily windows are local dates: 23 or 25 hours across a daylight
	// saving change.
	Daily Calendar = "daily"
	// Weekly windows start on Monday.
	Weekly Calendar = "weekly"
	// Monthly windows are calendar months.
	Monthly Calendar = "monthly"
	// Yearly windows are calendar years.
	Yearly Calendar = "yearly"
)

// MaxOffset is the least offset that c refuses: its unit's length in days.
// It is zero for an unknown unit.
func (c Calendar) MaxOffset() time.Duration {
	const day = 24 * time.Hour
	switch c {
	case Daily:
		return day
	case Weekly:
		return 7 * day
	case Monthly:
		return 31 * day
	case Yearly:
		return 365 * day
	}
	return 0
}

// Capacity is the most that can ever pass at one instant: Burst (or Rate when
// Burst is zero) for the buckets, Rate for the window algorithms. A cost above
// it is an error.
func (l Limit) Capacity() int {
	if (l.Algorithm == TokenBucket || l.Algorithm == LeakyBucket) && l.Burst > 0 {
		return l.Burst
	}
	return l.Rate
}

// Validate reports what is wrong with l, or nil.
func (l Limit) Validate() error {
	if !l.Algorithm.Valid() {
		if l.Algorithm == "" {
			return errors.New("limit: algorithm is missing (token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window)")
		}
		return fmt.Errorf("limit: unknown algorithm %q (token_bucket, leaky_bucket, fixed_window, sliding_log or sliding_window)", string(l.Algorithm))
	}
	if l.Rate <= 0 {
		return fmt.Errorf("limit: rate must be positive, not %d", l.Rate)
	}
	if l.Calendar != "" || l.Location != nil || l.Offset != 0 {
		return l.validateCalendar()
	}
	if l.Period <= 0 {
		return fmt.Errorf("limit: period must be positive, not %v", l.Period)
	}
	if l.Period%time.Microsecond != 0 {
		return fmt.Errorf("limit: period %v is not a whole number of microseconds", l.Period)
	}
	if l.Burst < 0 {
		return fmt.Errorf("limit: burst must not be negative, not %d", l.Burst)
	}
	p := int64(l.Period / time.Microsecond)
	switch l.Algorithm {
	case TokenBucket, LeakyBucket:
		c := int64(l.Capacity())
		if int64(l.Rate) > p {
			return fmt.Errorf("limit: rate %d per %v is more than one request per microsecond", l.Rate, l.Period)
		}
		if c > maxUnits/p {
			return fmt.Errorf("limit: burst %d × period %v is too large to count exactly (at most 2^53 request·µs); use a shorter period or a smaller burst", c, l.Period)
		}
	case SlidingWindow:
		if int64(l.Rate) >= 1<<31-1 || int64(l.Rate)+1 > maxUnits/p {
			return fmt.Errorf("limit: rate %d × period %v is too large for the sliding window counter (at most 2^53 request·µs); use a shorter period or fixed_window", l.Rate, l.Period)
		}
	case FixedWindow:
		if int64(l.Rate) > maxUnits || p > maxUnits {
			return fmt.Errorf("limit: rate %d per %v is too large", l.Rate, l.Period)
		}
	case SlidingLog:
		if l.Rate > maxLogEntries {
			return fmt.Errorf("limit: a sliding log of %d entries per key is too large (at most %d); use sliding_window", l.Rate, maxLogEntries)
		}
	}
	return nil
}

// validateCalendar checks a limit that sets Calendar, Location or Offset.
func (l Limit) validateCalendar() error {
	switch {
	case l.Calendar == "":
		return errors.New("limit: time zone and offset need a calendar (daily, weekly, monthly or yearly)")
	case l.Calendar.MaxOffset() == 0:
		return fmt.Errorf("limit: unknown calendar %q (daily, weekly, monthly or yearly)", string(l.Calendar))
	case l.Algorithm != FixedWindow:
		return fmt.Errorf("limit: %s cannot follow the calendar; use fixed_window", l.Algorithm)
	case l.Period != 0:
		return fmt.Errorf("limit: a %s calendar window has no period (remove period %v)", l.Calendar, l.Period)
	case l.Stagger:
		return errors.New("limit: a calendar window cannot be staggered; use offset")
	case l.Offset < 0 || l.Offset >= l.Calendar.MaxOffset():
		return fmt.Errorf("limit: offset %v must be at least 0 and less than %v for a %s calendar", l.Offset, l.Calendar.MaxOffset(), l.Calendar)
	case l.Offset%time.Microsecond != 0:
		return fmt.Errorf("limit: offset %v is not a whole number of microseconds", l.Offset)
	case int64(l.Rate) > maxUnits:
		return fmt.Errorf("limit: rate %d is too large", l.Rate)
	}
	return nil
}

// String renders l as people write it: "token_bucket 10/1s burst 20".
func (l Limit) String() string {
	s := fmt.Sprintf("%s %d/%v", l.Algorithm, l.Rate, l.Period)
	if l.Calendar != "" {
		s = fmt.Sprintf("%s %d %s", l.Algorithm, l.Rate, l.Calendar)
		if l.Offset != 0 {
			s += fmt.Sprintf(" offset %v", l.Offset)
		}
		if l.Location != nil {
			s += " in " + l.Location.String()
		}
	}
	if l.Burst > 0 && (l.Algorithm == TokenBucket || l.Algorithm == LeakyBucket) {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}
