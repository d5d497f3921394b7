package rls

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/memstore"
	"github.com/ratekeeper/ratekeeper/storetest"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// start is 20 s into a minute, 1700000000 s after the epoch.
var start = time.Unix(1_700_000_000, 0)

type fixture struct {
	svc   *Service
	clock *storetest.Clock
	store ratekeeper.Store
	reg   *prometheus.Registry
}

func newFixture(t *testing.T, path string, opts ...Option) *fixture {
	t.Helper()
	return newFixtureWith(t, path, nil, opts...)
}

// newFixtureWith is newFixture with the service's store wrapped by wrap
// (nil: the memory store itself).
func newFixtureWith(t *testing.T, path string, wrap func(ratekeeper.Store) ratekeeper.Store, opts ...Option) *fixture {
	t.Helper()
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	clk := storetest.NewClock(start)
	ms := memstore.New(memstore.WithClock(clk))
	t.Cleanup(func() { ms.Close() })
	reg := prometheus.NewRegistry()
	sm, err := NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]Option{WithMetrics(sm), WithClock(clk)}, opts...)
	var store ratekeeper.Store = ms
	if wrap != nil {
		store = wrap(ms)
	}
	return &fixture{svc: NewService(store, rules, opts...), clock: clk, store: ms, reg: reg}
}

func newFixtureYAML(t *testing.T, yaml string, opts ...Option) *fixture {
	t.Helper()
	p := t.TempDir() + "/c.yaml"
	if err := writeFile(p, yaml); err != nil {
		t.Fatal(err)
	}
	return newFixture(t, p, opts...)
}

