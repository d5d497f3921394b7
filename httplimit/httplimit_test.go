package httplimit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/rules"
	"github.com/ratekeeper/ratekeeper/storetest"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

func mustSet(t testing.TB, yaml string) *rules.Set {
	t.Helper()
	c, err := rules.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s, err := rules.Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type fixture struct {
	clock *storetest.Clock
	store *memstore.Store
	mw    *Middleware
	h     http.Handler
	reg   *prometheus.Registry
	mt    *metrics.Metrics
}

func newFixture(t *testing.T, yaml string) *fixture {
	f := &fixture{clock: storetest.NewClock(t0), reg: prometheus.NewRegistry()}
	f.store = memstore.New(memstore.WithClock(f.clock))
	t.Cleanup(func() { f.store.Close() })
	f.mt = metrics.New(f.reg)
	mw, err := New(f.store, mustSet(t, yaml), WithMetrics(f.mt))
	if err != nil {
		t.Fatal(err)
	}
	f.mw, f.h = mw, mw.Handler(ok)
	return f
}

func (f *fixture) do(method, path, ip string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = ip + ":40000"
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

func (f *fixture) count(rule, result string) float64 {
	return testutil.ToFloat64(f.mt.DecisionCounter(rule, result))
}

const postsYAML = `
rules:
  - name: posts-per-user
    match: {methods: [POST], path: /v1/posts}
    key: [header:X-User-ID]
    limit: {algorithm: token_bucket, rate: 2, period: 1s, burst: 2}
`

func TestLimitAndHeaders(t *testing.T) {
	f := newFixture(t, postsYAML)
	for i, wantRemaining := range []string{"1", "0"} {
		w := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "alice")
		if w.Code != 200 {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		h := w.Header()
		if h.Get(HeaderLimit) != "2" || h.Get(HeaderRemaining) != wantRemaining || h.Get(HeaderReset) != "1" {
			t.Errorf("request %d: legacy headers %v", i, h)
		}
		if got := h.Get(HeaderPolicy); got != `"posts-per-user";q=2;w=1` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		if got, want := h.Get(HeaderRateLimit), `"posts-per-user";r=`+wantRemaining+`;t=1`; got != want {
			t.Errorf("RateLimit %q, want %q", got, want)
		}
	}
	w := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "alice")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("third request: %d", w.Code)
	}
	h := w.Header()
	if h.Get("Retry-After") != "1" || h.Get(HeaderRetryAfter) != "1" || h.Get("Content-Type") != "application/problem+json" {
		t.Errorf("429 headers %v", h)
	}
	var p Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Status != 429 || p.Rule != "posts-per-user" || p.RetryAfter != 1 || !strings.Contains(p.Detail, "posts-per-user") {
		t.Errorf("problem %+v", p)
	}
	// Another user, another method, another path: not limited.
	if w := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "bob"); w.Code != 200 {
		t.Errorf("bob: %d", w.Code)
	}
	if w := f.do("GET", "/v1/posts", "192.0.2.1", "X-User-ID", "alice"); w.Code != 200 || w.Header().Get(HeaderLimit) != "" {
		t.Errorf("GET: %d %v", w.Code, w.Header())
	}
	// Half a second later one token is back: exactly one passes.
	f.clock.Advance(500 * time.Millisecond)
	if w := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "alice"); w.Code != 200 {
		t.Errorf("after refill: %d", w.Code)
	}
	if w := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "alice"); w.Code != 429 {
		t.Errorf("after refill, second: %d", w.Code)
	}
	if got := f.count("posts-per-user", metrics.Limited); got != 2 {
		t.Errorf("limited count %v", got)
	}
	if got := f.count("posts-per-user", metrics.Allowed); got != 4 {
		t.Errorf("allowed count %v", got)
	}
}

