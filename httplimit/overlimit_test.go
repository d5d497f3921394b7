package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/memstore"
)

const overYAML = `
rules:
  - name: monthly
    key: [header:X-User-ID]
    limit: {algorithm: fixed_window, rate: 2, period: 1h}
    over_limit: {action: forward, header: X-Quota-Exceeded}
  - name: daily
    key: [header:X-User-ID]
    limit: {algorithm: fixed_window, rate: 3, period: 1h}
    over_limit: {action: forward, header: X-Quota-Exceeded}
  - name: cheap
    key: [header:X-User-ID]
    limit: {algorithm: fixed_window, rate: 4, period: 1h}
    over_limit: {action: reroute, upstream: "http://cheap:9000", header: X-Rerouted}
  - name: hard
    key: [header:X-User-ID]
    limit: {algorithm: fixed_window, rate: 5, period: 1h}
`

// seen is what the next handler got of one request.
type seen struct {
	exceeded, rerouted []string
	reroute            string
}

// overFixture serves overYAML, recording what the next handler sees.
func overFixture(t *testing.T) (*fixture, *[]seen) {
	f := newFixture(t, overYAML)
	var got []seen
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := Reroute(r)
		got = append(got, seen{r.Header.Values("X-Quota-Exceeded"), r.Header.Values("X-Rerouted"), u})
	}))
	return f, &got
}

// A rule that forwards names itself in its header exactly when the request
// is over its limit, all such rules in one header in the file's order; a
// reroute names its upstream from its first request over; an enforced rule
// still refuses, and then nothing is counted by the others.
func TestOverLimitForwardsReroutesAndRefuses(t *testing.T) {
	f, got := overFixture(t)
	want := []seen{
		{},
		{},
		{exceeded: []string{"monthly"}},
		{exceeded: []string{"monthly, daily"}},
		{exceeded: []string{"monthly, daily"}, rerouted: []string{"cheap"}, reroute: "http://cheap:9000"},
	}
	for i := range 6 {
		// The client's own copies never reach the handler.
		w := f.do("GET", "/", "192.0.2.1", "X-User-ID", "alice", "X-Quota-Exceeded", "forged", "X-Rerouted", "forged")
		if i == 5 {
			if w.Code != http.StatusTooManyRequests {
				t.Fatalf("request 6: %d, want 429 from hard", w.Code)
			}
			break
		}
		if w.Code != 200 {
			t.Fatalf("request %d: %d", i+1, w.Code)
		}
		if i == 4 && w.Header().Get(HeaderRemaining) != "0" {
			t.Errorf("request 5: remaining %q, want 0 (the rules past their limit are reported)", w.Header().Get(HeaderRemaining))
		}
	}
	if len(*got) != len(want) {
		t.Fatalf("handler saw %d requests, want %d", len(*got), len(want))
	}
	for i, w := range want {
		g := (*got)[i]
		if !equal(g.exceeded, w.exceeded) || !equal(g.rerouted, w.rerouted) || g.reroute != w.reroute {
			t.Errorf("request %d: handler saw %+v, want %+v", i+1, g, w)
		}
	}
	for rule, want := range map[string]float64{"monthly": 3, "daily": 2, "cheap": 1} {
		if n := f.count(rule, ResultOverLimit); n != want {
			t.Errorf("%s: over_limit counted %v, want %v", rule, n, want)
		}
	}
	// The refused sixth request took nothing from the rules that forward:
	// a fresh key's count is theirs alone.
	if n := f.count("monthly", ResultAllowed); n != 2 {
		t.Errorf("monthly: allowed %v, want 2", n)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A request an enforced rule refuses takes nothing from a rule that
// forwards: once the enforced limit frees up, the forwarding rule still
// has what it had.
func TestOverLimitRefusedTakesNothing(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: strict
    key: [ip]
    limit: {algorithm: fixed_window, rate: 1, period: 1m}
  - name: billed
    key: [ip]
    limit: {algorithm: fixed_window, rate: 2, period: 1h}
    over_limit: {action: forward, header: X-Over}
`)
	if w := f.do("GET", "/", "192.0.2.1"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	for range 3 {
		if w := f.do("GET", "/", "192.0.2.1"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("refused: %d", w.Code)
		}
	}
	// The enforced limit frees up; billed took one, so it admits one more
	// within its limit, then forwards.
	var over []string
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		over = append(over, r.Header.Get("X-Over"))
	}))
	for range 2 {
		f.clock.Advance(time.Minute)
		if w := f.do("GET", "/", "192.0.2.1"); w.Code != 200 {
			t.Fatalf("after a minute: %d", w.Code)
		}
	}
	if !equal(over, []string{"", "billed"}) {
		t.Errorf("X-Over %q, want [\"\" billed]: the refused requests took from billed", over)
	}
}

// A concurrency rule that reroutes spills what it cannot hold over to the
// other upstream, and holds the slot of a request it admits until the
// handler returns.
func TestOverLimitConcurrencySpillsOver(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: primary
    key: [global]
    concurrency: {max: 1}
    over_limit: {action: reroute, upstream: "http://spill:9000"}
`)
	var inner seen
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, ok := Reroute(r); ok {
			t.Errorf("first request rerouted to %s", u)
		}
		// While the first holds the slot, the second spills over.
		f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inner.reroute, _ = Reroute(r)
		})).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}))
	if w := f.do("GET", "/", "192.0.2.1"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	if inner.reroute != "http://spill:9000" {
		t.Errorf("second request: reroute %q, want http://spill:9000", inner.reroute)
	}
	// The slot came back: a third request is not rerouted.
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, ok := Reroute(r); ok {
			t.Errorf("third request rerouted to %s", u)
		}
	}))
	f.do("GET", "/", "192.0.2.1")
}