// desc builds a descriptor from key, value, key, value...
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (f *fixture) ask(t *testing.T, domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := f.svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// codes renders the overall code and each status's code.
func codesOf(r *rlsv3.RateLimitResponse) string {
	s := []string{r.OverallCode.String()}
	for _, st := range r.Statuses {
		s = append(s, st.Code.String())
	}
	return strings.Join(s, " ")
}

func TestExactCountAndFields(t *testing.T) {
	f := newFixture(t, "testdata/reference")
	for i := range 500 {
		r := f.ask(t, "mongo_cps", 0, desc("database", "users"))
		if r.OverallCode != ok {
			t.Fatalf("request %d: %s", i+1, codesOf(r))
		}
		st := r.Statuses[0]
		if st.LimitRemaining != uint32(499-i) {
			t.Fatalf("request %d: remaining %d", i+1, st.LimitRemaining)
		}
		if l := st.CurrentLimit; l.RequestsPerUnit != 500 || l.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND {
			t.Fatalf("current_limit = %v", l)
		}
		if d := st.DurationUntilReset.AsDuration(); d != time.Second {
			t.Fatalf("duration_until_reset = %v, want 1s (the window's end)", d)
		}
	}
	r := f.ask(t, "mongo_cps", 0, desc("database", "users"))
	if codesOf(r) != "OVER_LIMIT OVER_LIMIT" || r.Statuses[0].LimitRemaining != 0 || r.Statuses[0].DurationUntilReset.AsDuration() != time.Second {
		t.Fatalf("501st: %v", r)
	}
	// Another value has its own count; the next window starts afresh.
	if r := f.ask(t, "mongo_cps", 0, desc("database", "default")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 499 {
		t.Fatalf("other value: %v", r)
	}
	f.clock.Advance(time.Second)
	if r := f.ask(t, "mongo_cps", 0, desc("database", "users")); r.OverallCode != ok {
		t.Fatalf("next second: %v", r)
	}
}

func TestNestedAndMultipleDescriptors(t *testing.T) {
	f := newFixture(t, "testdata/reference")
	marketing := func(n string) *ratelimitv3.RateLimitDescriptor {
		return desc("message_type", "marketing", "to_number", n)
	}
	for range 5 {
		if r := f.ask(t, "messaging", 0, marketing("2061111111"), desc("to_number", "2061111111")); codesOf(r) != "OK OK OK" {
			t.Fatal(codesOf(r))
		}
	}
	r := f.ask(t, "messaging", 0, marketing("2061111111"), desc("to_number", "2061111111"))
	if codesOf(r) != "OVER_LIMIT OVER_LIMIT OK" {
		t.Fatal(codesOf(r))
	}
	// Default: the descriptor within its limit counted the refused request.
	if got := r.Statuses[1].LimitRemaining; got != 94 {
		t.Errorf("per-number remaining = %d, want 94", got)
	}
	if l := r.Statuses[1].CurrentLimit; l.RequestsPerUnit != 100 || l.Unit != rlsv3.RateLimitResponse_RateLimit_DAY {
		t.Errorf("current_limit = %v", l)
	}
	if r := f.ask(t, "messaging", 0, marketing("2062222222")); codesOf(r) != "OK OK" || r.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("another number: %v", r)
	}
}

func TestAllOrNothing(t *testing.T) {
	f := newFixture(t, "testdata/reference", WithAllOrNothing(true))
	m := desc("message_type", "marketing", "to_number", "1")
	for range 5 {
		f.ask(t, "messaging", 0, m, desc("to_number", "1"))
	}
	for range 3 {
		r := f.ask(t, "messaging", 0, m, desc("to_number", "1"))
		if codesOf(r) != "OVER_LIMIT OVER_LIMIT OK" {
			t.Fatal(codesOf(r))
		}
		if got := r.Statuses[1].LimitRemaining; got != 95 {
			t.Fatalf("the refused request used quota of the other descriptor: remaining %d, want 95", got)
		}
	}
	// The same descriptor twice counts twice, as one all-or-nothing request.
	r := f.ask(t, "messaging", 0, desc("to_number", "2"), desc("to_number", "2"))
	if codesOf(r) != "OK OK OK" || r.Statuses[0].LimitRemaining != 98 {
		t.Fatalf("twice: %v", r)
	}
	// A cost above a limit's capacity refuses the request and takes nothing.
	r = f.ask(t, "messaging", 101, desc("to_number", "3"), desc("message_type", "marketing", "to_number", "3"))
	if codesOf(r) != "OVER_LIMIT OVER_LIMIT OVER_LIMIT" {
		t.Fatal(codesOf(r))
	}
	r = f.ask(t, "messaging", 0, desc("to_number", "3"))
	if r.Statuses[0].LimitRemaining != 99 {
		t.Fatalf("remaining %d after a refused request, want 99", r.Statuses[0].LimitRemaining)
	}
}

// eachBatch is a BatchStore that decides batches key by key, as the Redis
// store does across Cluster slots and in sync and lease mode.
type eachBatch struct{ ratekeeper.Store }

func (e eachBatch) TakeAll(ctx context.Context, reqs []ratekeeper.Request, out []ratekeeper.Decision) (bool, error) {
	return ratekeeper.TakeEach(ctx, reqs, out, e.Take, e.Refund)
}

// plain hides a store's batch.
type plain struct{ ratekeeper.Store }

// A refused all-or-nothing request reads the same on every kind of store:
// the descriptor within its limit says what is left. On a batch store
// decided key by key, it read its cost too high.
func TestAllOrNothingReadsAlike(t *testing.T) {
	for name, wrap := range map[string]func(ratekeeper.Store) ratekeeper.Store{
		"batch":       nil,
		"key by key":  func(s ratekeeper.Store) ratekeeper.Store { return plain{s} },
		"batch, each": func(s ratekeeper.Store) ratekeeper.Store { return eachBatch{s} },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixtureWith(t, "testdata/reference", wrap, WithAllOrNothing(true))
			m := desc("message_type", "marketing", "to_number", "1")
			for range 5 {
				f.ask(t, "messaging", 0, m, desc("to_number", "1"))
			}
			r := f.ask(t, "messaging", 0, m, desc("to_number", "1"))
			if codesOf(r) != "OVER_LIMIT OVER_LIMIT OK" || r.Statuses[1].LimitRemaining != 95 {
				t.Fatalf("%s, remaining %d; want OVER_LIMIT OVER_LIMIT OK, 95", codesOf(r), r.Statuses[1].LimitRemaining)
			}
		})
	}
}

func TestMostSpecificMatchAndDenyAll(t *testing.T) {
	f := newFixture(t, "testdata/reference")
	for i := range 3 {
		r := f.ask(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.5"))
		st := r.Statuses[0]
		if r.OverallCode != over || st.CurrentLimit.RequestsPerUnit != 0 || st.LimitRemaining != 0 {
			t.Fatalf("blocked address, request %d: %v", i, r)
		}
		if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > time.Second {
			t.Fatalf("duration_until_reset = %v", d)
		}
	}
	for i := range 10 {
		if r := f.ask(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.1")); r.OverallCode != ok {
			t.Fatalf("request %d refused", i+1)
		}
	}
	if r := f.ask(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.1")); r.OverallCode != over {
		t.Fatal("11th allowed")
	}
}

func TestDepthMustMatch(t *testing.T) {
	f := newFixture(t, "testdata/reference")
	for _, d := range []*ratelimitv3.RateLimitDescriptor{desc("key", "value"), desc("key", "value", "subkey", "x", "more", "y"), desc("key", "other", "subkey", "x")} {
		r := f.ask(t, "example4", 0, d)
		if r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil {
			t.Errorf("%v: %v, want OK without a limit", d, r)
		}
	}
	r := f.ask(t, "example4", 0, desc("key", "value", "subkey", "x"))
	if r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 300 {
		t.Errorf("two levels: %v", r)
	}
}

func TestUnlimitedAndUnknown(t *testing.T) {
	f := newFixture(t, "testdata/reference")
	for range 1000 {
		r := f.ask(t, "internal", 0, desc("ldap", "x"))
		if st := r.Statuses[0]; r.OverallCode != ok || st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
			t.Fatalf("unlimited: %v", r)
		}
	}
	for _, dom := range []string{"internal", "no_such_domain"} {
		r := f.ask(t, dom, 0, desc("unknown", "x"))
		if st := r.Statuses[0]; r.OverallCode != ok || st.LimitRemaining != 0 || st.CurrentLimit != nil {
			t.Fatalf("%s: unknown descriptor: %v", dom, r)
		}
	}
}