// TestRetryAfterRoundsUp: a wait of 20.0001 s is announced as 21 s, and a
// retry after exactly that long passes.
func TestRetryAfterRoundsUp(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: slow
    limit: {algorithm: token_bucket, rate: 3, period: 1m}
`)
	for range 3 {
		f.do("GET", "/", "192.0.2.1")
	}
	f.clock.Advance(time.Nanosecond * 999) // not a whole microsecond
	w := f.do("GET", "/", "192.0.2.1")
	if w.Code != 429 || w.Header().Get("Retry-After") != "20" {
		t.Fatalf("%d Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	f.clock.Advance(20 * time.Second)
	if w := f.do("GET", "/", "192.0.2.1"); w.Code != 200 {
		t.Fatalf("after Retry-After: %d", w.Code)
	}
}

// TestAllOrNothing: a request refused by one rule takes nothing from the
// others, and the refusal reports the rule with the longest wait.
func TestAllOrNothing(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: per-ip
    key: [ip]
    limit: {algorithm: fixed_window, rate: 5, period: 1m}
  - name: per-user
    key: [header:X-User]
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`)
	if w := f.do("GET", "/", "192.0.2.1", "X-User", "u"); w.Code != 200 {
		t.Fatal(w.Code)
	}
	for range 10 {
		w := f.do("GET", "/", "192.0.2.1", "X-User", "u")
		if w.Code != 429 {
			t.Fatal(w.Code)
		}
		var p Problem
		json.Unmarshal(w.Body.Bytes(), &p)
		if p.Rule != "per-user" {
			t.Fatalf("refused by %q", p.Rule)
		}
		if got := w.Header().Get(HeaderRateLimit); got != `"per-ip";r=4;t=60, "per-user";r=0;t=3600` {
			t.Fatalf("RateLimit %q", got)
		}
	}
	// per-ip still has 4 of its 5.
	for i := range 4 {
		if w := f.do("GET", "/", "192.0.2.1", "X-User", fmt.Sprint("other", i)); w.Code != 200 {
			t.Fatalf("per-ip quota was used by refused requests: %d", w.Code)
		}
	}
	if w := f.do("GET", "/", "192.0.2.1", "X-User", "fresh"); w.Code != 429 {
		t.Fatalf("sixth in the window: %d", w.Code)
	}
}

