package redisstore

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// TestCalendarClockSkew: boundaries sent for a day that does not hold the
// server's clock decide nothing: the script's call fails with the skew
// error, alone or in one run of many.lua, where the call beside it still
// decides. The store then calls again (TestCalendarHostClockOff).
func TestCalendarClockSkew(t *testing.T) {
	s := openURL(t, redistest.Server(t))
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Calendar: ratekeeper.Daily}
	key := fmt.Sprintf("skew-%d", time.Now().UnixNano())
	skewedJob := func(hours time.Duration) job {
		j := s.job('m', ratekeeper.Request{Key: key, Limit: l, N: 1}, 0)
		j.limit = &newCalArg(l, time.Now().Add(hours).UnixMicro(), 0).arg
		return j
	}
	for _, h := range []time.Duration{-72 * time.Hour, 72 * time.Hour} {
		j := skewedJob(h)
		_, err := j.run(t.Context(), s.client)
		t.Log(skewed(err))
		if err = skewed(err); !errors.Is(err, ErrClockSkew) || !strings.Contains(err.Error(), "outside the calendar boundaries") {
			t.Fatalf("client %v off: %v, want ErrClockSkew", h, err)
		}
	}
	fine := s.job('m', ratekeeper.Request{Key: key + "-fine", Limit: l, N: 1}, 0)
	replies, errs := s.pipe.runAll(t.Context(), []job{skewedJob(-72 * time.Hour), fine})
	if !errors.Is(skewed(errs[0]), ErrClockSkew) {
		t.Fatalf("in many.lua: %v, want ErrClockSkew", errs[0])
	}
	if errs[1] != nil || len(replies[1]) != decisionSize || float(replies[1], 0) != 1 {
		t.Fatalf("the call beside it: %q %v, want a decision", replies[1], errs[1])
	}
	if n, err := s.client.Exists(t.Context(), s.Key(key, l.Algorithm)).Result(); err != nil || n != 0 {
		t.Fatalf("the skewed key exists (%d, %v): a skewed call wrote", n, err)
	}
}

// TestCalendarSkewWithinSpan: a client a day behind or ahead of the server
// still sends the server's day among its boundaries, and the decision is
// the server's: its reset is at the next UTC midnight after its TIME.
func TestCalendarSkewWithinSpan(t *testing.T) {
	s := openURL(t, redistest.Server(t))
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 2, Calendar: ratekeeper.Daily}
	key := fmt.Sprintf("skew-span-%d", time.Now().UnixNano())
	for i, h := range []time.Duration{-24 * time.Hour, 24 * time.Hour} {
		req := ratekeeper.Request{Key: key, Limit: l, N: 1}
		j := s.job('m', req, 0)
		j.limit = &newCalArg(l, time.Now().Add(h).UnixMicro(), 0).arg
		v, err := j.run(t.Context(), s.client)
		if err != nil || len(v) != decisionSize {
			t.Fatalf("client %v off: %q %v", h, v, err)
		}
		d := decision(req, v)
		y, m, day := d.At.UTC().Date()
		next := time.Date(y, m, day+1, 0, 0, 0, 0, time.UTC)
		if !d.Allowed || d.Remaining != 1-i || d.ResetAfter != next.Sub(d.At) {
			t.Fatalf("client %v off: %+v, want remaining %d, reset in %v", h, d, 1-i, next.Sub(d.At))
		}
	}
}

