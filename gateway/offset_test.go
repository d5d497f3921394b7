package gateway

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/algo"
)

// billingRule is 2 requests per key per calendar month in UTC, each
// client's month moved by the offset a trusted proxy writes in
// X-Billing-Offset.
const billingRule = `rules:
  - name: quota
    key: [header:X-User]
    limit: {algorithm: fixed_window, rate: 2, calendar: monthly}
    offset_header: X-Billing-Offset
`

// checkBoundary fails t unless a wait of secs whole seconds, rounded up,
// announced at a now in [before, after], ends at the end of l's period
// that holds that now.
func checkBoundary(t *testing.T, field string, secs int64, before, after time.Time, l ratekeeper.Limit) {
	t.Helper()
	for _, now := range []time.Time{before, after} {
		_, end, _ := algo.CalendarPeriod(l, now)
		if end.After(before.Add(time.Duration(secs-1)*time.Second-time.Millisecond)) && !end.After(after.Add(time.Duration(secs)*time.Second+time.Millisecond)) {
			return
		}
	}
	_, end, _ := algo.CalendarPeriod(l, after)
	t.Errorf("%s %d s from a now in [%s, %s]; want the end of the period, %s", field, secs,
		before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano), end.Format(time.RFC3339))
}

// TestGatewayOffsetHeader, on both client transports: a trusted proxy's
// X-Billing-Offset moves the client's reset (Retry-After and
// X-RateLimit-Reset) to its own boundary and goes upstream; a new offset
// starts that client afresh, and no one else; the header of a client that
// is no trusted proxy is ignored and dropped.
func TestGatewayOffsetHeader(t *testing.T) {
	up := newRecUpstream(t, nil)
	monthly := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 2, Calendar: ratekeeper.Monthly}
	days := func(n int) ratekeeper.Limit { l := monthly; l.Offset = time.Duration(n) * 24 * time.Hour; return l }
	for _, transport := range []string{"fast", "standard"} {
		t.Run(transport, func(t *testing.T) {
			// spend makes three requests at addr, and checks the third's
			// refusal against the end of l's period.
			spend := func(addr, user, offset string, l ratekeeper.Limit) {
				t.Helper()
				h := "GET / HTTP/1.1\r\nHost: x\r\nX-User: " + user + "\r\nConnection: close\r\n"
				if offset != "" {
					h += "X-Billing-Offset: " + offset + "\r\n"
				}
				for n := range 2 {
					if resp, _ := rawGet(t, addr, h); resp.StatusCode != 200 {
						t.Fatalf("%s at %q: request %d: %d", user, offset, n+1, resp.StatusCode)
					}
				}
				before := time.Now()
				resp, _ := rawGet(t, addr, h)
				after := time.Now()
				if resp.StatusCode != 429 {
					t.Fatalf("%s at %q: request 3: %d", user, offset, resp.StatusCode)
				}
				for _, f := range []string{"Retry-After", "X-Ratelimit-Reset"} {
					secs, err := strconv.ParseInt(resp.Header.Get(f), 10, 64)
					if err != nil {
						t.Fatalf("%s %q: %v", f, resp.Header.Get(f), err)
					}
					checkBoundary(t, user+" at "+offset+": "+f, secs, before, after, l)
				}
			}
			trusted := startGateway(t, transport, up.URL, "client_ip: {trusted_proxies: [127.0.0.1, \"::1\"]}\n"+billingRule)
			spend(trusted, "bob", "14d", days(14))
			spend(trusted, "carol", "", monthly)
			spend(trusted, "dave", "40d", monthly) // no offset of a month: the rule's
			for _, r := range up.take() {
				if want := map[string]string{"bob": "14d", "dave": "40d"}[r.Header.Get("X-User")]; r.Header.Get("X-Billing-Offset") != want {
					t.Errorf("%s: the upstream got X-Billing-Offset %q from the trusted proxy, want %q", r.Header.Get("X-User"), r.Header.Get("X-Billing-Offset"), want)
				}
			}
			// bob's proxy moves his billing day: he counts anew, carol
			// stays refused.
			spend(trusted, "bob", "20d", days(20))
			if resp, _ := rawGet(t, trusted, "GET / HTTP/1.1\r\nHost: x\r\nX-User: carol\r\nConnection: close\r\n"); resp.StatusCode != 429 {
				t.Errorf("carol after bob's move: %d", resp.StatusCode)
			}
			up.take()
			untrusted := startGateway(t, transport, up.URL, "client_ip: {trusted_proxies: [10.9.9.9]}\n"+billingRule)
			spend(untrusted, "mallory", "14d", monthly)
			for _, r := range up.take() {
				if vs := r.Header.Values("X-Billing-Offset"); len(vs) > 0 {
					t.Errorf("the upstream got X-Billing-Offset %q from an untrusted client", vs)
				}
			}
		})
	}
}

// TestAdminStateOffsetHeader: the admin's state of a client whose offset
// comes from the header is asked with that header, as from the trusted
// proxy: its period is the client's own.
func TestAdminStateOffsetHeader(t *testing.T) {
	g := newTestGateway(t, "upstream: builtin:demo\nclient_ip: {trusted_proxies: [10.0.0.1]}\n"+billingRule)
	before := time.Now()
	own := adminStateOf(t, g, "GET", "/v1/rules/quota/state?header=X-User:bob&header=X-Billing-Offset:14d")
	rule := adminStateOf(t, g, "GET", "/v1/rules/quota/state?header=X-User:bob")
	after := time.Now()
	for _, c := range []struct {
		st  AdminState
		day int
	}{{own, 15}, {rule, 1}} {
		start, err := time.Parse(time.RFC3339Nano, c.st.PeriodStart)
		if err != nil || start.Day() != c.day || start.Hour() != 0 || start.After(after) {
			t.Errorf("period_start %q (%v): want the %d at midnight before %s", c.st.PeriodStart, err, c.day, before)
		}
	}
	if own.Key == rule.Key || !strings.HasPrefix(own.Key, "quota:") {
		t.Errorf("keys %q and %q: the client's own offset has a key of its own", own.Key, rule.Key)
	}
}
