package promlimit_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/promlimit"
)

// The middleware's decisions on the caller's registry, served on
// /metrics as the gateway serves its own.
func Example() {
	reg := prometheus.NewRegistry() // yours: never the default registry
	pm, err := promlimit.New(reg)
	if err != nil {
		panic(err)
	}
	store := memstore.New()
	defer store.Close()
	mw, err := httplimit.NewLimit(store, "per-key",
		ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 2, Period: time.Hour},
		httplimit.KeyByHeader("X-API-Key"), httplimit.WithMetrics(pm))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/api/", mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	for range 3 {
		r := httptest.NewRequest("GET", "/api/posts", nil)
		r.Header.Set("X-API-Key", "k1")
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "ratekeeper_decisions_total{") {
			fmt.Println(sc.Text())
		}
	}
	// Output:
	// ratekeeper_decisions_total{result="allowed",rule="per-key"} 2
	// ratekeeper_decisions_total{result="limited",rule="per-key"} 1
	// ratekeeper_decisions_total{result="queued",rule="per-key"} 0
	// ratekeeper_decisions_total{result="shadow_limited",rule="per-key"} 0
}