// TestCalendarZoneDataDisagree: two instances whose zone data put a day's
// boundary an hour apart (America/Asuncion across tzdata 2024b: 03:00Z and
// 04:00Z) share one key. The stored window is authoritative: neither
// starts a new one before it ends, so a day admits the rate once, whatever
// order the instances take requests in. Each op is a decision (many.lua
// and single.lua run the same function) or a sync add.
func TestCalendarZoneDataDisagree(t *testing.T) {
	s := openURL(t, redistest.Server(t))
	const rate = 10
	zoneA := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: rate, Calendar: ratekeeper.Daily,
		Location: time.FixedZone("A", -3*3600)}
	zoneB := zoneA
	zoneB.Location = time.FixedZone("B", -4*3600)
	key := fmt.Sprintf("tzdata-%d", time.Now().UnixNano())
	day := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	take := func(l ratekeeper.Limit, at time.Time) ratekeeper.Decision {
		t.Helper()
		req := ratekeeper.Request{Key: key, Limit: l, N: 1, Now: at}
		j := s.job('m', req, 0)
		v, err := j.run(t.Context(), s.client)
		if err != nil || len(v) != decisionSize {
			t.Fatalf("take at %v in %s: %q %v", at, l.Location, v, err)
		}
		return decision(req, v)
	}
	// admits takes rate+1 and wants rate of them to pass, then the window
	// to end at end.
	admits := func(l ratekeeper.Limit, at, end time.Time) {
		t.Helper()
		for i := range rate + 1 {
			d := take(l, at)
			if d.Allowed != (i < rate) {
				t.Fatalf("take %d at %v in %s: %+v, want allowed %v", i, at, l.Location, d, i < rate)
			}
		}
		if d := take(l, at); d.RetryAfter != end.Sub(at) {
			t.Fatalf("at %v in %s: retry after %v, want the window to end at %v", at, l.Location, d.RetryAfter, end)
		}
	}
	refused := func(l ratekeeper.Limit, at, end time.Time) {
		t.Helper()
		if d := take(l, at); d.Allowed || d.RetryAfter != end.Sub(at) {
			t.Fatalf("at %v in %s: %+v, want refused until %v (the stored window)", at, l.Location, d, end)
		}
	}
	h := time.Hour
	// A opens the day at 03:10Z; B's later boundary (04:00Z) resets nothing.
	admits(zoneA, day.Add(3*h+10*time.Minute), day.Add(27*h))
	refused(zoneB, day.Add(4*h+10*time.Minute), day.Add(27*h))
	// The next day B comes first, just past A's end: its own window would
	// end in 50 minutes, so the new one runs to B's boundary a day later.
	admits(zoneB, day.Add(27*h+10*time.Minute), day.Add(52*h))
	refused(zoneA, day.Add(28*h+10*time.Minute), day.Add(52*h))
	refused(zoneA, day.Add(51*h+50*time.Minute), day.Add(52*h))
	// A sync add from B for an instant in the stored window counts there.
	admits(zoneA, day.Add(52*h+10*time.Minute), day.Add(75*h))
	j := s.job('a', ratekeeper.Request{Key: key, Limit: zoneB, N: 3, Now: day.Add(53 * h)}, day.Add(52*h+30*time.Minute).UnixMicro())
	v, err := j.run(t.Context(), s.client)
	if err != nil || len(v) != decisionSize || float(v, 0) != 1 || float(v, 1) != float64(day.Add(75*h).UnixMicro()) || float(v, 2) != rate+3 {
		t.Fatalf("add from B: %q %v, want counted in the stored window", v, err)
	}
}

// nextUTCMidnight is how long from at until the next UTC midnight.
func nextUTCMidnight(at time.Time) time.Duration {
	y, m, d := at.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).Sub(at)
}