// With the store down and the deny policy, a rule that forwards or
// reroutes does not act on the policy's uncounted refusal: the request
// goes on as within the limit, unmarked and not rerouted.
func TestOverLimitUncountedIsWithin(t *testing.T) {
	f, got := overFixture(t)
	overFailsafe(t, f, failsafe.Deny)
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := Reroute(r)
		*got = append(*got, seen{r.Header.Values("X-Quota-Exceeded"), r.Header.Values("X-Rerouted"), u})
	}))
	// hard, enforced, is refused by the policy (503); only the rules that
	// forward or reroute are on this path.
	f.mw.SetRules(mustSet(t, strings.Replace(overYAML, "  - name: hard\n    key: [header:X-User-ID]\n    limit: {algorithm: fixed_window, rate: 5, period: 1h}\n", "", 1)))
	for i := range 3 {
		if w := f.do("GET", "/", "192.0.2.1", "X-User-ID", "alice", "X-Quota-Exceeded", "forged"); w.Code != 200 {
			t.Fatalf("request %d: %d", i+1, w.Code)
		}
	}
	for i, g := range *got {
		if len(g.exceeded) > 0 || len(g.rerouted) > 0 || g.reroute != "" {
			t.Errorf("request %d: %+v, want nothing over", i+1, g)
		}
	}
	if len(*got) != 3 {
		t.Errorf("handler saw %d requests, want 3", len(*got))
	}
}

// A queued request whose client leaves gives back what a rule that
// forwards took for it too: that rule's next request is within its limit.
func TestOverLimitQueuedClientLeavesRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		defer store.Close()
		mw, _ := New(store, mustSet(t, `
rules:
  - name: paced
    mode: queue
    limit: {algorithm: leaky_bucket, rate: 1, period: 1s, burst: 1}
  - name: billed
    limit: {algorithm: fixed_window, rate: 2, period: 1000d}
    over_limit: {action: forward, header: X-Over}
`))
		var over []string
		h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { over = append(over, r.Header.Get("X-Over")) }))
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
			close(done)
		}()
		synctest.Wait()
		cancel()
		<-done
		for range 2 {
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		}
		if !slices.Equal(over, []string{"", "", "billed"}) {
			t.Errorf("X-Over %q, want [\"\" \"\" billed]: the request that left kept billed's unit", over)
		}
	})
}
