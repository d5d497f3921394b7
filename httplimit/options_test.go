package httplimit

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func problemOf(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	return p
}

func TestFixedCost(t *testing.T) {
	f := newFixture(t, `rules:
  - name: export
    key: [ip]
    cost: 4
    limit: {algorithm: fixed_window, rate: 10, period: 1m}
`)
	for i, want := range []string{"6", "2"} {
		w := f.do("GET", "/", "192.0.2.1")
		if w.Code != 200 || w.Header().Get(HeaderRemaining) != want {
			t.Fatalf("request %d: %d remaining %s", i, w.Code, w.Header().Get(HeaderRemaining))
		}
	}
	w := f.do("GET", "/", "192.0.2.1")
	// Refused: it took nothing, and the headers say the 2 units left.
	if w.Code != 429 || w.Header().Get(HeaderRemaining) != "2" || w.Header().Get(HeaderRateLimit) != `"export";r=2;t=60` {
		t.Fatalf("third: %d %v", w.Code, w.Header())
	}
	if got := f.units("export"); got != 8 {
		t.Errorf("units %v", got)
	}
}

func TestCostFromRequestHeader(t *testing.T) {
	f := newFixture(t, `rules:
  - name: batch
    key: [ip]
    cost: {header: X-Batch-Size, max: 50}
    limit: {algorithm: token_bucket, rate: 100, period: 1m}
  - name: global
    limit: {algorithm: token_bucket, rate: 1000, period: 1m}
`)
	if w := f.do("POST", "/", "192.0.2.1", "X-Batch-Size", "30"); w.Code != 200 || w.Header().Get(HeaderRateLimit) != `"batch";r=70;t=18, "global";r=999;t=1` {
		t.Fatalf("30: %d %v", w.Code, w.Header())
	}
	if w := f.do("POST", "/", "192.0.2.1"); w.Code != 200 || !strings.HasPrefix(w.Header().Get(HeaderRateLimit), `"batch";r=69;`) {
		t.Fatalf("missing means 1: %d %v", w.Code, w.Header())
	}
	for _, v := range []string{"51", "0", "-3", "2.5", "ten", "99999999999999999999"} {
		w := f.do("POST", "/", "192.0.2.1", "X-Batch-Size", v)
		p := problemOf(t, w)
		if w.Code != 400 || p["status"] != float64(400) || !strings.Contains(p["detail"].(string), "X-Batch-Size header") || w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%q: %d %v", v, w.Code, p)
		}
	}
	// A bad cost took nothing from any rule.
	if w := f.do("POST", "/", "192.0.2.1", "X-Batch-Size", "1"); !strings.HasPrefix(w.Header().Get(HeaderRateLimit), `"batch";r=68;`) || !strings.Contains(w.Header().Get(HeaderRateLimit), `"global";r=997;`) {
		t.Errorf("after bad costs: %v", w.Header())
	}
	if got := f.units("batch"); got != 32 {
		t.Errorf("units %v", got)
	}
}

// TestCostFromResponse: the request needs one unit to be admitted; the
// upstream's X-Tokens then becomes its cost, past what is left (debt), and
// the next requests wait until the bucket refilled it.
func TestCostFromResponse(t *testing.T) {
	f := newFixture(t, `rules:
  - name: llm
    key: [header:X-User]
    cost: {response_header: X-Tokens, max: 1000, default: 10}
    limit: {algorithm: token_bucket, rate: 100, period: 1s, burst: 1000}
`)
	tokens := ""
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tokens != "" {
			w.Header().Set("X-Tokens", tokens)
		}
		io.WriteString(w, "answer")
	}))
	do := func(tok string) *httptest.ResponseRecorder {
		tokens = tok
		return f.do("POST", "/v1/complete", "192.0.2.1", "X-User", "alice")
	}
	// Admitted with 1000 left; the response costs 900.
	if w := do("900"); w.Code != 200 || w.Header().Get(HeaderRemaining) != "999" {
		t.Fatalf("first: %d %v", w.Code, w.Header())
	}
	// 100 left: admitted, and its 700 drive the bucket 600 into debt.
	if w := do("700"); w.Code != 200 || w.Header().Get(HeaderRemaining) != "99" {
		t.Fatalf("second: %d %v", w.Code, w.Header())
	}
	w := do("1")
	if w.Code != 429 || w.Header().Get("Retry-After") != "7" {
		t.Fatalf("in debt: %d %v", w.Code, w.Header())
	}
	f.clock.Advance(6 * time.Second) // 600 repaid
	if w := do("1"); w.Code != 429 {
		t.Fatalf("debt repaid, no token yet: %d", w.Code)
	}
	f.clock.Advance(10 * time.Millisecond)
	// A missing header costs the default (10); an unreadable one too; a
	// huge one is capped at max; 0 gives the admission's unit back.
	for _, tc := range []struct {
		tok  string
		left int
	}{{"", 10}, {"junk", 10}, {"-5", 10}, {"0", 0}, {"5000", 1000}} {
		f.clock.Advance(20 * time.Second) // full again
		do(tc.tok)
		w := do("0")
		if got := w.Header().Get(HeaderRemaining); got != strconv.Itoa(max(1000-tc.left-1, 0)) {
			t.Errorf("after %q: remaining %s, want %d", tc.tok, got, 1000-tc.left-1)
		}
	}
	if got := f.units("llm"); got != 900+700+10+10+10+0+1000 {
		t.Errorf("units %v", got)
	}
}

