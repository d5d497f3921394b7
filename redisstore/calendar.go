package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// ErrClockSkew is the error of a calendar window's call whose boundaries,
// sent again around the instant the script reported, still missed it: the
// Redis server's clock jumped a calendar period between two calls. A
// host clock a period or more from the server's is no error: the store
// calls again with the server's boundaries (ClockSkews).
var ErrClockSkew = errors.New("redisstore: the Redis server's clock left the calendar boundaries sent around it")

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

// skewInstant is the instant a skew error reports (prelude.lua's cal_end):
// the one its script decided at, which is the server's clock unless the
// call carried its own. ok is false for any other error.
func skewInstant(err error) (at int64, ok bool) {
	if err == nil {
		return 0, false
	}
	const tag = calSkewTag + " instant "
	msg := err.Error()
	i := strings.Index(msg, tag)
	if i < 0 {
		return 0, false
	}
	rest := msg[i+len(tag):]
	if j := strings.IndexByte(rest, ' '); j >= 0 {
		rest = rest[:j]
	}
	at, perr := strconv.ParseInt(rest, 10, 64)
	return at, perr == nil
}

// skewLogEvery is how often a host clock off the server's is logged.
const skewLogEvery = time.Minute

// unskew is, if err is a skew error of a call on calendar limit l, l's
// boundaries around the instant err reports, for a second call; else nil.
func (s *Store) unskew(ctx context.Context, l ratekeeper.Limit, err error) *limitArg {
	at, ok := skewInstant(err)
	if !ok || l.Calendar == "" {
		return nil
	}
	s.noteSkew(ctx, at)
	return &newCalArg(l, at, s.leastMS).arg // not cached: the cache follows this host's clock
}

// noteSkew counts a call whose script reported the instant at outside the
// boundaries sent, and logs it at most once per skewLogEvery.
func (s *Store) noteSkew(ctx context.Context, at int64) {
	n := s.skews.Add(1)
	now := s.hostNow()
	last := s.skewLogged.Load()
	if s.logger == nil || now.UnixNano()-last < int64(skewLogEvery) || !s.skewLogged.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	s.logger.ErrorContext(ctx, "redisstore: this host's clock is a calendar period or more from the Redis server's; "+
		"calendar windows follow the server's clock, at the cost of a second call each",
		"host", now.UTC(), "server", time.UnixMicro(at).UTC(), "skews", n)
}

// ClockSkews is how many calendar calls found this host's clock a
// calendar period or more from the Redis server's, and were made again
// with boundaries around the server's clock.
func (s *Store) ClockSkews() uint64 { return s.skews.Load() }

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
func (s *Store) calAnchor(req ratekeeper.Request, op byte, x8 int64) int64 {
	switch {
	case op == 'r' || op == 'c':
		return x8
	case !req.Now.IsZero():
		return req.Now.UnixMicro()
	}
	return s.hostNow().UnixMicro()
}

// hostNow is this host's clock, as calendar boundaries are sent around it.
func (s *Store) hostNow() time.Time {
	if s.clock != nil {
		return s.clock() // a test's host clock, off the server's
	}
	return time.Now()
}
