package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/rules"
	"github.com/ratekeeper/ratekeeper/storetest"
)

// statusHandler answers with the status its query's s asks for.
var statusHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	code, err := strconv.Atoi(r.URL.Query().Get("s"))
	if err != nil {
		code = http.StatusOK
	}
	w.WriteHeader(code)
})

// countOnlyStores are the stores count_only runs on: memory, and Redis in
// each mode.
func countOnlyStores() map[string]func(t *testing.T, clk *storetest.Clock) ratekeeper.Store {
	stores := map[string]func(t *testing.T, clk *storetest.Clock) ratekeeper.Store{
		"memory": func(t *testing.T, clk *storetest.Clock) ratekeeper.Store {
			s := memstore.New(memstore.WithClock(clk))
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	for _, mode := range []redisstore.Mode{redisstore.Exact, redisstore.Sync, redisstore.Lease} {
		stores["redis/"+string(mode)] = func(t *testing.T, _ *storetest.Clock) ratekeeper.Store {
			s, err := redisstore.Open(t.Context(), redistest.Server(t), redisstore.WithMinTTL(time.Hour), redisstore.WithMode(mode, 0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	}
	return stores
}

func countOnlyRule(a ratekeeper.Algorithm) string {
	return "rules:\n  - name: created\n    key: [ip]\n    limit: {algorithm: " + string(a) + ", rate: 3, period: 1h}\n    count_only: {status: [201, 3xx]}\n"
}

func get(h http.Handler, status int) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/accounts?s="+strconv.Itoa(status), nil)
	r.RemoteAddr = "192.0.2.1:40000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// On every store and algorithm, responses whose status is not listed are
// never counted, and listed ones are, up to the limit; then the key is
// refused before its request goes upstream, with Retry-After.
func TestCountOnlyCountsListedStatuses(t *testing.T) {
	for name, open := range countOnlyStores() {
		t.Run(name, func(t *testing.T) {
			for _, a := range ratekeeper.Algorithms {
				t.Run(string(a), func(t *testing.T) {
					clk := storetest.NewClock(t0)
					mw, err := New(open(t, clk), mustSet(t, countOnlyRule(a)), WithClock(clk))
					if err != nil {
						t.Fatal(err)
					}
					upstream := 0
					h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						upstream++
						statusHandler(w, r)
					}))
					for i, s := range []int{400, 400, 201, 500, 200, 404, 201, 422, 400, 302} {
						if w := get(h, s); w.Code != s {
							t.Fatalf("request %d (%d): got %d", i, s, w.Code)
						}
					}
					for _, s := range []int{201, 400} {
						w := get(h, s)
						if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
							t.Fatalf("after 3 counted: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
						}
					}
					if upstream != 10 {
						t.Errorf("upstream saw %d requests, want 10: a refused one went upstream", upstream)
					}
				})
			}
		})
	}
}

// The bound: requests admitted while the limit had room are counted when
// they end, so at most the requests in flight for a key pass beyond its
// limit, and the limit is spent (not overdrawn) after them.
func TestCountOnlyInFlightBound(t *testing.T) {
	const inFlight = 5
	for name, open := range countOnlyStores() {
		t.Run(name, func(t *testing.T) {
			for _, a := range ratekeeper.Algorithms {
				t.Run(string(a), func(t *testing.T) {
					clk := storetest.NewClock(t0)
					mw, err := New(open(t, clk), mustSet(t, countOnlyRule(a)), WithClock(clk))
					if err != nil {
						t.Fatal(err)
					}
					arrived, release := make(chan struct{}, inFlight), make(chan struct{})
					slow := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						arrived <- struct{}{}
						<-release
						w.WriteHeader(http.StatusCreated)
					}))
					h := mw.Handler(statusHandler)
					if get(h, 201).Code != 201 || get(h, 201).Code != 201 { // 1 of 3 left
						t.Fatal("the first two were refused")
					}
					var wg sync.WaitGroup
					codes := make([]int, inFlight)
					for i := range inFlight {
						wg.Go(func() { codes[i] = get(slow, 201).Code })
					}
					for range inFlight { // all in flight at once: the upstream holds them
						select {
						case <-arrived:
						case <-time.After(30 * time.Second):
							t.Fatal("the requests did not all reach the upstream")
						}
					}
					if w := get(h, 201); w.Code != 201 {
						t.Fatalf("one unit left while the others are in flight: %d", w.Code)
					}
					close(release)
					wg.Wait()
					created := 3 // the first two and the one beside those in flight
					for _, c := range codes {
						if c == 201 {
							created++
						}
					}
					// Six were in flight with one unit left: all six pass,
					// within the bound of limit 3 plus 6 in flight.
					if created != 2+inFlight+1 || created > 3+inFlight+1 {
						t.Errorf("%d created, want %d", created, 2+inFlight+1)
					}
					w := get(h, 400)
					if w.Code != http.StatusTooManyRequests {
						t.Errorf("after the limit was spent: %d, want 429", w.Code)
					}
					// Spent, not overdrawn: the excess took nothing, so the
					// wait is a unit's, not six units'.
					if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); ra <= 0 || ra > 3600 {
						t.Errorf("Retry-After %q, want 1..3600", w.Header().Get("Retry-After"))
					}
				})
			}
		})
	}
}

// NewLimit's rule counts outcomes with WithCountOnly.
func TestWithCountOnly(t *testing.T) {
	st, err := rules.ParseStatuses("201")
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(t0)
	store := memstore.New(memstore.WithClock(clk))
	defer store.Close()
	mw, err := NewLimit(store, "accounts", ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Period: 24 * time.Hour}, KeyByIP(), WithCountOnly(st), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(statusHandler)
	for i, c := range []struct{ status, want int }{{400, 400}, {400, 400}, {201, 201}, {201, 429}, {400, 429}} {
		if got := get(h, c.status).Code; got != c.want {
			t.Errorf("request %d (%d): %d, want %d", i, c.status, got, c.want)
		}
	}
}

// A request refused by a count_only rule's look takes nothing from the
// other rules it falls under, on a store that decides batches whole and
// on Redis: their remaining is as the admitted requests left it.
func TestCountOnlyRefusalTakesNothingElsewhere(t *testing.T) {
	const yaml = `
rules:
  - name: created
    key: [ip]
    limit: {algorithm: sliding_log, rate: 1, period: 1h}
    count_only: {status: [201]}
  - name: all
    key: [ip]
    limit: {algorithm: token_bucket, rate: 10, period: 1h}
`
	for name, open := range countOnlyStores() {
		t.Run(name, func(t *testing.T) {
			clk := storetest.NewClock(t0)
			mw, err := New(open(t, clk), mustSet(t, yaml), WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Handler(statusHandler)
			for i, c := range []struct{ status, want int }{{400, 400}, {201, 201}, {201, 429}, {400, 429}, {201, 429}} {
				if got := get(h, c.status).Code; got != c.want {
					t.Fatalf("request %d (%d): %d, want %d", i, c.status, got, c.want)
				}
			}
			w := get(h, 201)
			if got := w.Header().Get(HeaderRateLimit); !strings.Contains(got, `"all";r=8;`) {
				t.Errorf("RateLimit %q: want all with 8 left (two admitted of 10)", got)
			}
		})
	}
}
