package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// ErrClockSkew is the error of a calendar window's call when the Redis
// server's clock and this host's are a calendar period or more apart. The
// store then decides nothing rather than guess the window.
var ErrClockSkew = errors.New("redisstore: the Redis server's clock is a calendar period or more from this host's")

// calSkewTag starts the script error that ErrClockSkew stands for
// (prelude.lua's cal_end).
const calSkewTag = "RKCALSKEW"

// skewed is err, wrapping ErrClockSkew if the script reported it.
func skewed(err error) error {
	if err != nil && strings.Contains(err.Error(), calSkewTag) {
		return fmt.Errorf("%w (%v)", ErrClockSkew, err)
	}
	return err
}

// calArgs caches a calendar limit's ARGV[2] for the window last asked.
type calArgs struct{ last atomic.Pointer[calArg] }

// calArg is ARGV[2] of a calendar limit for the instants of [start, end),
// a window of it.
type calArg struct {
	start, end int64
	arg        limitArg
}

// calendarArg is ARGV[2] for calendar limit l around the instant at (µs):
// rate, period 0, the least TTL and 0, then four consecutive boundaries
// b0 < b1 <= at < b2 < b3, packed '<dddddddd'. The script picks among them
// the window holding the instant it decides at, which is the server's
// clock unless the request carries its own.
func (s *Store) calendarArg(l ratekeeper.Limit, at int64) *limitArg {
	k := algo.KeyOf(l)
	v, ok := s.limits.Load(k)
	if !ok {
		if s.nlimits.Add(1) > maxCachedLimits {
			return &newCalArg(l, at, s.leastMS).arg
		}
		v, _ = s.limits.LoadOrStore(k, &calArgs{})
	}
	cache := v.(*calArgs)
	if c := cache.last.Load(); c != nil && c.start <= at && at < c.end {
		return &c.arg
	}
	c := newCalArg(l, at, s.leastMS)
	cache.last.Store(c)
	return &c.arg
}

// newCalArg makes calendarArg's argument.
func newCalArg(l ratekeeper.Limit, at, leastMS int64) *calArg {
	cal := algo.Params("", l).Cal
	start, end := cal.Window(at)
	b0, _ := cal.Window(start - 1)
	_, b3 := cal.Window(end)
	var b [64]byte
	for i, v := range [8]int64{int64(l.Rate), 0, leastMS, 0, b0, start, end, b3} {
		putFloat(b[8*i:], float64(v))
	}
	c := &calArg{start: start, end: end, arg: limitArg{packed: string(b[:])}}
	c.arg.boxed = c.arg.packed
	return c
}

// calAnchor is the instant around which a call of op on req sends its
// calendar boundaries: a refund's instant x8, else the request's own
// instant or this host's clock.
func calAnchor(req ratekeeper.Request, op byte, x8 int64) int64 {
	switch {
	case op == 'r' || op == 'c':
		return x8
	case !req.Now.IsZero():
		return req.Now.UnixMicro()
	}
	return time.Now().UnixMicro()
}