func TestShadowMode(t *testing.T) {
	f := newFixture(t, "testdata/reference")
	a := desc("service", "auth", "user", "user-a")
	for i := range 15 {
		r := f.ask(t, "example6", 0, a)
		if r.OverallCode != ok || r.Statuses[0].Code != ok {
			t.Fatalf("shadow request %d: %s", i+1, codesOf(r))
		}
		if want := uint32(max(0, 9-i)); r.Statuses[0].LimitRemaining != want {
			t.Fatalf("shadow request %d: remaining %d, want %d", i+1, r.Statuses[0].LimitRemaining, want)
		}
	}
	if got := testutil.ToFloat64(f.svc.metrics.overLimit.WithLabelValues("example6.service.user_user-a")); got != 5 {
		t.Errorf("shadow over-limit count = %v, want 5", got)
	}
	b := desc("service", "auth", "user", "user-b")
	for range 20 {
		f.ask(t, "example6", 0, b)
	}
	if r := f.ask(t, "example6", 0, b); r.OverallCode != over {
		t.Fatal("user-b not limited")
	}
}

func TestReplaces(t *testing.T) {
	f := newFixture(t, "testdata/reference")
	one := desc("key_1", "value_1", "user", "bkthomps")
	two := desc("key_2", "value_2", "user", "bkthomps")
	// Both: only the replacing 10/s counts; the replaced limit is untouched.
	for i := range 10 {
		r := f.ask(t, "example7", 0, one, two)
		if codesOf(r) != "OK OK OK" || r.Statuses[0].CurrentLimit != nil || r.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 10 {
			t.Fatalf("request %d: %v", i+1, r)
		}
	}
	if r := f.ask(t, "example7", 0, one, two); codesOf(r) != "OVER_LIMIT OK OVER_LIMIT" {
		t.Fatal(codesOf(r))
	}
	for i := range 5 {
		if r := f.ask(t, "example7", 0, one); r.OverallCode != ok || r.Statuses[0].LimitRemaining != uint32(4-i) {
			t.Fatalf("replaced limit alone, request %d: %v", i+1, r)
		}
	}
}

func TestWildcardAndDetailedMetric(t *testing.T) {
	f := newFixture(t, "testdata/reference")
	for range 20 {
		f.ask(t, "example9", 0, desc("key1", "value_a"))
	}
	if r := f.ask(t, "example9", 0, desc("key1", "value_a")); r.OverallCode != over {
		t.Fatal("wildcard value not limited at 20")
	}
	if r := f.ask(t, "example9", 0, desc("key1", "value_b")); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 19 {
		t.Fatalf("wildcard values share a count: %v", r)
	}
	if r := f.ask(t, "example9", 0, desc("key1", "other")); r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("non-matching value limited: %v", r)
	}
	for range 11 {
		f.ask(t, "example8", 0, desc("key1", "unlisted"))
	}
	if got := testutil.ToFloat64(f.svc.metrics.overLimit.WithLabelValues("example8.key1_unlisted")); got != 1 {
		t.Errorf("detailed over-limit count = %v, want 1", got)
	}
	if got := testutil.ToFloat64(f.svc.metrics.decisions.PromCounter("example8.key1", metrics.Allowed)); got != 10 {
		t.Errorf("decisions allowed = %v, want 10", got)
	}
	// A long value is labelled with its hash, as in a key.
	long := strings.Repeat("x", 60<<10)
	for range 11 {
		f.ask(t, "example8", 0, desc("key1", long))
	}
	if got := testutil.ToFloat64(f.svc.metrics.overLimit.WithLabelValues("example8.key1_" + readBack(long))); got != 1 {
		t.Errorf("detailed over-limit count of a long value = %v, want 1", got)
	}
}