// TestCalendarHostClockOff: a host clock days from the Redis server's
// fails no decision. The store calls again with boundaries around the
// server's instant and decides by the server's day: alone, pipelined or
// not, and in TakeAll beside an epoch rule. It counts each skew and logs
// one ERROR line for them all.
func TestCalendarHostClockOff(t *testing.T) {
	url := redistest.Server(t)
	cal := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 2, Calendar: ratekeeper.Daily}
	epoch := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Period: 1000 * time.Hour}
	for _, off := range []time.Duration{-72 * time.Hour, 72 * time.Hour} {
		for _, pipelined := range []bool{false, true} {
			var logs bytes.Buffer
			s := openURL(t, url, WithAutoPipeline(pipelined), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			s.clock = func() time.Time { return time.Now().Add(off) }
			name := fmt.Sprintf("off %v pipelined %v", off, pipelined)
			key := fmt.Sprintf("host-off-%d", time.Now().UnixNano())
			for i := range 3 {
				d, err := s.Take(t.Context(), ratekeeper.Request{Key: key, Limit: cal, N: 1})
				if err != nil || d.Allowed != (i < 2) || d.ResetAfter != nextUTCMidnight(d.At) {
					t.Fatalf("%s: take %d: %+v %v, want allowed %v until the server's midnight", name, i, d, err, i < 2)
				}
			}
			reqs := []ratekeeper.Request{{Key: key + "-epoch", Limit: epoch, N: 1}, {Key: key + "-all", Limit: cal, N: 2}}
			out := make([]ratekeeper.Decision, 2)
			for i, want := range []bool{true, false} {
				all, err := s.TakeAll(t.Context(), reqs, out)
				if err != nil || all != want || out[1].ResetAfter != nextUTCMidnight(out[1].At) {
					t.Fatalf("%s: take all %d: %v %v %+v, want %v", name, i, all, err, out[1], want)
				}
			}
			if d, err := s.Take(t.Context(), reqs[0]); err != nil || d.Remaining != 3 {
				t.Fatalf("%s: epoch key after a refused batch: %+v %v, want its one take given back", name, d, err)
			}
			if n := s.ClockSkews(); n != 2 {
				// The script reads the boundaries only to start a window.
				t.Errorf("%s: %d skews counted, want 2 (one per key's first call)", name, n)
			}
			if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), "calendar period or more") {
				t.Errorf("%s: logged %d ERROR lines, want 1:\n%s", name, n, logs.String())
			}
		}
	}
}

// TestCalendarHostClockOffSync: in sync mode, the reads and adds of a host
// whose clock is days off count the daily quota in the server's day.
func TestCalendarHostClockOffSync(t *testing.T) {
	url := redistest.Server(t)
	l := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Calendar: ratekeeper.Daily}
	key := fmt.Sprintf("host-off-sync-%d", time.Now().UnixNano())
	s := openURL(t, url, WithMode(Sync, 0))
	s.clock = func() time.Time { return time.Now().Add(-72 * time.Hour) }
	allowed := 0
	for i := range 8 {
		d, err := s.Take(t.Context(), ratekeeper.Request{Key: key, Limit: l, N: 1})
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if err := s.Close(); err != nil { // sends what is unsent
		t.Fatal(err)
	}
	if st := s.SharedStats(); st.SyncErrors != 0 || st.Dropped != 0 || s.ClockSkews() == 0 {
		t.Fatalf("%+v, %d skews: want every add counted after a skew", st, s.ClockSkews())
	}
	exact := openURL(t, url)
	d, err := exact.Take(t.Context(), ratekeeper.Request{Key: key, Limit: l})
	if err != nil {
		t.Fatal(err)
	}
	if allowed != l.Rate || d.Remaining != 0 || d.RetryAfter != nextUTCMidnight(d.At) {
		t.Fatalf("%d allowed, then %+v; want %d, then none left until the server's midnight", allowed, d, l.Rate)
	}
}

// FuzzSkewInstant: any error text gives skewInstant no panic, and the
// script's own message gives back its instant.
func FuzzSkewInstant(f *testing.F) {
	f.Add("RKCALSKEW instant 1782864000000000 outside the calendar boundaries sent, 1 to 2", int64(5))
	f.Add("ERR user_script:1: RKCALSKEW instant -3 outside", int64(-3))
	f.Add("RKCALSKEW instant ", int64(0))
	f.Fuzz(func(t *testing.T, msg string, at int64) {
		skewInstant(errors.New(msg))
		got, ok := skewInstant(fmt.Errorf("x: %s", fmt.Sprintf("RKCALSKEW instant %d outside the calendar boundaries sent", at)))
		if !ok || got != at {
			t.Fatalf("instant %d read as %d %v", at, got, ok)
		}
	})
}
