package algo

import (
	"time"

	"github.com/ratekeeper/ratekeeper"
)

// Params converts a validated limit, for one key, to the algorithms' units.
// Every store calls it, so that all of them place a staggered key's windows
// at the same offset.
func Params(key string, l ratekeeper.Limit) Limit {
	p := int64(l.Period / time.Microsecond)
	a := Limit{Rate: int64(l.Rate), Period: p, Burst: int64(l.Capacity()), LogRejected: l.LogRejected}
	if l.Algorithm == ratekeeper.TokenBucket || l.Algorithm == ratekeeper.LeakyBucket {
		a = a.prepared()
	}
	if l.Stagger && (l.Algorithm == ratekeeper.FixedWindow || l.Algorithm == ratekeeper.SlidingWindow) {
		a.Offset = Offset(key, p)
	}
	if l.Calendar != "" {
		a.Cal = calendar(l)
	}
	return a
}

// CalendarPeriod is the period of calendar limit l that holds t:
// [start, end). For a limit that does not follow the calendar, ok is false.
func CalendarPeriod(l ratekeeper.Limit, t time.Time) (start, end time.Time, ok bool) {
	if l.Calendar == "" {
		return time.Time{}, time.Time{}, false
	}
	c := calendar(l)
	s, e := c.Window(t.UnixMicro())
	return time.UnixMicro(s).In(c.location()), time.UnixMicro(e).In(c.location()), true
}

// calendar converts a limit's calendar fields.
func calendar(l ratekeeper.Limit) Calendar {
	off := int64(l.Offset / time.Microsecond)
	c := Calendar{Unit: Daily, Loc: l.Location, Days: off / usPerDay, Clock: off % usPerDay}
	switch l.Calendar {
	case ratekeeper.Weekly:
		c.Unit = Weekly
	case ratekeeper.Monthly:
		c.Unit = Monthly
	case ratekeeper.Yearly:
		c.Unit = Yearly
	}
	return c
}

// Decision converts a Result to the Decision callers see.
func Decision(r Result) ratekeeper.Decision {
	return ratekeeper.Decision{
		Allowed:    r.Allowed,
		Limit:      int(r.Limit),
		Remaining:  int(r.Remaining),
		RetryAfter: time.Duration(r.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(r.ResetAfter) * time.Microsecond,
		Delay:      time.Duration(r.Delay) * time.Microsecond,
		At:         time.UnixMicro(r.At),
	}
}

// LimitKey is a limit as a map key that compares it by value: its time
// zone by name, nil as UTC. Limits loaded from the same zone twice hold
// two *time.Location and are still one key.
type LimitKey struct {
	limit ratekeeper.Limit // without its Location
	zone  string
}

// KeyOf is l's LimitKey.
func KeyOf(l ratekeeper.Limit) LimitKey {
	zone := "UTC"
	if l.Location != nil {
		zone = l.Location.String()
	}
	l.Location = nil
	return LimitKey{limit: l, zone: zone}
}