func TestHitsAddend(t *testing.T) {
	f := newFixtureYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	r := f.ask(t, "d", 4, desc("k", "a"))
	if r.Statuses[0].LimitRemaining != 6 {
		t.Fatalf("request-level hits 4: remaining %d", r.Statuses[0].LimitRemaining)
	}
	d := desc("k", "a")
	d.HitsAddend = wrapperspb.UInt64(5)
	if r := f.ask(t, "d", 4, d); r.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("descriptor hits 5 overriding 4: remaining %d", r.Statuses[0].LimitRemaining)
	}
	d.HitsAddend = wrapperspb.UInt64(0) // zero means one
	if r := f.ask(t, "d", 0, d); r.OverallCode != ok || r.Statuses[0].LimitRemaining != 0 {
		t.Fatalf("zero hits: %v", r)
	}
	if r := f.ask(t, "d", 0, desc("k", "a")); r.OverallCode != over {
		t.Fatalf("11th unit allowed")
	}
	// More than the limit can ever allow: refused, nothing taken
	// (TestCostAboveLimit has the rest of the answer).
	if r := f.ask(t, "d", 11, desc("k", "b")); r.OverallCode != over || r.Statuses[0].LimitRemaining != 10 {
		t.Fatalf("cost 11 of 10: %v", r)
	}
	if r := f.ask(t, "d", 10, desc("k", "b")); r.OverallCode != ok {
		t.Fatalf("cost 10 after a refused 11: %v", r)
	}
}

func TestEveryAlgorithm(t *testing.T) {
	f := newFixture(t, "testdata/extensions/algorithms.yaml")
	for _, tc := range []struct {
		key  string
		pass int // at one instant
	}{
		{"user", 20},         // token bucket: burst
		{"device", 60},       // leaky bucket (meter): capacity = rate
		{"account", 1000},    // sliding window counter
		{"signup_ip", 10},    // sliding log
		{"reward_device", 5}, // fixed window, weeks
		{"tenant", 1000000},  // months
		{"plan", 10000000},   // years
	} {
		n := 0
		hits := uint32(1)
		if tc.pass > 1000 {
			hits = uint32(tc.pass / 10)
		}
		for range 1000 {
			r := f.ask(t, "api", hits, desc(tc.key, "x"))
			if r.OverallCode != ok {
				break
			}
			n += int(hits)
		}
		if n != tc.pass {
			t.Errorf("%s: %d passed at one instant, want %d", tc.key, n, tc.pass)
		}
	}
	// The token bucket refills at 10/s: one token per 100 ms.
	f.clock.Advance(100 * time.Millisecond)
	if r := f.ask(t, "api", 0, desc("user", "x")); r.OverallCode != ok {
		t.Fatal("token bucket did not refill")
	}
	r := f.ask(t, "api", 0, desc("user", "x"))
	// A retry in 100ms, in the whole seconds of the rate limit fields.
	if r.OverallCode != over || r.Statuses[0].DurationUntilReset.AsDuration() != time.Second {
		t.Fatalf("token bucket refused: %v, want retry in 1s", r)
	}
}

func TestResponseHeaders(t *testing.T) {
	f := newFixtureYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 50}\n", WithResponseHeaders(true))
	hdr := func(r *rlsv3.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			m[h.Key] = h.Value
		}
		return m
	}
	r := f.ask(t, "d", 0, desc("k", "a"), desc("j", "a"))
	want := map[string]string{"RateLimit-Limit": "2, 2;w=60", "RateLimit-Remaining": "1", "RateLimit-Reset": "40"}
	if got := hdr(r); !equalMaps(got, want) {
		t.Fatalf("headers = %v, want %v", got, want)
	}
	f.ask(t, "d", 0, desc("k", "a"))
	r = f.ask(t, "d", 0, desc("k", "a"))
	want = map[string]string{"RateLimit-Limit": "2, 2;w=60", "RateLimit-Remaining": "0", "RateLimit-Reset": "40", "Retry-After": "40"}
	if got := hdr(r); !equalMaps(got, want) {
		t.Fatalf("over limit: headers = %v, want %v", got, want)
	}
	g := newFixtureYAML(t, "domain: d\n")
	if r := g.ask(t, "d", 0, desc("k", "a")); len(r.ResponseHeadersToAdd) != 0 {
		t.Fatalf("headers without the option: %v", r.ResponseHeadersToAdd)
	}
}