func TestShadow(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: trial
    mode: shadow
    limit: {algorithm: fixed_window, rate: 1, period: 1m}
`)
	for i := range 3 {
		w := f.do("GET", "/", "192.0.2.1")
		if w.Code != 200 {
			t.Fatalf("shadow refused request %d", i)
		}
		if w.Header().Get(HeaderRateLimit) != `"trial";r=0;t=60` {
			t.Errorf("request %d: RateLimit %q", i, w.Header().Get(HeaderRateLimit))
		}
	}
	if got := f.count("trial", metrics.ShadowLimited); got != 2 {
		t.Errorf("shadow_limited %v", got)
	}
}

func TestAccessAndTrustedProxy(t *testing.T) {
	f := newFixture(t, `
client_ip: {trusted_proxies: [10.0.0.0/8]}
access: {allow: [192.0.2.0/24], deny: [198.51.100.0/24]}
rules:
  - name: one
    key: [ip]
    limit: {algorithm: fixed_window, rate: 1, period: 1m}
`)
	if w := f.do("GET", "/", "198.51.100.7"); w.Code != 403 || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("denied: %d", w.Code)
	}
	for range 3 {
		if w := f.do("GET", "/", "192.0.2.7"); w.Code != 200 {
			t.Errorf("allowed client limited: %d", w.Code)
		}
	}
	// An untrusted peer cannot choose its key with X-Forwarded-For.
	f.do("GET", "/", "203.0.113.1", "X-Forwarded-For", "1.1.1.1")
	if w := f.do("GET", "/", "203.0.113.1", "X-Forwarded-For", "2.2.2.2"); w.Code != 429 {
		t.Errorf("spoofed XFF changed the key: %d", w.Code)
	}
	// A trusted proxy's header is believed, and the denied client behind it
	// is denied.
	if w := f.do("GET", "/", "10.1.1.1", "X-Forwarded-For", "203.0.113.9"); w.Code != 200 {
		t.Errorf("via proxy: %d", w.Code)
	}
	if w := f.do("GET", "/", "10.1.1.1", "X-Forwarded-For", "198.51.100.1"); w.Code != 403 {
		t.Errorf("denied via proxy: %d", w.Code)
	}
}

// TestQueue: leaky bucket 1/s, burst 3, max_delay 1.5s. Requests at one
// instant proceed at 0s, 1s; the third (2s) would wait past max_delay.
func TestQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		defer store.Close()
		mw, err := New(store, mustSet(t, `
rules:
  - name: paced
    mode: queue
    max_delay: 1500ms
    limit: {algorithm: leaky_bucket, rate: 1, period: 1s, burst: 3}
`))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var order []int
		h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			order = append(order, int(time.Since(t0Bubble).Round(time.Millisecond)/time.Millisecond))
			mu.Unlock()
		}))
		t0Bubble = time.Now()
		codes := make([]int, 3)
		var wg sync.WaitGroup
		for i := range 3 {
			// Requests arrive in order, one microsecond apart.
			time.Sleep(time.Microsecond)
			wg.Go(func() {
				w := httptest.NewRecorder()
				r := httptest.NewRequest("GET", "/", nil)
				h.ServeHTTP(w, r)
				codes[i] = w.Code
			})
			synctest.Wait()
		}
		wg.Wait()
		if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
			t.Fatalf("codes %v", codes)
		}
		if len(order) != 2 || order[0] != 0 || order[1] < 999 || order[1] > 1001 {
			t.Fatalf("proceeded at %v ms", order)
		}
		// The refused request gave its slot back: one more fits at 2s.
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code != 200 {
			t.Fatalf("after the refusal: %d", w.Code)
		}
	})
}

var t0Bubble time.Time

// TestQueueClientLeaves: a queued request whose client goes away gives its
// place back.
func TestQueueClientLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := memstore.New()
		defer store.Close()
		mw, _ := New(store, mustSet(t, `
rules:
  - name: paced
    mode: queue
    limit: {algorithm: leaky_bucket, rate: 1, period: 1s, burst: 1}
`))
		reached := 0
		h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }))
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
		if reached != 1 {
			t.Fatalf("reached %d", reached)
		}
		// Its slot is free again: the next request waits one slot, not two.
		start := time.Now()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
		if waited := time.Since(start); waited > time.Second {
			t.Fatalf("waited %v", waited)
		}
	})
}

func TestNewLimit(t *testing.T) {
	store := memstore.New()
	defer store.Close()
	mw, err := NewLimit(store, "api-key", ratekeeper.Limit{Algorithm: ratekeeper.SlidingLog, Rate: 2, Period: time.Minute}, KeyByHeader("X-API-Key"))
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(ok)
	get := func(key string) int {
		r := httptest.NewRequest("GET", "/", nil)
		if key != "" {
			r.Header.Set("X-API-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	var codes []int
	for _, key := range []string{"k", "k", "k", "", "other"} {
		codes = append(codes, get(key))
	}
	if want := []int{200, 200, 429, 200, 200}; !slices.Equal(codes, want) {
		t.Fatalf("codes %v, want %v", codes, want)
	}
	if _, err := NewLimit(store, "bad name!", ratekeeper.Limit{}, KeyByIP()); err == nil {
		t.Fatal("bad rule accepted")
	}
}

// TestSetRulesKeepsCounters: swapping in a set where one rule is unchanged
// and another's limit changed keeps the first's count and resets the other.
func TestSetRulesKeepsCounters(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: a
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
  - name: b
    match: {path: /b}
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
`)
	f.do("GET", "/", "192.0.2.1")
	f.mw.SetRules(mustSet(t, `
rules:
  - name: a
    limit: {algorithm: fixed_window, rate: 1, period: 1h}
  - name: b
    match: {path: /b}
    limit: {algorithm: fixed_window, rate: 2, period: 1h}
`))
	if w := f.do("GET", "/", "192.0.2.1"); w.Code != 429 {
		t.Fatalf("unchanged rule lost its count: %d", w.Code)
	}
	f.mw.SetRules(mustSet(t, `
rules:
  - name: a
    limit: {algorithm: fixed_window, rate: 2, period: 1h}
`))
	if w := f.do("GET", "/", "192.0.2.1"); w.Code != 200 {
		t.Fatalf("changed limit kept the old count: %d", w.Code)
	}
}

// TestHeaderStyles: the set's headers style picks the legacy fields, the
// IETF ones, both or none, and WithHeaders overrides it.
func TestHeaderStyles(t *testing.T) {
	for _, c := range []struct {
		style        string
		legacy, ietf bool
	}{
		{style: "both", legacy: true, ietf: true},
		{style: "legacy", legacy: true},
		{style: "ietf", ietf: true},
		{style: "none"},
	} {
		f := newFixture(t, "headers: "+c.style+"\n"+postsYAML)
		for range 3 {
			f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "a")
		}
		w := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "a")
		h := w.Header()
		if (h.Get(HeaderLimit) != "") != c.legacy || (h.Get(HeaderPolicy) != "") != c.ietf || (h.Get(HeaderRateLimit) != "") != c.ietf {
			t.Errorf("%s: %v", c.style, h)
		}
		if w.Code != 429 || h.Get("Retry-After") == "" {
			t.Errorf("%s: %d without Retry-After", c.style, w.Code)
		}
	}
	// WithHeaders overrides the file.
	f := newFixture(t, "headers: legacy\n"+postsYAML)
	mw, _ := New(f.store, f.mw.Rules(), WithHeaders(rules.HeadersIETF))
	f.h = mw.Handler(ok)
	if h := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "a").Header(); h.Get(HeaderLimit) != "" || h.Get(HeaderPolicy) == "" {
		t.Errorf("override: %v", h)
	}
}
