package promlimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/promlimit"
)

var _ httplimit.Metrics = (*promlimit.Metrics)(nil)

// TestMiddlewareDecisions: a library user's middleware reports its
// decisions on the registry the user gave, as the gateway does.
func TestMiddlewareDecisions(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm, err := promlimit.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := promlimit.New(reg); err == nil {
		t.Error("a second registration on one registry: no error")
	}
	store := memstore.New()
	defer store.Close()
	mw, err := httplimit.NewLimit(store, "per-ip", ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 2, Period: time.Hour},
		httplimit.KeyByIP(), httplimit.WithMetrics(pm))
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}
	want := `
# HELP ratekeeper_decisions_total Rate limit decisions by rule and result (allowed, limited, shadow_limited, queued, forbidden, error, over_limit).
# TYPE ratekeeper_decisions_total counter
ratekeeper_decisions_total{result="allowed",rule="per-ip"} 2
ratekeeper_decisions_total{result="limited",rule="per-ip"} 1
ratekeeper_decisions_total{result="queued",rule="per-ip"} 0
ratekeeper_decisions_total{result="shadow_limited",rule="per-ip"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ratekeeper_decisions_total"); err != nil {
		t.Error(err)
	}
}
