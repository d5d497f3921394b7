package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/algo"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/rules"
)

// calendarFile's rule plan admits 2 requests per key per billing month in
// zone, starting on the 15th; hourly is an epoch window.
func calendarFile(zone string) string {
	return `upstream: builtin:demo
admin: {reset: true, token_file: TOKEN}
rules:
  - name: plan
    key: ["header:X-API-Key"]
    on_missing_key: skip
    limit: {algorithm: fixed_window, rate: 2, calendar: monthly, time_zone: ` + zone + `, offset: 14d}
    overrides:
      acme: {rate: 5, offset: 1d}
  - name: hourly
    key: ["header:X-API-Key"]
    limit: {algorithm: fixed_window, rate: 100, period: 1h}
`
}

// TestAdminCalendarPeriod: the admin's state shows the billing month that
// holds now, in the rule's zone; the proxy refuses a third request in it.
func TestAdminCalendarPeriod(t *testing.T) {
	g := calendarGateway(t, "Europe/Berlin")
	for i, want := range []int{200, 200, 429} {
		if got := altGet(g, "k", ""); got != want {
			t.Fatalf("request %d: %d, want %d", i, got, want)
		}
	}
	before := time.Now()
	st := adminStateOf(t, g, "GET", "/v1/rules/plan/state?header=X-API-Key:k")
	after := time.Now()
	start, err1 := time.Parse(time.RFC3339Nano, st.PeriodStart)
	end, err2 := time.Parse(time.RFC3339Nano, st.PeriodEnd)
	if err1 != nil || err2 != nil {
		t.Fatalf("period %q to %q: %v %v", st.PeriodStart, st.PeriodEnd, err1, err2)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	ls := start.In(berlin)
	if ls.Day() != 15 || ls.Hour() != 0 || ls.Minute() != 0 || !end.Equal(ls.AddDate(0, 1, 0)) {
		t.Errorf("period %s to %s: want the 15th at midnight in Berlin to the next month's", st.PeriodStart, st.PeriodEnd)
	}
	if _, off := ls.Zone(); !strings.HasSuffix(st.PeriodStart, time.Unix(0, 0).In(time.FixedZone("", off)).Format("-07:00")) {
		t.Errorf("period_start %s is not written in Berlin's offset", st.PeriodStart)
	}
	if start.After(before) || !end.After(after) {
		t.Errorf("period %s to %s does not hold now", st.PeriodStart, st.PeriodEnd)
	}
	if st.Remaining != 0 || st.ResetAfter <= 0 || st.ResetAfter > end.Sub(before).Seconds()+1 {
		t.Errorf("state %+v: want none remaining until the period's end", st)
	}
	var rs AdminRules
	if err := json.Unmarshal(adminDo(g, "GET", "/v1/rules", adminToken).Body.Bytes(), &rs); err != nil {
		t.Fatal(err)
	}
	if l := rs.Rules[0].Limit; l.Calendar != "monthly" || l.TimeZone != "Europe/Berlin" || l.Offset != 14*86400 ||
		l.ZoneData == "" || l.ZoneData != zoneData(t, "Europe/Berlin") {
		t.Errorf("GET /v1/rules shows %+v", l)
	}
	if st := adminStateOf(t, g, "GET", "/v1/rules/hourly/state?header=X-API-Key:k"); st.PeriodStart != "" || st.PeriodEnd != "" {
		t.Errorf("an epoch window's state has a calendar period: %+v", st)
	}
}

// TestCalendarPolicyWindow: RateLimit-Policy's w is the length of the
// period that holds the request, the rule's or an override's own.
func TestCalendarPolicyWindow(t *testing.T) {
	g := calendarGateway(t, "Europe/Berlin")
	for _, c := range []struct {
		key  string
		q    int
		days time.Duration
	}{{"k", 2, 14 * 24 * time.Hour}, {"acme", 5, 24 * time.Hour}} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", c.key)
		w := httptest.NewRecorder()
		before := time.Now()
		g.handler.ServeHTTP(w, r)
		after := time.Now()
		l := g.mw.Rules().Rules[0].Limit
		l.Offset = c.days
		var want []string
		for _, at := range []time.Time{before, after} { // the same period, unless the test straddles a boundary
			start, end, _ := algo.CalendarPeriod(l, at)
			want = append(want, fmt.Sprintf(`"plan";q=%d;w=%d`, c.q, int64(end.Sub(start)/time.Second)))
		}
		if got := w.Result().Header.Get("RateLimit-Policy"); !strings.Contains(got, want[0]) && !strings.Contains(got, want[1]) {
			t.Errorf("%s: RateLimit-Policy %q, want %s", c.key, got, want[0])
		}
	}
}