// TestCostFromResponseClientLeaves: a client that left before the upstream
// answered pays the default (the gateway's 502 has no cost header); one
// that left after pays the response's cost.
func TestCostFromResponseClientLeaves(t *testing.T) {
	f := newFixture(t, `rules:
  - name: llm
    key: [ip]
    cost: {response_header: X-Tokens, max: 100, default: 3}
    limit: {algorithm: token_bucket, rate: 1, period: 1h, burst: 100}
`)
	h := f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // the client left: an error answer without the header
		w.WriteHeader(http.StatusBadGateway)
	}))
	ctx, cancel := contextWithCancel()
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	r.RemoteAddr = "192.0.2.1:1"
	cancel()
	h.ServeHTTP(httptest.NewRecorder(), r)
	if w := f.do("GET", "/", "192.0.2.1"); w.Header().Get(HeaderRemaining) != strconv.Itoa(100-3-1) {
		t.Errorf("remaining %s", w.Header().Get(HeaderRemaining))
	}
}

func TestOverridesAndTiersDecide(t *testing.T) {
	f := newFixture(t, `client_ip: {trusted_proxies: [10.0.0.1]}
rules:
  - name: api
    key: [header:X-API-Key]
    limit: {algorithm: fixed_window, rate: 2, period: 1m}
    overrides:
      acme: {rate: 5}
    tiers:
      header: X-Plan
      limits: {pro: {rate: 3}}
`)
	count := func(ip string, hdr ...string) int {
		n := 0
		for range 10 {
			if f.do("GET", "/", ip, hdr...).Code == 200 {
				n++
			}
		}
		return n
	}
	if n := count("192.0.2.1", "X-API-Key", "bob"); n != 2 {
		t.Errorf("default: %d", n)
	}
	if n := count("192.0.2.1", "X-API-Key", "acme"); n != 5 {
		t.Errorf("override: %d", n)
	}
	if n := count("10.0.0.1", "X-API-Key", "carol", "X-Plan", "pro"); n != 3 {
		t.Errorf("tier: %d", n)
	}
	if n := count("192.0.2.9", "X-API-Key", "dave", "X-Plan", "pro"); n != 2 {
		t.Errorf("spoofed tier: %d", n)
	}
	w := f.do("GET", "/", "10.0.0.1", "X-API-Key", "erin", "X-Plan", "pro")
	if w.Header().Get(HeaderPolicy) != `"api";q=3;w=60` || w.Header().Get(HeaderLimit) != "3" {
		t.Errorf("tier headers: %v", w.Header())
	}
}

func TestRefusedAnswer(t *testing.T) {
	f := newFixture(t, `rules:
  - name: quiet
    key: [ip]
    limit: {algorithm: fixed_window, rate: 1, period: 10s}
    refused:
      status: 503
      type: https://example.com/problems/busy
      title: Busy
      detail: '"{rule}" says: back in {wait} s </script>'
      hide_headers: true
  - name: loud
    key: [ip]
    limit: {algorithm: fixed_window, rate: 5, period: 10s}
`)
	w := f.do("GET", "/", "192.0.2.1")
	if w.Code != 200 || w.Header().Get(HeaderPolicy) != `"loud";q=5;w=10` || w.Header().Get(HeaderRemaining) != "4" {
		t.Fatalf("admitted: %v", w.Header())
	}
	w = f.do("GET", "/", "192.0.2.1")
	p := problemOf(t, w)
	if w.Code != 503 || p["type"] != "https://example.com/problems/busy" || p["title"] != "Busy" || p["status"] != float64(503) ||
		p["detail"] != `"quiet" says: back in 10 s </script>` || p["retry_after"] != float64(10) {
		t.Errorf("refused: %d %v", w.Code, p)
	}
	for _, h := range []string{HeaderLimit, HeaderRemaining, HeaderReset, HeaderRetryAfter} {
		if w.Header().Get(h) != "" {
			t.Errorf("%s shown for a hidden rule: %v", h, w.Header())
		}
	}
	if strings.Contains(w.Header().Get(HeaderPolicy)+w.Header().Get(HeaderRateLimit), "quiet") || w.Header().Get("Retry-After") != "10" {
		t.Errorf("headers %v", w.Header())
	}
	if !strings.Contains(w.Body.String(), `\"quiet\" says: back in 10 s \u003c/script\u003e`) {
		t.Errorf("body not escaped: %s", w.Body)
	}
}

