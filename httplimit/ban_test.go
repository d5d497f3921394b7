package httplimit

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/redisstore"
	"github.com/ratekeeper/ratekeeper/rules"
	"github.com/ratekeeper/ratekeeper/storetest"
)

const loginYAML = `
rules:
  - name: login
    match: {methods: [POST], path: /login}
    key: [ip]
    limit: {algorithm: fixed_window, rate: 5, period: 15m}
    ban: 1h
  - name: per-ip
    key: [ip]
    limit: {algorithm: token_bucket, rate: 1000, period: 1h}
`

// banStores open each store the ban is kept in, on clk where the store
// reads a clock of its own.
var banStores = map[string]func(t *testing.T, clk *storetest.Clock) ratekeeper.Store{
	"memory": func(t *testing.T, clk *storetest.Clock) ratekeeper.Store {
		s := memstore.New(memstore.WithClock(clk))
		t.Cleanup(func() { s.Close() })
		return s
	},
	"redis": func(t *testing.T, _ *storetest.Clock) ratekeeper.Store {
		return openRedis(t, redistest.Server(t))
	},
	// On a Cluster the ban's key has a hash tag of its own (it outlives
	// the limit's), so the check and the take go one by one.
	"cluster": func(t *testing.T, _ *storetest.Clock) ratekeeper.Store {
		return openRedis(t, redistest.Cluster(t))
	},
}

