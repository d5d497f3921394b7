package ratefields_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// TestCalendarFields: a calendar window's fields, decided by the memory
// store on a fake clock and rendered by httplimit and grpclimit, point at
// the next local boundary, and RateLimit-Policy's w is the length of the
// period that holds the decision: a 31-day month, a 29-day February, a
// 23-hour and a 25-hour day.
func TestCalendarFields(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.ParseInLocation(time.DateTime, s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	monthly := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 2, Calendar: ratekeeper.Monthly, Location: berlin}
	daily := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 2, Calendar: ratekeeper.Daily, Location: berlin}
	billing := monthly
	billing.Offset = 30*24*time.Hour + 9*time.Hour // the 31st at 09:00, or a shorter month's last day
	const day = 86400
	secs := func(n int64) string { return strconv.FormatInt(n, 10) }
	for _, c := range []struct {
		name  string
		limit ratekeeper.Limit
		n     int // requests at when, the last one rendered
		when  time.Time
		want  fields
	}{
		{"allowed 30 s before January's end", monthly, 1, at("2024-01-31 23:59:30"),
			fields{"2", "1", "30", "30", "", "2", secs(31 * day)}},
		{"refused 30 s before January's end", monthly, 3, at("2024-01-31 23:59:30"),
			fields{"2", "0", "30", "30", "30", "2", secs(31 * day)}},
		{"allowed at February's first instant", monthly, 1, at("2024-02-01 00:00:00"),
			fields{"2", "1", secs(29 * day), secs(29 * day), "", "2", secs(29 * day)}},
		{"refused in a billing month that ends on 29 February at 09:00", billing, 3, at("2024-02-29 08:00:00"),
			fields{"2", "0", "3600", "3600", "3600", "2", secs(29 * day)}}, // 31 Jan 09:00 to 29 Feb 09:00
		{"refused on the 23-hour day, before the change", daily, 3, at("2024-03-31 01:00:00"),
			fields{"2", "0", secs(22 * 3600), secs(22 * 3600), secs(22 * 3600), "2", secs(23 * 3600)}},
		{"allowed on the 25-hour day, after the change", daily, 1, at("2024-10-27 12:00:00"),
			fields{"2", "1", secs(12 * 3600), secs(12 * 3600), "", "2", secs(25 * 3600)}},
		{"refused on an ordinary day", daily, 3, at("2024-10-28 12:00:00"),
			fields{"2", "0", secs(12 * 3600), secs(12 * 3600), secs(12 * 3600), "2", secs(day)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := storetest.NewClock(c.when)
			ms := memstore.New(memstore.WithClock(clk))
			defer ms.Close()
			var d ratekeeper.Decision
			for range c.n {
				if d, err = ms.Take(context.Background(), ratekeeper.Request{Key: "k", Limit: c.limit, N: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if !d.At.Equal(c.when) {
				t.Fatalf("decided at %v, not %v", d.At, c.when)
			}
			for by, got := range map[string]fields{"httplimit": viaHTTP(t, c.limit, d), "grpclimit": viaGRPC(t, c.limit, d)} {
				if got != c.want {
					t.Errorf("%s: %+v, want %+v", by, got, c.want)
				}
			}
		})
	}
}