// TestRemainingWithinLimit: a token bucket whose burst (20) exceeds its
// requests_per_unit (10) never says more remaining than its limit, in
// either rendering: Envoy's X-RateLimit-* (limit_remaining against
// current_limit's requests_per_unit, as configured) and the
// --response-headers fields (RateLimit-Remaining against RateLimit-Limit,
// the capacity).
func TestRemainingWithinLimit(t *testing.T) {
	const yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20}\n"
	for _, c := range []struct {
		n      int    // requests at one instant
		status uint32 // the last one's limit_remaining
		header string // and RateLimit-Remaining
	}{{1, 10, "19"}, {10, 10, "10"}, {15, 5, "5"}, {20, 0, "0"}} {
		f := newFixtureYAML(t, yaml, WithResponseHeaders(true))
		var r *rlsv3.RateLimitResponse
		for range c.n {
			r = f.ask(t, "d", 0, desc("k", "a"))
		}
		st := r.Statuses[0]
		if st.LimitRemaining > st.CurrentLimit.GetRequestsPerUnit() || st.LimitRemaining != c.status {
			t.Errorf("after %d: limit_remaining %d with requests_per_unit %d, want %d", c.n, st.LimitRemaining, st.CurrentLimit.GetRequestsPerUnit(), c.status)
		}
		h := map[string]string{}
		for _, v := range r.ResponseHeadersToAdd {
			h[v.Key] = v.Value
		}
		if h["RateLimit-Limit"] != "20, 20;w=2" || h["RateLimit-Remaining"] != c.header {
			t.Errorf("after %d: RateLimit-Limit %q, RateLimit-Remaining %q, want 20, 20;w=2 and %s", c.n, h["RateLimit-Limit"], h["RateLimit-Remaining"], c.header)
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestLimitOverride(t *testing.T) {
	f := newFixtureYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	d := desc("k", "a")
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: 2 /* MINUTE */}
	f.ask(t, "d", 0, d)
	f.ask(t, "d", 0, d)
	r := f.ask(t, "d", 0, d)
	if r.OverallCode != over || r.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 || r.Statuses[0].CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("override: %v", r)
	}
	if r := f.ask(t, "d", 0, desc("k", "a")); r.Statuses[0].LimitRemaining != 9 {
		t.Fatalf("the configured limit shares the override's counter: %v", r)
	}
}

// TestLimitOverrideMultiplier: an override's unit_multiplier multiplies
// its unit (2 per 5 minutes is not 2 per minute: ignoring it let a client
// five times more through), and the answer's current_limit says so.
func TestLimitOverrideMultiplier(t *testing.T) {
	f := newFixtureYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n")
	d := desc("k", "a")
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: 2 /* MINUTE */, UnitMultiplier: wrapperspb.UInt32(5)}
	f.ask(t, "d", 0, d)
	f.ask(t, "d", 0, d)
	r := f.ask(t, "d", 0, d)
	st := r.Statuses[0]
	if r.OverallCode != over || st.CurrentLimit.GetUnitMultiplier().GetValue() != 5 || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("override of 2 per 5 minutes: %v", r)
	}
	if reset := st.DurationUntilReset.AsDuration(); reset <= time.Minute || reset > 5*time.Minute {
		t.Fatalf("duration_until_reset %v, want the 5-minute window's", reset)
	}
}

func TestInvalidRequests(t *testing.T) {
	f := newFixture(t, "testdata/reference")
	for _, req := range []*rlsv3.RateLimitRequest{
		{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b")}},
		{Domain: "d"},
		{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}},
	} {
		if _, err := f.svc.Decide(context.Background(), req); !errors.Is(err, ErrInvalid) {
			t.Errorf("%v: err = %v, want ErrInvalid", req, err)
		}
	}
}

// manyDescriptors is n descriptors of one entry, each its own value.
func manyDescriptors(n int) []*ratelimitv3.RateLimitDescriptor {
	ds := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = desc("user", strconv.Itoa(i))
	}
	return ds
}

