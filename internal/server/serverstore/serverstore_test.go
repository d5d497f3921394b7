package serverstore

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

// scrape returns the /metrics page of a registry that holds s's health.
func scrape(t *testing.T, s ratekeeper.Store) func() string {
	t.Helper()
	reg := prometheus.NewRegistry()
	metrics.New(reg).CollectStore(Health(s))
	return func() string {
		rec := httptest.NewRecorder()
		metrics.AdminHandler(reg, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
}

// hasAll reports each of want that body lacks as a whole line.
func hasAll(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w+"\n") {
			t.Errorf("/metrics lacks %q", w)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

// hanging is a primary that answers nothing until its context ends.
type hanging struct{}

func (hanging) Take(ctx context.Context, _ ratekeeper.Request) (ratekeeper.Decision, error) {
	<-ctx.Done()
	return ratekeeper.Decision{}, ctx.Err()
}
func (hanging) Refund(context.Context, ratekeeper.Request, ratekeeper.Decision) error { return nil }

// TestBreakerMetrics: a failsafe store's breaker is on /metrics: its state
// as a gauge per state, its openings, short-circuits, timeouts and probes.
func TestBreakerMetrics(t *testing.T) {
	fs := failsafe.New(hanging{}, failsafe.WithTimeout(time.Millisecond), failsafe.WithBreaker(2, time.Hour))
	defer fs.Close()
	page := scrape(t, fs)
	lim := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Period: time.Second}
	for range 5 {
		fs.Take(context.Background(), ratekeeper.Request{Key: "k", Limit: lim, N: 1})
	}
	hasAll(t, page(),
		`ratekeeper_store_breaker_state{state="closed"} 0`,
		`ratekeeper_store_breaker_state{state="open"} 1`,
		`ratekeeper_store_breaker_state{state="half_open"} 0`,
		`ratekeeper_store_breaker_opens_total 1`,
		`ratekeeper_store_breaker_short_circuits_total 3`,
		`ratekeeper_store_timeouts_total 2`,
		`ratekeeper_store_breaker_probes_total{result="success"} 0`,
		`ratekeeper_store_breaker_probes_total{result="failure"} 0`,
		`ratekeeper_store_fallback_errors_total 2`,
		`ratekeeper_store_fallback_decisions_total{action="allow"} 5`,
	)
}

// TestRedisHealth: a Redis store opened from its URL shows its local
// decisions (a limit in lease mode) and, once Redis is gone, its
// fallbacks.
func TestRedisHealth(t *testing.T) {
	in := redistest.Start(t)
	s, closer, err := storeconfig.Open(context.Background(), storeconfig.Config{URL: in.URL(), Timeout: 200 * time.Millisecond, OnError: "deny"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	lim := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1000, Period: time.Second}
	if err := storeconfig.SetLimitModes(s, map[ratekeeper.Limit]string{lim: "lease"}); err != nil {
		t.Fatal(err)
	}
	page := scrape(t, s)
	ctx := context.Background()
	for range 10 {
		s.Take(ctx, ratekeeper.Request{Key: "all", Limit: lim, N: 1})
	}
	if body := page(); strings.Contains(body, "ratekeeper_store_local_decisions_total 0\n") || !strings.Contains(body, "ratekeeper_store_leases_total{result=\"success\"}") {
		t.Errorf("no local decision or lease counted:\n%s", body)
	}
	in.Kill()
	exact := ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 1, Period: time.Hour}
	if d, err := s.Take(ctx, ratekeeper.Request{Key: "other", Limit: exact, N: 1}); err != nil || d.Allowed {
		t.Fatalf("with Redis down and on_error deny: %+v %v", d, err)
	}
	hasAll(t, page(), `ratekeeper_store_fallback_decisions_total{action="deny"} 1`)
}

// A store with no health of its own, the memory store, shows none.
func TestMemoryHasNoHealth(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	if h := Health(s); h.Fallback != nil || h.Breaker != nil || h.Shared != nil {
		t.Errorf("memory store health %+v", h)
	}
}
