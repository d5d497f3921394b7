package httplimit

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// twoRulesYAML puts each POST /v1/posts under two rules: 2 per second per
// user, and 100 per second in all.
const twoRulesYAML = postsYAML + `  - name: global
    limit: {algorithm: fixed_window, rate: 100, period: 1s}
`

// overFailsafe is f with its middleware on a failsafe store whose primary
// is down, deciding by policy.
func overFailsafe(t *testing.T, f *fixture, policy failsafe.Policy) *failsafe.Store {
	t.Helper()
	fs := failsafe.New(brokenStore{}, failsafe.WithPolicy(policy), failsafe.WithInstances(2), failsafe.WithLocalStore(memstore.New()))
	t.Cleanup(func() { fs.Close() })
	mw, err := New(fs, f.mw.Rules(), WithMetrics(f.mt))
	if err != nil {
		t.Fatal(err)
	}
	f.mw, f.h = mw, mw.Handler(ok)
	return fs
}

// TestFallbackAllowSendsNoFigures: with the store down and the allow
// policy, a response carries what the rules say (X-RateLimit-Limit, the
// RateLimit-Policy items) and none of the figures nothing computed: no
// X-RateLimit-Remaining or -Reset, no RateLimit field. Metrics count the
// decisions as before.
func TestFallbackAllowSendsNoFigures(t *testing.T) {
	f := newFixture(t, twoRulesYAML)
	fs := overFailsafe(t, f, failsafe.Allow)
	for range 3 { // more than the per-user limit: nothing limits
		w := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "alice")
		if w.Code != 200 {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		h := w.Header()
		if got := h.Get(HeaderLimit); got != "2" {
			t.Errorf("X-RateLimit-Limit %q, want the per-user rule's 2", got)
		}
		if got := h.Get(HeaderPolicy); got != `"posts-per-user";q=2;w=1, "global";q=100;w=1` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		for _, name := range []string{HeaderRemaining, HeaderReset, HeaderRateLimit, HeaderRetryAfter, "Retry-After"} {
			if v, ok := h[http.CanonicalHeaderKey(name)]; ok {
				t.Errorf("%s: %q, a figure nothing computed", name, v)
			}
		}
	}
	if got := f.count("posts-per-user", metrics.Allowed); got != 3 {
		t.Errorf("allowed count %v, want 3", got)
	}
	if st := fs.Stats(); st.FallbackAllowed != 6 {
		t.Errorf("fallback decisions %+v, want 6 allowed (3 requests × 2 rules)", st)
	}
}

// TestFallbackDenyIsUnavailable: with the store down and the deny policy,
// the answer says that the limiter's store is unavailable: 503 with
// Retry-After and a problem+json body saying so (gRPC: UNAVAILABLE), no
// X-RateLimit-Retry-After, Remaining or Reset. Metrics count it as limited,
// as before.
func TestFallbackDenyIsUnavailable(t *testing.T) {
	f := newFixture(t, twoRulesYAML)
	fs := overFailsafe(t, f, failsafe.Deny)
	w := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "alice")
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s", w.Code, w.Body)
	}
	h := w.Header()
	if h.Get("Retry-After") != "1" || h.Get("Content-Type") != "application/problem+json" || h.Get(HeaderLimit) != "2" || h.Get(HeaderPolicy) == "" {
		t.Errorf("headers %v", h)
	}
	for _, name := range []string{HeaderRemaining, HeaderReset, HeaderRateLimit, HeaderRetryAfter} {
		if v, ok := h[http.CanonicalHeaderKey(name)]; ok {
			t.Errorf("%s: %q, a figure nothing computed", name, v)
		}
	}
	var p Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if p.Status != 503 || p.Title != "Service Unavailable" || p.RetryAfter != 1 || p.Rule != "" ||
		!strings.Contains(p.Detail, "store is unavailable") || strings.Contains(p.Detail, "exceeded") {
		t.Errorf("problem %+v", p)
	}
	if got := f.count("posts-per-user", metrics.Limited); got != 1 {
		t.Errorf("limited count %v, want 1", got)
	}
	if st := fs.Stats(); st.FallbackDenied != 2 {
		t.Errorf("fallback decisions %+v, want 2 denied", st)
	}

	// A gRPC call: UNAVAILABLE (14), trailers-only.
	r := httptest.NewRequest("POST", "/v1/posts", nil)
	r.ProtoMajor, r.ProtoMinor, r.Proto = 2, 0, "HTTP/2.0"
	r.RemoteAddr = "192.0.2.1:40000"
	r.Header.Set("Content-Type", "application/grpc")
	r.Header.Set("X-User-ID", "alice")
	g := httptest.NewRecorder()
	f.h.ServeHTTP(g, r)
	if g.Code != 200 || g.Header().Get("Grpc-Status") != "14" || !strings.Contains(g.Header().Get("Grpc-Message"), "store is unavailable") || g.Body.Len() != 0 {
		t.Errorf("gRPC: %d %v %q", g.Code, g.Header(), g.Body)
	}
}