// TestRequestSizeLimits: more descriptors, or entries in a descriptor,
// than allowed is InvalidArgument naming the limit and the number sent,
// before any store call; up to the limit is answered.
func TestRequestSizeLimits(t *testing.T) {
	svc, rec := newRecorded(t, keyConfig)
	t0 := time.Now()
	_, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: manyDescriptors(100_000)})
	t.Logf("100000 descriptors refused in %v", time.Since(t0))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "100000 descriptors, more than the limit of 64") {
		t.Fatalf("100000 descriptors: %v", err)
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("%d store calls for a refused request", n)
	}
	if r := decide(t, svc, "edge", manyDescriptors(DefaultMaxDescriptors)...); len(r.Statuses) != 64 || rec.count() != 64 {
		t.Fatalf("64 descriptors: %d statuses, %d store calls", len(r.Statuses), rec.count())
	}
	kv := make([]string, 0, 2*(DefaultMaxEntries+1))
	for i := range DefaultMaxEntries + 1 {
		kv = append(kv, "k"+strconv.Itoa(i), "v")
	}
	_, err = svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "u"), desc(kv...)}})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "descriptor 1 has 33 entries, more than the limit of 32") {
		t.Fatalf("33 entries: %v", err)
	}
	decide(t, svc, "edge", desc(kv[:2*DefaultMaxEntries]...))

	svc, _ = newRecorded(t, keyConfig, WithMaxDescriptors(2), WithMaxEntries(1))
	for _, c := range []struct {
		ds   []*ratelimitv3.RateLimitDescriptor
		want string
	}{
		{manyDescriptors(3), "3 descriptors, more than the limit of 2"},
		{[]*ratelimitv3.RateLimitDescriptor{desc("k", "v", "user", "u")}, "descriptor 0 has 2 entries, more than the limit of 1"},
	} {
		if _, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: c.ds}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
	decide(t, svc, "edge", manyDescriptors(2)...)
}

// TestHTTPRequestSizeLimits: the JSON API answers too many descriptors
// with 400 and the reason: 20,000 (what fits in its 1 MB body) and 100,000
// (which does not).
func TestHTTPRequestSizeLimits(t *testing.T) {
	svc, rec := newRecorded(t, keyConfig)
	srv := httptest.NewServer(svc.HTTPHandler())
	defer srv.Close()
	body := func(n int) string {
		var b strings.Builder
		b.WriteString(`{"domain":"edge","descriptors":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"entries":[{"key":"user","value":"%d"}]}`, i)
		}
		b.WriteString(`]}`)
		return b.String()
	}
	for _, c := range []struct {
		n    int
		want string
	}{
		{65, "65 descriptors, more than the limit of 64"},
		{20_000, "20000 descriptors, more than the limit of 64"},
		{100_000, "request body too large"},
	} {
		b := body(c.n)
		for _, path := range []string{"/json", "/v1/check"} {
			t0 := time.Now()
			resp, out := post(t, srv.URL+path, b)
			t.Logf("%s: %d descriptors (%d bytes) answered %d in %v", path, c.n, len(b), resp.StatusCode, time.Since(t0))
			if resp.StatusCode != 400 || !strings.Contains(out, c.want) {
				t.Errorf("%s, %d descriptors: %d %s, want 400 %q", path, c.n, resp.StatusCode, out, c.want)
			}
		}
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("%d store calls for refused requests", n)
	}
}

// failing is a store that always fails.
type failing struct{}

func (failing) Take(context.Context, ratekeeper.Request) (ratekeeper.Decision, error) {
	return ratekeeper.Decision{}, errors.New("store down")
}
func (failing) Refund(context.Context, ratekeeper.Request, ratekeeper.Decision) error { return nil }

