package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// TestCalendarClockSkew: boundaries sent for a day that does not hold the
// server's clock decide nothing: the call fails with ErrClockSkew, alone or
// in one run of many.lua, where the call beside it still decides.
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