// TestFallbackLocalKeepsItsFigures: the local policy's decisions are
// computed, by the in-memory store on this instance's share of each limit,
// so they keep their figures and a refusal is a 429 as any other.
func TestFallbackLocalKeepsItsFigures(t *testing.T) {
	f := newFixture(t, twoRulesYAML)
	overFailsafe(t, f, failsafe.Local) // 2 instances: the per-user rule allows 1
	w := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "alice")
	h := w.Header()
	if w.Code != 200 || h.Get(HeaderLimit) != "1" || h.Get(HeaderRemaining) != "0" || h.Get(HeaderReset) == "" || h.Get(HeaderRateLimit) == "" {
		t.Fatalf("%d %v", w.Code, h)
	}
	w = f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "alice")
	if w.Code != http.StatusTooManyRequests || w.Header().Get(HeaderRetryAfter) == "" {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
}

// TestMixedRefusalIsOverALimit: when one rule refuses by its count and
// another by a failure policy, the client is over a real limit: 429, for
// the rule that counted. (A failsafe store answers a batch all one way;
// two stores behind one could not.)
func TestMixedRefusalIsOverALimit(t *testing.T) {
	f := newFixture(t, twoRulesYAML)
	var mixed mixedStore
	mw, err := New(&mixed, f.mw.Rules(), WithMetrics(f.mt))
	if err != nil {
		t.Fatal(err)
	}
	f.h = mw.Handler(ok)
	w := f.do("POST", "/v1/posts", "192.0.2.1", "X-User-ID", "alice")
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"rule":"global"`) || w.Header().Get("Retry-After") != "7" {
		t.Fatalf("%d %v %s", w.Code, w.Header(), w.Body)
	}
}

// mixedStore refuses the per-user rule as a failure policy would, and the
// global rule by a count, with a wait of 7 s.
type mixedStore struct{ brokenStore }

func (*mixedStore) TakeAll(_ context.Context, reqs []ratekeeper.Request, out []ratekeeper.Decision) (bool, error) {
	for i, r := range reqs {
		out[i] = ratekeeper.Decision{Limit: r.Limit.Capacity(), RetryAfter: time.Second, Fallback: ratekeeper.FallbackUncounted}
		if r.Limit.Rate == 100 {
			out[i] = ratekeeper.Decision{Limit: 100, RetryAfter: 7 * time.Second, ResetAfter: 7 * time.Second}
		}
	}
	return false, nil
}

// TestShadowStoreErrorSendsNoFigures: a shadow rule whose store call fails
// reports its limit and no figures.
func TestShadowStoreErrorSendsNoFigures(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: shadow
    mode: shadow
    limit: {algorithm: fixed_window, rate: 5, period: 1m}
`)
	mw, err := New(brokenStore{}, f.mw.Rules(), WithMetrics(f.mt))
	if err != nil {
		t.Fatal(err)
	}
	f.h = mw.Handler(ok)
	w := f.do("GET", "/", "192.0.2.1")
	h := w.Header()
	if w.Code != 200 || h.Get(HeaderLimit) != "5" || h.Get(HeaderRemaining) != "" || h.Get(HeaderReset) != "" || h.Get(HeaderRateLimit) != "" || h.Get(HeaderPolicy) == "" {
		t.Fatalf("%d %v", w.Code, h)
	}
}