func TestStoreErrors(t *testing.T) {
	c, _ := Load("testdata/reference")
	rules, _ := Compile(c)
	svc := NewService(failing{}, rules)
	_, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "mongo_cps", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("database", "users")}})
	if err == nil || !strings.Contains(err.Error(), "Unavailable") {
		t.Fatalf("err = %v, want Unavailable", err)
	}
	srv := httptest.NewServer(svc.HTTPHandler())
	defer srv.Close()
	resp, _ := post(t, srv.URL+"/v1/check", `{"domain":"mongo_cps","descriptors":[{"entries":[{"key":"database","value":"users"}]}]}`)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("HTTP status %d, want 503", resp.StatusCode)
	}
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestHTTP(t *testing.T) {
	f := newFixtureYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2, name: two}\n", WithResponseHeaders(true))
	srv := httptest.NewServer(f.svc.HTTPHandler())
	defer srv.Close()

	body := `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],"hits_addend":1}]}`
	resp, b := post(t, srv.URL+"/v1/check", body)
	var cr CheckResponse
	if err := json.Unmarshal([]byte(b), &cr); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || cr.OverallCode != "OK" || cr.Statuses[0].LimitRemaining != 1 || cr.Statuses[0].DurationUntilReset != 40 ||
		*cr.Statuses[0].CurrentLimit != (CheckLimit{Name: "two", RequestsPerUnit: 2, Unit: "MINUTE"}) || resp.Header.Get("RateLimit-Remaining") != "1" {
		t.Fatalf("/v1/check: %d %s", resp.StatusCode, b)
	}
	// The reference's /json shape, proto3 JSON names.
	resp, b = post(t, srv.URL+"/json", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`)
	if resp.StatusCode != 200 || !strings.Contains(b, `"overallCode":"OK"`) || !strings.Contains(b, `"requestsPerUnit":2`) {
		t.Fatalf("/json: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, srv.URL+"/json", `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`)
	if resp.StatusCode != 429 || !strings.Contains(b, `"overallCode":"OVER_LIMIT"`) || resp.Header.Get("Retry-After") != "40" {
		t.Fatalf("/json over the limit: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, srv.URL+"/v1/check", body)
	if resp.StatusCode != 429 || !strings.Contains(b, `"OVER_LIMIT"`) {
		t.Fatalf("/v1/check over the limit: %d %s", resp.StatusCode, b)
	}
	for _, bad := range []struct{ path, body string }{
		{"/v1/check", `{"domain":"d","descriptors":[],"extra":1}`},
		{"/v1/check", `{"domain":"d","descriptors":[]}`},
		{"/v1/check", `not json`},
		{"/json", `{"domain":"d","nope":1}`},
		{"/json", `{"descriptors":[{"entries":[{"key":"k"}]}]}`},
	} {
		if resp, b := post(t, srv.URL+bad.path, bad.body); resp.StatusCode != 400 || !strings.Contains(b, `"error"`) {
			t.Errorf("%s %s: %d %s, want 400", bad.path, bad.body, resp.StatusCode, b)
		}
	}
	if resp, err := http.Get(srv.URL + "/healthcheck"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthcheck: %v %v", resp, err)
	}
}

// FuzzDecide checks invariants of answers for arbitrary descriptors against
// the reference examples: one status per descriptor, remaining within the
// limit, overall OVER_LIMIT iff a status is.
func FuzzDecide(f *testing.F) {
	c, err := Load("testdata/reference")
	if err != nil {
		f.Fatal(err)
	}
	rules, err := Compile(c)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("messaging", "message_type", "marketing", "to_number", "1", uint32(0), false)
	f.Add("example7", "key_1", "value_1", "user", "bkthomps", uint32(3), true)
	f.Add("example9", "key1", "value", "", "", uint32(25), false)
	f.Add("edge_proxy_per_ip", "remote_address", "50.0.0.5", "", "", uint32(1), true)
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, hits uint32, aon bool) {
		ms := memstore.New(memstore.WithClock(storetest.NewClock(start)))
		defer ms.Close()
		svc := NewService(ms, rules, WithAllOrNothing(aon), WithResponseHeaders(true))
		d1 := desc(k1, v1)
		d2 := desc(k1, v1, k2, v2)
		if k2 == "" {
			d2 = desc(k1, v1)
		}
		for range 3 {
			resp, err := svc.Decide(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{d1, d2}})
			if domain == "" {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("empty domain: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Statuses) != 2 {
				t.Fatalf("%d statuses", len(resp.Statuses))
			}
			anyOver := false
			for _, st := range resp.Statuses {
				anyOver = anyOver || st.Code == over
				if l := st.CurrentLimit; l != nil && st.LimitRemaining > l.RequestsPerUnit {
					t.Fatalf("remaining %d above the limit %d", st.LimitRemaining, l.RequestsPerUnit)
				}
			}
			if anyOver != (resp.OverallCode == over) {
				t.Fatalf("overall %v with statuses %v", resp.OverallCode, resp.Statuses)
			}
		}
	})
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }

func TestSetRulesForgetsGoneRules(t *testing.T) {
	f := newFixtureYAML(t, "domain: d\ndescriptors:\n  - key: gone\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: kept\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	f.ask(t, "d", 0, desc("gone", "x"), desc("kept", "x"))
	f.ask(t, "d", 0, desc("gone", "x"), desc("kept", "x"))
	d, err := ParseDomain("new.yaml", []byte("domain: d\ndescriptors:\n  - key: kept\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Compile(&Config{Domains: []DomainConfig{*d}})
	if err != nil {
		t.Fatal(err)
	}
	f.svc.SetRules(rules)
	n, err := testutil.GatherAndCount(f.reg, "ratekeeper_decisions_total", "ratekeeper_rls_over_limit_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 { // kept: allowed, limited, shadow_limited, and its over-limit count
		t.Fatalf("%d series after the reload, want 4", n)
	}
	if r := f.ask(t, "d", 0, desc("gone", "x")); r.Statuses[0].CurrentLimit != nil {
		t.Fatalf("a removed rule still applies: %v", r)
	}
}

// TestNewMetricsTwice: registering the service's metrics twice on one
// registry is an error, not a panic.
func TestNewMetricsTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg, nil); err == nil {
		t.Error("a second registration: no error")
	}
}

// TestCostAboveLimit: a cost more than a limit can ever allow is OVER_LIMIT
// (Envoy refuses it whatever its failure_mode_deny, where an error would
// let it through by default) with what is really left, no
// duration_until_reset and no Retry-After, since no wait makes it pass, and
// a raw_body that says so; nothing is taken. Over gRPC (ShouldRateLimit)
// and both JSON endpoints.
func TestCostAboveLimit(t *testing.T) {
	f := newFixtureYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: j\n    rate_limit: {unit: minute, requests_per_unit: 1}\n", WithResponseHeaders(true))
	hdr := func(r *rlsv3.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			m[h.Key] = h.Value
		}
		return m
	}
	f.ask(t, "d", 3, desc("k", "a"))
	check := func(what string, r *rlsv3.RateLimitResponse, i int) {
		t.Helper()
		st := r.Statuses[i]
		if r.OverallCode != over || st.Code != over || st.LimitRemaining != 7 || st.DurationUntilReset != nil || st.CurrentLimit.GetRequestsPerUnit() != 10 {
			t.Errorf("%s: %v, want OVER_LIMIT, remaining 7, no duration_until_reset", what, r)
		}
		if h := hdr(r); h["Retry-After"] != "" {
			t.Errorf("%s: Retry-After %q for a request that can never pass", what, h["Retry-After"])
		}
		if !strings.Contains(string(r.RawBody), "cost 11") || !strings.Contains(string(r.RawBody), "can never pass") {
			t.Errorf("%s: raw_body %q", what, r.RawBody)
		}
	}
	r := f.ask(t, "d", 11, desc("k", "a"))
	check("cost 11 of 10", r, 0)
	if h := hdr(r); h["RateLimit-Remaining"] != "7" || h["RateLimit-Reset"] != "" {
		t.Errorf("cost 11 of 10: headers %v, want RateLimit-Remaining 7 and no RateLimit-Reset", h)
	}
	// Beside a limit that counted a refusal, still no retry hint: the
	// request can never pass.
	f.ask(t, "d", 1, desc("j", "a"))
	d := desc("k", "a")
	d.HitsAddend = wrapperspb.UInt64(11)
	one := desc("j", "a")
	one.HitsAddend = wrapperspb.UInt64(1)
	check("cost 11 beside a refusal", f.ask(t, "d", 0, one, d), 1)
	// Nothing was taken: seven pass.
	if r := f.ask(t, "d", 7, desc("k", "a")); r.OverallCode != ok {
		t.Fatalf("cost 7 after refused 11s: %v", r)
	}

	srv := httptest.NewServer(f.svc.HTTPHandler())
	defer srv.Close()
	resp, b := post(t, srv.URL+"/v1/check", `{"domain":"d","hits_addend":11,"descriptors":[{"entries":[{"key":"k","value":"b"}]}]}`)
	var cr CheckResponse
	if err := json.Unmarshal([]byte(b), &cr); err != nil {
		t.Fatal(err)
	}
	if st := cr.Statuses[0]; resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "" || cr.Headers["Retry-After"] != "" ||
		st.Code != "OVER_LIMIT" || !st.CostAboveLimit || st.LimitRemaining != 10 || st.DurationUntilReset != 0 {
		t.Errorf("/v1/check cost 11 of 10: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	resp, b = post(t, srv.URL+"/json", `{"domain":"d","hitsAddend":11,"descriptors":[{"entries":[{"key":"k","value":"b"}]}]}`)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "" || strings.Contains(b, "durationUntilReset") ||
		!strings.Contains(b, `"limitRemaining":10`) || !strings.Contains(b, `"rawBody"`) {
		t.Errorf("/json cost 11 of 10: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
}

// TestSlidingResetWithinWindow: the sliding algorithms' waits are a window
// plus the clock's tick (a window's edge is inclusive); the headers do not
// round the tick up into a second beyond the window (httplimit's
// TestResetWithinWindow holds the gateway to the same).
func TestSlidingResetWithinWindow(t *testing.T) {
	for _, a := range []string{"sliding_log", "sliding_window"} {
		f := newFixtureYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: "+a+"}\n", WithResponseHeaders(true))
		f.clock.Set(start.Add(40 * time.Second)) // a window's edge
		f.ask(t, "d", 0, desc("k", "a"))
		r := f.ask(t, "d", 0, desc("k", "a"))
		got := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		if got["RateLimit-Limit"] != "1, 1;w=60" || got["RateLimit-Reset"] != "60" || got["Retry-After"] != "60" {
			t.Errorf("%s: %v, want RateLimit-Reset and Retry-After 60 for w=60", a, got)
		}
	}
}