// TestReloadCalendarZoneRestartsCounts: a reload that changes a calendar
// rule's time zone (or unit, or offset) gives it other keys, so its counts
// start afresh: the old counts were for other periods. A reload that
// keeps them keeps the counts.
func TestReloadCalendarZoneRestartsCounts(t *testing.T) {
	g := calendarGateway(t, "Europe/Berlin")
	spend := func(want ...int) {
		t.Helper()
		for i, w := range want {
			if got := altGet(g, "k", ""); got != w {
				t.Fatalf("request %d: %d, want %d", i, got, w)
			}
		}
	}
	reload := func(zone string) {
		t.Helper()
		b, err := os.ReadFile(g.path)
		if err != nil {
			t.Fatal(err)
		}
		i := strings.Index(string(b), "time_zone: ")
		j := i + strings.Index(string(b[i:]), ",")
		if err := os.WriteFile(g.path, []byte(string(b[:i])+"time_zone: "+zone+string(b[j:])), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := g.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	spend(200, 200, 429)
	reload("Europe/Berlin")
	spend(429)
	reload("America/New_York")
	spend(200, 200, 429)
	if l := g.mw.Rules().Rules[0].Limit; l.Location.String() != "America/New_York" {
		t.Fatalf("reloaded limit %v", l)
	}
}

// calendarGateway is a gateway on the memory store with calendarFile's
// rule in zone.
func calendarGateway(t *testing.T, zone string) *Gateway {
	t.Helper()
	tok := t.TempDir() + "/token"
	if err := os.WriteFile(tok, []byte(adminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	return newTestGateway(t, strings.Replace(calendarFile(zone), "TOKEN", tok, 1))
}

// TestCalendarOnRedis: a daily quota in Berlin on a Redis store admits
// exactly its rate, then answers 429 until the next midnight in Berlin
// after Redis's now. The gateway cannot set Redis's clock, so the reset is
// checked against the midnight after the test's own observed now: an
// epoch day would end at midnight UTC, an hour or two away.
func TestCalendarOnRedis(t *testing.T) {
	addr := startGateway(t, "fast", "builtin:demo", "store: {url: \""+redistest.Server(t)+"\"}\n"+`rules:
  - name: daily
    key: ["header:X-K"]
    limit: {algorithm: fixed_window, rate: 3, calendar: daily, time_zone: Europe/Berlin}
`)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	get := func(key string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		req.Header.Set("X-K", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	// A run that straddles Berlin's midnight sees two days' counts: it is
	// run again with another key.
	for attempt := range 3 {
		key := "k" + strconv.Itoa(attempt)
		first := time.Now()
		var codes []int
		for range 3 {
			codes = append(codes, get(key).StatusCode)
		}
		before := time.Now()
		resp := get(key)
		after := time.Now()
		if !sameDay(first.In(berlin), after.In(berlin)) {
			continue
		}
		if fmt.Sprint(append(codes, resp.StatusCode)) != "[200 200 200 429]" {
			t.Fatalf("statuses %v then %d, want 3 admitted then 429", codes, resp.StatusCode)
		}
		for _, h := range []string{"Retry-After", "X-RateLimit-Reset"} {
			secs, err := strconv.ParseInt(resp.Header.Get(h), 10, 64)
			if err != nil {
				t.Fatalf("%s %q: %v", h, resp.Header.Get(h), err)
			}
			checkNextMidnight(t, h, secs, before, after, berlin)
		}
		return
	}
	t.Fatal("every run straddled midnight in Berlin")
}

// sameDay reports whether a and b, in one zone, fall on the same date.
func sameDay(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd
}

// nextMidnight is the first midnight in loc after at.
func nextMidnight(at time.Time, loc *time.Location) time.Time {
	y, m, d := at.In(loc).Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, loc)
}

// checkNextMidnight fails t unless a wait of secs whole seconds, rounded
// up, announced by a store whose now fell in [before, after], ends at the
// next midnight in loc after that now. A millisecond of slack covers
// Redis's clock, read to the microsecond.
func checkNextMidnight(t *testing.T, field string, secs int64, before, after time.Time, loc *time.Location) {
	t.Helper()
	const slack = time.Millisecond
	for _, now := range []time.Time{before, after} {
		b := nextMidnight(now, loc)
		if b.After(before.Add(time.Duration(secs-1)*time.Second-slack)) && !b.After(after.Add(time.Duration(secs)*time.Second+slack)) {
			return
		}
	}
	t.Errorf("%s %d s from a now in [%s, %s] ends at %s; want the next midnight in %s, %s",
		field, secs, before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano),
		before.Add(time.Duration(secs)*time.Second).Format(time.RFC3339), loc, nextMidnight(after, loc).Format(time.RFC3339))
}

// zoneData is rules.ZoneData of the zone named name.
func zoneData(t *testing.T, name string) string {
	t.Helper()
	loc, err := rules.LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return rules.ZoneData(loc)
}