// TestRetryAfterJitter: the announced wait is the real one plus at most
// the jitter, never less, and spread over the whole range.
func TestRetryAfterJitter(t *testing.T) {
	f := newFixture(t, `rules:
  - name: j
    key: [ip]
    limit: {algorithm: fixed_window, rate: 1, period: 10s}
    refused: {retry_after_jitter: 5s}
`)
	f.do("GET", "/", "192.0.2.1")
	f.clock.Advance(2500 * time.Millisecond) // the real wait is 7.5 s: 8 whole seconds
	seen := map[int]int{}
	for range 2000 {
		w := f.do("GET", "/", "192.0.2.1")
		n, err := strconv.Atoi(w.Header().Get("Retry-After"))
		if err != nil || w.Code != 429 || w.Header().Get(HeaderRetryAfter) != w.Header().Get("Retry-After") || problemOf(t, w)["retry_after"] != float64(n) {
			t.Fatalf("%d %v", w.Code, w.Header())
		}
		if n < 8 || n > 13 {
			t.Fatalf("Retry-After %d outside [8, 13]", n)
		}
		seen[n]++
	}
	// 8 takes the 0.5 s up to 8 s; 13 only the jitter's last 0.5 s.
	for n := 8; n <= 13; n++ {
		if seen[n] == 0 {
			t.Errorf("Retry-After %d never drawn: %v", n, seen)
		}
	}
	for range 10000 {
		if d := jitter(3 * time.Microsecond); d < 0 || d > 3*time.Microsecond {
			t.Fatalf("jitter %v", d)
		}
	}
	if jitter(0) != 0 {
		t.Error("no jitter")
	}
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

func (f *fixture) units(rule string) float64 {
	return testutil.ToFloat64(f.mt.Units(rule).(prometheus.Counter))
}

// TestOverrideReloadResetsOnlyThatClient: SetRules with one client's
// override changed starts that client's count afresh in the store; the
// other clients, overridden or not, keep theirs.
func TestOverrideReloadResetsOnlyThatClient(t *testing.T) {
	yaml := func(acme int) string {
		return `rules:
  - name: api
    key: [header:X-API-Key]
    limit: {algorithm: fixed_window, rate: 3, period: 1h}
    overrides:
      acme: {rate: ` + strconv.Itoa(acme) + `}
      globex: {rate: 4}
`
	}
	f := newFixture(t, yaml(5))
	remaining := func(key string) string {
		return f.do("GET", "/", "192.0.2.1", "X-API-Key", key).Header().Get(HeaderRemaining)
	}
	for _, k := range []string{"acme", "globex", "bob"} {
		remaining(k)
	}
	f.mw.SetRules(mustSet(t, yaml(6)))
	for k, want := range map[string]string{"acme": "5", "globex": "2", "bob": "1"} {
		if got := remaining(k); got != want {
			t.Errorf("%s after the reload: remaining %s, want %s", k, got, want)
		}
	}
}

// A tier header from a peer the rules do not trust never reaches next:
// the rules ignored it, and the handler behind must not believe it either.
// A trusted proxy's passes.
func TestUntrustedTierHeaderDropped(t *testing.T) {
	f := newFixture(t, `client_ip: {trusted_proxies: [10.0.0.1]}
rules:
  - name: api
    key: [ip]
    limit: {algorithm: fixed_window, rate: 5, period: 1m}
    tiers:
      header: X-Plan
      limits: {pro: {rate: 9}}
`)
	var seen []string
	f.h = f.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("X-Plan"))
	}))
	f.do("GET", "/", "192.0.2.9", "X-Plan", "pro")
	f.do("GET", "/", "10.0.0.1", "X-Plan", "pro")
	if len(seen) != 2 || seen[0] != "" || seen[1] != "pro" {
		t.Fatalf("next saw X-Plan %q, want it from the trusted proxy only", seen)
	}
}
