package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/httplimit"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/rules"
)

// One limit and a key function: two requests per minute per API key.
func ExampleNewLimit() {
	store := memstore.New()
	defer store.Close()
	mw, err := httplimit.NewLimit(store, "per-key",
		ratekeeper.Limit{Algorithm: ratekeeper.FixedWindow, Rate: 2, Period: time.Hour},
		httplimit.KeyByHeader("X-API-Key"))
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "k1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 200 "per-key";q=2;w=3600 1
	// 200 "per-key";q=2;w=3600 0
	// 429 "per-key";q=2;w=3600 0
}

// A rules set: every rule a request matches applies, all or nothing.
func ExampleNew() {
	cfg, err := rules.Parse("inline.yaml", []byte(`
rules:
  - name: posts-per-user
    match: {methods: [POST], path: /v1/posts}
    key: [header:X-User-ID]
    limit: {algorithm: sliding_log, rate: 1, period: 1h}
`))
	if err != nil {
		panic(err)
	}
	set, err := rules.Compile(cfg)
	if err != nil {
		panic(err)
	}
	store := memstore.New()
	defer store.Close()
	mw, err := httplimit.New(store, set)
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, user := range []string{"alice", "alice", "bob"} {
		r := httptest.NewRequest("POST", "/v1/posts", nil)
		r.Header.Set("X-User-ID", user)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(user, w.Code)
	}
	// Output:
	// alice 200
	// alice 429
	// bob 200
}
