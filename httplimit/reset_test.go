package httplimit

import (
	"math/rand/v2"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

var (
	policyW = regexp.MustCompile(`;w=([0-9]+)`)
	itemT   = regexp.MustCompile(`;t=([0-9]+)`)
)

// TestResetWithinWindow runs every algorithm over random timelines on the
// memory and the Redis store and holds each response's figures to its
// policy's window w: RateLimit's t, X-RateLimit-Reset and Retry-After never
// exceed w, save the sliding window counter's full replenishment
// (X-RateLimit-Reset, and t on an allowed request), which weighs the
// previous window into the next and so takes up to 2w. A window of 10 s once showed
// t=11: a figure of w plus the clock's one-microsecond tick, rounded up.
func TestResetWithinWindow(t *testing.T) {
	stores := map[string]func(t *testing.T, clk *storetest.Clock) ratekeeper.Store{
		"memory": func(t *testing.T, clk *storetest.Clock) ratekeeper.Store {
			s := memstore.New(memstore.WithClock(clk))
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T, _ *storetest.Clock) ratekeeper.Store {
			s, err := redisstore.Open(t.Context(), redistest.Server(t), redisstore.WithMinTTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			for _, a := range ratekeeper.Algorithms {
				t.Run(string(a), func(t *testing.T) {
					clk := storetest.NewClock(t0)
					store := open(t, clk)
					mw, err := New(store, mustSet(t, "rules:\n  - name: r\n    key: [ip]\n    limit: {algorithm: "+string(a)+", rate: 3, period: 10s}\n"), WithClock(clk))
					if err != nil {
						t.Fatal(err)
					}
					h := mw.Handler(ok)
					rng := rand.New(rand.NewPCG(uint64(len(a)), 7))
					for step := range 400 {
						switch rng.IntN(4) {
						case 0: // the same instant
						case 1: // whole seconds, onto window edges
							clk.Advance(time.Duration(rng.IntN(11)) * time.Second)
						default:
							clk.Advance(time.Duration(rng.Int64N(int64(6 * time.Second))).Truncate(time.Microsecond))
						}
						r := httptest.NewRequest("GET", "/", nil)
						r.RemoteAddr = "192.0.2." + strconv.Itoa(1+step/100) + ":4000" // a fresh key now and then
						w := httptest.NewRecorder()
						h.ServeHTTP(w, r)
						hd := w.Header()
						win := atoi(t, policyW.FindStringSubmatch(hd.Get(HeaderPolicy)))
						tt := atoi(t, itemT.FindStringSubmatch(hd.Get(HeaderRateLimit)))
						reset, _ := strconv.ParseInt(hd.Get(HeaderReset), 10, 64)
						tBound, resetBound := win, win
						if a == ratekeeper.SlidingWindow {
							resetBound = 2 * win
							if w.Code == 200 {
								tBound = 2 * win
							}
						}
						if tt > tBound || reset > resetBound {
							t.Fatalf("step %d (%d): t=%d, X-RateLimit-Reset %d, w=%d\n%v", step, w.Code, tt, reset, win, hd)
						}
						if ra := hd.Get("Retry-After"); ra != "" {
							if n, _ := strconv.ParseInt(ra, 10, 64); n > win || n < 1 {
								t.Fatalf("step %d: Retry-After %s, w=%d\n%v", step, ra, win, hd)
							}
						}
					}
				})
			}
		})
	}
}

func atoi(t *testing.T, m []string) int64 {
	t.Helper()
	if m == nil {
		t.Fatal("no figure in the headers")
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// TestSlidingRetryAfterIsTheWindow: a sliding log of one per 10 s refuses a
// second request at the same instant with Retry-After: 10 (not 11), and a
// retry sent 10 s after that answer, which leaves at least a tick after the
// decision, passes.
func TestSlidingRetryAfterIsTheWindow(t *testing.T) {
	f := newFixture(t, "rules:\n  - name: r\n    limit: {algorithm: sliding_log, rate: 1, period: 10s}\n")
	f.do("GET", "/", "192.0.2.1")
	w := f.do("GET", "/", "192.0.2.1")
	if w.Code != 429 || w.Header().Get("Retry-After") != "10" || w.Header().Get(HeaderRateLimit) != `"r";r=0;t=10` {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	f.clock.Advance(10*time.Second + time.Microsecond)
	if w := f.do("GET", "/", "192.0.2.1"); w.Code != 200 {
		t.Fatalf("retry after Retry-After: %d", w.Code)
	}
}
