package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/server/buildinfo"
	"github.com/ratekeeper/ratekeeper/memstore"
)

func TestDecisionsAndReloads(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	if n, err := testutil.GatherAndCount(reg, "ratekeeper_config_reloads_total"); err != nil || n != 2 {
		t.Errorf("%d reload series before any reload, want success and failure at 0 (%v)", n, err)
	}
	m.Decision("r", Allowed)
	Inc(m.DecisionCounter("r", Limited))
	m.Reload(true, 3)
	m.Reload(false, 0)
	if got := testutil.ToFloat64(m.decisions.PromCounter("r", Allowed)); got != 1 {
		t.Errorf("allowed = %v", got)
	}
	if got := testutil.ToFloat64(m.decisions.PromCounter("r", Limited)); got != 1 {
		t.Errorf("limited = %v", got)
	}
	if got := testutil.ToFloat64(m.reloads.WithLabelValues("failure")); got != 1 {
		t.Errorf("failures = %v", got)
	}
	if got := testutil.ToFloat64(m.rules); got != 3 {
		t.Errorf("rules = %v", got)
	}
	m.ForgetRule("r")
	if n, err := testutil.GatherAndCount(reg, "ratekeeper_decisions_total"); err != nil || n != 0 {
		t.Errorf("%d series left after ForgetRule", n)
	}
	var nilM *Metrics
	nilM.Decision("x", Allowed) // must not panic
	Inc(nilM.DecisionCounter("x", Allowed))
}

type failing struct{}

func (failing) Take(context.Context, ratekeeper.Request) (ratekeeper.Decision, error) {
	return ratekeeper.Decision{}, errors.New("down")
}
func (failing) Refund(context.Context, ratekeeper.Request, ratekeeper.Decision) error { return nil }

func TestInstrumentStore(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	mem := memstore.New()
	defer mem.Close()
	s := m.InstrumentStore(mem)
	if _, ok := s.(ratekeeper.BatchStore); !ok {
		t.Fatal("instrumented memory store is no longer a BatchStore")
	}
	lim := ratekeeper.Limit{Algorithm: ratekeeper.TokenBucket, Rate: 1, Period: time.Second}
	reqs := []ratekeeper.Request{{Key: "a", Limit: lim, N: 1}}
	if ok, err := ratekeeper.TakeAll(context.Background(), s, reqs, make([]ratekeeper.Decision, 1)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	f := m.InstrumentStore(failing{})
	if _, ok := f.(ratekeeper.BatchStore); ok {
		t.Fatal("a plain store became a BatchStore")
	}
	if _, err := f.Take(context.Background(), reqs[0]); err == nil {
		t.Fatal("error lost")
	}
	if got := testutil.ToFloat64(m.storeErrors.WithLabelValues("take")); got != 1 {
		t.Errorf("take errors = %v", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "ratekeeper_store_duration_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			counts[s.GetLabel()[0].GetValue()] = s.GetHistogram().GetSampleCount()
		}
	}
	if counts["take_all"] != 1 || counts["take"] != 1 || counts["refund"] != 0 {
		t.Errorf("latency samples by op = %v, want take_all 1, take 1", counts)
	}
}

func TestAdminHandler(t *testing.T) {
	reg := NewRegistry()
	m := New(reg)
	m.CollectStore(StoreHealth{Fallback: func() FallbackStats { return FallbackStats{Errors: 4, Allowed: 3, Local: 1} }})
	m.Decision("posts", Allowed)
	ready := errors.New("store unreachable")
	h := AdminHandler(reg, func() error { return ready })
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("healthz %d", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "store unreachable") {
		t.Errorf("readyz %d %q", code, body)
	}
	ready = nil
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("readyz after ready %d", code)
	}
	code, body := get("/metrics")
	bi := buildinfo.Read()
	for _, want := range []string{
		`ratekeeper_decisions_total{result="allowed",rule="posts"} 1`,
		`ratekeeper_store_fallback_errors_total 4`,
		`ratekeeper_store_fallback_decisions_total{action="allow"} 3`,
		`go_goroutines`,
		fmt.Sprintf(`ratekeeper_build_info{goversion=%q,revision=%q,version=%q} 1`, bi.GoVersion, bi.Revision, bi.Version),
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestStoreHealthMetrics: a store's breaker is on /metrics, its state as a
// gauge per state, its openings, short-circuits, timeouts and probes; and
// so are a shared store's local decisions, syncs and leases by result.
func TestStoreHealthMetrics(t *testing.T) {
	reg := NewRegistry()
	m := New(reg)
	m.CollectStore(StoreHealth{
		Fallback: func() FallbackStats { return FallbackStats{Errors: 2, Allowed: 5} },
		Breaker: func() BreakerStats {
			return BreakerStats{State: BreakerOpen, Opens: 1, ShortCircuits: 3, Timeouts: 2}
		},
		Shared: func() SharedStats {
			return SharedStats{LocalDecisions: 7, DenialHits: 1, Syncs: 4, SyncErrors: 1, Leases: 2, Dropped: 3, ClockSkews: 2}
		},
	})
	rec := httptest.NewRecorder()
	AdminHandler(reg, nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
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
		`ratekeeper_store_local_decisions_total 7`,
		`ratekeeper_store_denial_cache_hits_total 1`,
		`ratekeeper_store_syncs_total{result="success"} 3`,
		`ratekeeper_store_syncs_total{result="failure"} 1`,
		`ratekeeper_store_leases_total{result="success"} 2`,
		`ratekeeper_store_sync_dropped_total 3`,
		`ratekeeper_store_clock_skews_total 2`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}