func openRedis(t *testing.T, url string) ratekeeper.Store {
	s, err := redisstore.Open(t.Context(), url, redisstore.WithMinTTL(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// banGateway is one middleware on a shared store, with its own metrics.
type banGateway struct {
	h  http.Handler
	mt *metrics.Metrics
}

func newBanGateway(t *testing.T, store ratekeeper.Store, clk *storetest.Clock) banGateway {
	mt := metrics.New(prometheus.NewRegistry())
	mw, err := New(store, mustSet(t, loginYAML), WithClock(clk), WithMetrics(mt))
	if err != nil {
		t.Fatal(err)
	}
	return banGateway{h: mw.Handler(ok), mt: mt}
}

// login posts to /login from ip and returns the status, Retry-After and
// the RateLimit header's first item (the login rule's).
func (g banGateway) login(ip string) (int, string, string) {
	r := httptest.NewRequest("POST", "/login", nil)
	r.RemoteAddr = ip + ":40000"
	w := httptest.NewRecorder()
	g.h.ServeHTTP(w, r)
	first, _, _ := strings.Cut(w.Header().Get(HeaderRateLimit), ", ")
	return w.Code, w.Header().Get("Retry-After"), first
}

func (g banGateway) bans() float64 {
	return testutil.ToFloat64(g.mt.Bans("login").(prometheus.Counter))
}

// TestBanSharedByGateways is the login rule on two middlewares sharing one
// store, on a fake clock: the sixth login on A bans the address for an
// hour; B refuses it too; Retry-After counts the ban down whatever the
// window's own reset; a refusal during the ban neither extends it nor
// spends the limit; the ban ends, and a new episode bans again.
func TestBanSharedByGateways(t *testing.T) {
	for name, open := range banStores {
		t.Run(name, func(t *testing.T) {
			clk := storetest.NewClock(t0)
			store := open(t, clk)
			a, b := newBanGateway(t, store, clk), newBanGateway(t, store, clk)
			const ip = "192.0.2.7"
			for i := range 5 {
				if code, _, _ := a.login(ip); code != 200 {
					t.Fatalf("login %d on A: %d", i, code)
				}
			}
			if code, ra, rl := a.login(ip); code != 429 || ra != "3600" || rl != `"login";r=0;t=3600` {
				t.Fatalf("sixth login on A: %d Retry-After %q RateLimit %q, want 429 3600", code, ra, rl)
			}
			if code, ra, _ := b.login(ip); code != 429 || ra != "3600" {
				t.Fatalf("B while banned: %d Retry-After %q, want 429 3600", code, ra)
			}
			if code, _, _ := b.login("192.0.2.8"); code != 200 {
				t.Fatalf("another address on B: %d", code)
			}
			clk.Advance(20 * time.Minute) // the window has reset; the ban has not
			for _, g := range []banGateway{a, b, a} {
				if code, ra, rl := g.login(ip); code != 429 || ra != "2400" || rl != `"login";r=0;t=2400` {
					t.Fatalf("20 min into the ban: %d Retry-After %q RateLimit %q, want 429 2400", code, ra, rl)
				}
			}
			clk.Advance(40*time.Minute - time.Second)
			if code, ra, _ := b.login(ip); code != 429 || ra != "1" {
				t.Fatalf("a second before the end: %d Retry-After %q", code, ra)
			}
			clk.Advance(time.Second)
			// Nothing the banned requests did counted: five pass again.
			for i := range 5 {
				if code, ra, _ := b.login(ip); code != 200 {
					t.Fatalf("login %d after the ban: %d (Retry-After %q)", i, code, ra)
				}
			}
			if got := a.bans() + b.bans(); got != 1 {
				t.Fatalf("bans counted %v, want 1", got)
			}
			if code, ra, _ := b.login(ip); code != 429 || ra != "3600" {
				t.Fatalf("the next episode: %d Retry-After %q, want a new ban", code, ra)
			}
			if a.bans() != 1 || b.bans() != 1 {
				t.Fatalf("bans counted A %v B %v, want 1 each", a.bans(), b.bans())
			}
		})
	}
}

// TestBanLiftedByReset: resetting the ban's key lets the client in at
// once, and the ban's state in the memory store is idle when it ends.
func TestBanLiftedByReset(t *testing.T) {
	for name, open := range banStores {
		t.Run(name, func(t *testing.T) {
			clk := storetest.NewClock(t0)
			store := open(t, clk)
			g := newBanGateway(t, store, clk)
			const ip = "192.0.2.9"
			for range 6 {
				g.login(ip)
			}
			if code, _, _ := g.login(ip); code != 429 {
				t.Fatalf("banned: %d", code)
			}
			set := mustSet(t, loginYAML)
			mt, ok := set.Rules[0].MatchOf(httptest.NewRequest("POST", "/login", nil), netip.MustParseAddr(ip))
			if !ok {
				t.Fatal("the rule does not match")
			}
			for _, x := range []struct {
				key string
				l   ratekeeper.Limit
			}{{mt.Key, mt.Limit()}, {rules.BanKey(mt.Key), mt.Rule.BanLimit()}} {
				if err := store.(ratekeeper.Resetter).Reset(t.Context(), x.key, x.l); err != nil {
					t.Fatal(err)
				}
			}
			if code, ra, _ := g.login(ip); code != 200 {
				t.Fatalf("after reset: %d Retry-After %q", code, ra)
			}
		})
	}
}

// TestBanMemoryDropped: the memory store keeps a ban as one key, only for
// a banned client (a check takes nothing), and drops it once the ban is
// over.
func TestBanMemoryDropped(t *testing.T) {
	clk := storetest.NewClock(t0)
	store := memstore.New(memstore.WithClock(clk))
	t.Cleanup(func() { store.Close() })
	g := newBanGateway(t, store, clk)
	for i := range 100 { // checked, never banned: no ban key
		g.login("198.51.100." + strconv.Itoa(i))
	}
	if n := store.Len(); n != 200 { // the login and per-ip counters
		t.Fatalf("%d keys, want 200", n)
	}
	for range 6 {
		g.login("192.0.2.1")
	}
	if n := store.Len(); n != 203 {
		t.Fatalf("%d keys after a ban, want 203", n)
	}
	clk.Advance(time.Hour)
	store.Sweep()
	if n := store.Len(); n != 0 {
		t.Fatalf("%d keys after the ban and the windows, want 0", n)
	}
}

// TestBanShorterThanTheLimit: a ban shorter than the limit's own wait
// never makes Retry-After earlier than the limit allows: one login a day
// with an hour's ban waits for the next day, and counts it down.
func TestBanShorterThanTheLimit(t *testing.T) {
	clk := storetest.NewClock(t0.Add(12 * time.Hour)) // midday: 12 h left in the day
	store := memstore.New(memstore.WithClock(clk))
	t.Cleanup(func() { store.Close() })
	mw, err := New(store, mustSet(t, "rules:\n  - name: login\n    key: [ip]\n    limit: {algorithm: fixed_window, rate: 1, period: 1d}\n    ban: 1h\n"), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	g := banGateway{h: mw.Handler(ok)}
	for step, want := range []struct {
		advance time.Duration
		code    int
		retry   string
	}{{0, 200, ""}, {0, 429, "43200"}, {10 * time.Minute, 429, "42600"}, {2 * time.Hour, 429, "35400"}} {
		clk.Advance(want.advance)
		if code, ra, _ := g.login("192.0.2.1"); code != want.code || ra != want.retry {
			t.Fatalf("step %d: %d Retry-After %q, want %d %q", step, code, ra, want.code, want.retry)
		}
	}
}
