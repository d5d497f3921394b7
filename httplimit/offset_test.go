package httplimit

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// billingYAML is 2 requests per key per calendar month in UTC, from the
// 1st, each client's month moved by the offset its authenticating proxy
// (10.0.0.1) writes in X-Billing-Offset.
const billingYAML = `client_ip: {trusted_proxies: [10.0.0.1]}
rules:
  - name: quota
    key: [header:X-API-Key]
    limit: {algorithm: fixed_window, rate: 2, calendar: monthly}
    offset_header: X-Billing-Offset
`

// TestOffsetHeaderMovesReset, on a fake clock at 2026-02-10 12:00 UTC: a
// client whose proxy says 14d is refused until the 15th, one without the
// header until March; the header from anyone else is nothing. A new
// offset starts that client afresh and no one else; a bad one is counted
// and leaves the rule's. Every store of banStores decides it, Redis at
// the request's instant.
func TestOffsetHeaderMovesReset(t *testing.T) {
	for name, open := range banStores {
		t.Run(name, func(t *testing.T) {
			clk := storetest.NewClock(time.Date(2026, 2, 10, 12, 0, 0, 0, time.UTC))
			testOffsetHeaderMovesReset(t, open(t, clk), clk)
		})
	}
}

func testOffsetHeaderMovesReset(t *testing.T, store ratekeeper.Store, clk *storetest.Clock) {
	mt := metrics.New(prometheus.NewRegistry())
	mw, err := New(store, mustSet(t, billingYAML), WithClock(clk), WithMetrics(mt))
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(ok)
	do := func(peer, key, offset string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer + ":4000"
		r.Header.Set("X-API-Key", key)
		if offset != "" {
			r.Header.Set("X-Billing-Offset", offset)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	const proxy, client = "10.0.0.1", "203.0.113.5"
	const toThe15th, toMarch = 4*86400 + 43200, 18*86400 + 43200
	spend := func(who, peer, key, offset string, retry, days int) {
		t.Helper()
		for i, want := range []int{200, 200, 429} {
			w := do(peer, key, offset)
			if w.Code != want {
				t.Fatalf("%s: request %d: %d, want %d", who, i, w.Code, want)
			}
			if want == 429 {
				if got := w.Header().Get("Retry-After"); got != strconv.Itoa(retry) {
					t.Errorf("%s: Retry-After %s, want %d", who, got, retry)
				}
				// The client's month that holds the 10th: January 15 to
				// February 15, or February.
				if got := w.Header().Get("RateLimit-Policy"); got != `"quota";q=2;w=`+strconv.Itoa(days*86400) {
					t.Errorf("%s: RateLimit-Policy %s", who, got)
				}
			}
		}
	}
	spend("the proxy's 14d", proxy, "bob", "14d", toThe15th, 31)
	spend("no header", proxy, "carol", "", toMarch, 28)
	spend("a client's own 14d", client, "dave", "14d", toMarch, 28)
	// bob's proxy moves his billing day: his count starts anew; carol's
	// stays spent.
	spend("bob at 20d", proxy, "bob", "20d", 10*86400+43200, 31)
	if w := do(proxy, "carol", ""); w.Code != 429 {
		t.Errorf("carol after bob's move: %d", w.Code)
	}
	bad := func() float64 { return testutil.ToFloat64(mt.BadOffsets("quota").(prometheus.Counter)) }
	if n := bad(); n != 0 {
		t.Errorf("bad offsets %v before any", n)
	}
	for _, v := range []string{"31d", "-1d", "soon", strings.Repeat("9", 100)} {
		if w := do(proxy, "carol", v); w.Code != 429 || w.Header().Get("Retry-After") != strconv.Itoa(toMarch) {
			t.Errorf("carol with %q: %d, Retry-After %s: want the rule's month", v, w.Code, w.Header().Get("Retry-After"))
		}
	}
	do(client, "erin", "31d") // not the proxy's: not counted
	if n := bad(); n != 4 {
		t.Errorf("bad offsets %v, want 4", n)
	}
	clk.Set(time.Date(2026, 2, 15, 0, 0, 0, 0, time.UTC))
	if w := do(proxy, "bob", "14d"); w.Code != 200 {
		t.Errorf("bob on his billing day: %d", w.Code)
	}
	if w := do(proxy, "carol", ""); w.Code != 429 {
		t.Errorf("carol on bob's billing day: %d", w.Code)
	}
}
