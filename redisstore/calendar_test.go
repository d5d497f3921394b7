package redisstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
)

// TestCalendarRefused: until the scripts decide calendar windows, a
// calendar limit is an error, alone or in a batch, never an epoch window.
func TestCalendarRefused(t *testing.T) {
	s := open(t, redistest.Server(t))
	cal := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Calendar: ratekeeper.Daily}
	epoch := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 5, Period: time.Minute}
	req := ratekeeper.Request{Key: "cal", Limit: cal, N: 1, Now: time.Now()}
	if _, err := s.Take(t.Context(), req); err == nil || !strings.Contains(err.Error(), "calendar windows are not supported") {
		t.Fatalf("take: %v, want the calendar refused", err)
	}
	reqs := []ratekeeper.Request{{Key: "epoch", Limit: epoch, N: 1, Now: req.Now}, req}
	if _, err := s.TakeAll(t.Context(), reqs, make([]ratekeeper.Decision, 2)); err == nil || !strings.Contains(err.Error(), "calendar windows are not supported") {
		t.Fatalf("take all: %v, want the calendar refused", err)
	}
}
