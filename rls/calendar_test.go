package rls

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storeconfig"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// TestCalendarUnitsErrors: calendar_units' mistakes are located and say
// what to do.
func TestCalendarUnitsErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"domain: d\ncalendar_units: Europe/Berlinn\ndescriptors: []\n",
			`f.yaml:2: calendar_units: "Europe/Berlinn" is not a time zone: give an IANA name like Europe/Berlin`},
		{"domain: d\ncalendar_units: Local\ndescriptors: []\n", `f.yaml:2: calendar_units: "Local" is this machine's zone`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: month\n      requests_per_unit: 5\n      calendar_units: Mars/Olympus\n",
			`f.yaml:7: descriptors[0].rate_limit.calendar_units: "Mars/Olympus" is not a time zone`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      calendar_units: UTC\n",
			`f.yaml:6: descriptors[0].rate_limit.calendar_units: must not be set on an unlimited limit`},
		{"domain: d\ncalendar_units: UTC\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: month\n      requests_per_unit: 5\n      algorithm: token_bucket\n",
			`f.yaml:8: descriptors[0].rate_limit.algorithm: token_bucket cannot follow the calendar that calendar_units asks for: use fixed_window, or a unit of an hour or less`},
	} {
		_, err := ParseDomain("f.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.yaml, err, c.want)
		}
	}
	// A bucket by the hour is no calendar period: calendar_units leaves it be.
	if _, err := ParseDomain("f.yaml", []byte("domain: d\ncalendar_units: UTC\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: token_bucket}\n")); err != nil {
		t.Error(err)
	}
}

// calendarDomain has a monthly and a daily limit in Berlin's calendar, a
// limit of zero a month, and an hourly one that stays an epoch window.
const calendarDomain = `domain: d
calendar_units: Europe/Berlin
descriptors:
  - key: month
    rate_limit: {unit: month, requests_per_unit: 2}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: never
    rate_limit: {unit: month, requests_per_unit: 0}
  - key: utc
    rate_limit: {unit: month, requests_per_unit: 2, calendar_units: UTC}
`

// TestCalendarUnits: with calendar_units, serve's month is the calendar
// month and its day the local date, and what it answers (the reset, the
// headers' window) follows them, for a limit of zero requests too.
func TestCalendarUnits(t *testing.T) {
	d, err := ParseDomain("d.yaml", []byte(calendarDomain))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Compile(&Config{Domains: []DomainConfig{*d}})
	if err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	for _, c := range []struct {
		key       string
		n         int
		at        time.Time
		code      rlsv3.RateLimitResponse_Code
		reset     time.Duration
		limitHead string
	}{
		{"month", 1, time.Date(2024, 1, 31, 23, 59, 30, 0, berlin), rlsv3.RateLimitResponse_OK, 30 * time.Second, "2, 2;w=2678400"},
		{"month", 3, time.Date(2024, 2, 10, 0, 0, 0, 0, berlin), rlsv3.RateLimitResponse_OVER_LIMIT, 20 * 24 * time.Hour, "2, 2;w=2505600"},
		{"day", 3, time.Date(2024, 3, 31, 1, 0, 0, 0, berlin), rlsv3.RateLimitResponse_OVER_LIMIT, 22 * time.Hour, "2, 2;w=82800"},
		{"never", 1, time.Date(2024, 10, 27, 12, 0, 0, 0, berlin), rlsv3.RateLimitResponse_OVER_LIMIT, 4*24*time.Hour + 12*time.Hour, "0, 0;w=2682000"}, // October: 31 days and an hour
		{"utc", 1, time.Date(2024, 1, 31, 23, 59, 30, 0, berlin), rlsv3.RateLimitResponse_OK, 30*time.Second + time.Hour, "2, 2;w=2678400"},
	} {
		t.Run(c.key, func(t *testing.T) {
			clk := storetest.NewClock(c.at)
			ms := memstore.New(memstore.WithClock(clk))
			defer ms.Close()
			svc := NewService(ms, rs, WithClock(clk), WithResponseHeaders(true))
			req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: c.key, Value: "v"}}}}}
			var resp *rlsv3.RateLimitResponse
			for range c.n {
				if resp, err = svc.Decide(context.Background(), req); err != nil {
					t.Fatal(err)
				}
			}
			st := resp.Statuses[0]
			if st.Code != c.code || st.DurationUntilReset.AsDuration().Round(time.Second) != c.reset {
				t.Errorf("%v, reset in %v; want %v in %v", st.Code, st.DurationUntilReset.AsDuration(), c.code, c.reset)
			}
			for _, h := range resp.ResponseHeadersToAdd {
				if h.Key == "RateLimit-Limit" && h.Value != c.limitHead {
					t.Errorf("RateLimit-Limit %q, want %q", h.Value, c.limitHead)
				}
			}
		})
	}
	if l := rs.rules[3].limit; l.Calendar != ratekeeper.Monthly || l.Location.String() != "UTC" {
		t.Errorf("the utc limit is %v", l)
	}
}

// TestCalendarUnitsOnRedis: serve on a Redis store, with calendar_units,
// admits a descriptor's day's requests and then answers OVER_LIMIT until
// the next midnight in Berlin after Redis's now, which the test bounds by
// its own observed now: an epoch day would end at midnight UTC. Its store
// calls have a minute, not the default 50ms: a loaded machine can take
// longer, and the failure policy would then answer OK without counting.
func TestCalendarUnitsOnRedis(t *testing.T) {
	_, client := runServer(t, "domain: d\ncalendar_units: Europe/Berlin\ndescriptors:\n  - key: day\n    rate_limit: {unit: day, requests_per_unit: 2}\n",
		ServerOptions{Store: storeconfig.Config{URL: redistest.Server(t), Timeout: time.Minute}.WithDefaults()})
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	ask := func(v string) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("day", v)}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0]
	}
	midnight := func(at time.Time) time.Time {
		y, m, d := at.In(berlin).Date()
		return time.Date(y, m, d+1, 0, 0, 0, 0, berlin)
	}
	// A run that straddles Berlin's midnight sees two days' counts: it is
	// run again with another value.
	for _, v := range []string{"a", "b", "c"} {
		first := time.Now()
		codes := []rlsv3.RateLimitResponse_Code{ask(v).Code, ask(v).Code}
		before := time.Now()
		st := ask(v)
		after := time.Now()
		if !midnight(first).Equal(midnight(after)) {
			continue
		}
		want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
		if got := append(codes, st.Code); !slices.Equal(got, want) {
			t.Fatalf("codes %v, want %v", got, want)
		}
		// A wait rounded up to whole seconds from a now in [before, after],
		// with a millisecond for Redis's clock read to the microsecond.
		wait, end := st.DurationUntilReset.AsDuration(), midnight(before)
		if !end.After(before.Add(wait-time.Second-time.Millisecond)) || end.After(after.Add(wait+time.Millisecond)) {
			t.Errorf("reset in %v from a now in [%s, %s]; want Berlin's next midnight, %s", wait, before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano), end.Format(time.RFC3339))
		}
		return
	}
	t.Fatal("every run straddled midnight in Berlin")
}
