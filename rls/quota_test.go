package rls

import (
	"context"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/memstore"
)

const quotaYAML = `domain: q
descriptors:
  - key: backend
    value: premium
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 4}
`

// A descriptor in quota mode past its limit reports OVER_LIMIT in its
// status while the overall code stays OK, and counts over_limit; an
// enforced descriptor still refuses, with all-or-nothing or without.
func TestQuotaMode(t *testing.T) {
	for _, aon := range []bool{false, true} {
		f := newFixtureYAML(t, quotaYAML, WithAllOrNothing(aon))
		want := []string{"OK OK OK", "OK OK OK", "OK OVER_LIMIT OK", "OK OVER_LIMIT OK", "OVER_LIMIT OVER_LIMIT OVER_LIMIT"}
		for i, w := range want {
			r := f.ask(t, "q", 0, desc("backend", "premium"), desc("user", "alice"))
			if got := codesOf(r); got != w {
				t.Fatalf("all-or-nothing %t, request %d: %s, want %s", aon, i+1, got, w)
			}
			if i == 2 && r.Statuses[0].LimitRemaining != 0 {
				t.Errorf("request 3: quota descriptor remaining %d, want 0", r.Statuses[0].LimitRemaining)
			}
		}
		if n := testutil.ToFloat64(f.svc.metrics.decisions.PromCounter("q.backend_premium", metrics.OverLimit)); n != 3 {
			t.Errorf("all-or-nothing %t: over_limit counted %v, want 3", aon, n)
		}
		if n := testutil.ToFloat64(f.svc.metrics.decisions.PromCounter("q.user", metrics.Limited)); n != 1 {
			t.Errorf("all-or-nothing %t: user limited %v, want 1", aon, n)
		}
	}
}

func TestQuotaModeWithShadowRefused(t *testing.T) {
	_, err := ParseDomain("f.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    shadow_mode: true\n    quota_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"))
	if err == nil || !strings.Contains(err.Error(), "f.yaml:5: descriptors[0].quota_mode: shadow_mode answers OK") {
		t.Fatalf("got %v", err)
	}
}

// A quota acts on a count only, as the gateway's over_limit does: while
// the store is down, the failure policy's refusal, which counted nothing,
// leaves a quota descriptor within its limit. Else every request of an
// outage would be routed as over its quota. An enforced descriptor beside
// it is still refused by the policy. Peek answers the same.
func TestQuotaModeUncountedRefusal(t *testing.T) {
	p := t.TempDir() + "/c.yaml"
	if err := writeFile(p, quotaYAML); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, aon := range []bool{false, true} {
		fs := failsafe.New(failing{}, failsafe.WithPolicy(failsafe.Deny), failsafe.WithLocalStore(memstore.New()))
		t.Cleanup(func() { fs.Close() })
		sm, err := NewMetrics(prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		svc := NewService(fs, rules, WithMetrics(sm), WithAllOrNothing(aon))
		for _, c := range []struct {
			ds   []*ratelimitv3.RateLimitDescriptor
			want string
		}{
			{ds(desc("backend", "premium")), "OK OK"},
			{ds(desc("backend", "premium"), desc("user", "alice")), "OVER_LIMIT OK OVER_LIMIT"},
		} {
			r, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "q", Descriptors: c.ds})
			if err != nil {
				t.Fatal(err)
			}
			if got := codesOf(r); got != c.want {
				t.Errorf("all-or-nothing %t, %d descriptors: %s, want %s", aon, len(c.ds), got, c.want)
			}
			r, err = svc.Peek(context.Background(), &rlsv3.RateLimitRequest{Domain: "q", Descriptors: c.ds})
			if err != nil {
				t.Fatal(err)
			}
			if got := codesOf(r); got != c.want {
				t.Errorf("all-or-nothing %t, %d descriptors, peeked: %s, want %s", aon, len(c.ds), got, c.want)
			}
		}
		if n := testutil.ToFloat64(sm.decisions.PromCounter("q.backend_premium", metrics.OverLimit)); n != 0 {
			t.Errorf("all-or-nothing %t: over_limit counted %v while the store was down, want 0", aon, n)
		}
	}
}

// With all-or-nothing, a request another descriptor refuses takes nothing
// from a quota, as the gateway's over_limit rules: a client hammering its
// per-hour limit does not spend its quota. Without it, every descriptor
// within its limit counts, as in the reference service.
func TestQuotaModeRefusedTakesNothing(t *testing.T) {
	const y = `domain: q
descriptors:
  - key: backend
    value: premium
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	for _, c := range []struct {
		aon  bool
		want []uint32 // the quota's remaining after each request
	}{{true, []uint32{2, 2, 2, 1}}, {false, []uint32{2, 1, 0, 0}}} {
		f := newFixtureYAML(t, y, WithAllOrNothing(c.aon))
		for i, user := range []string{"alice", "alice", "alice", "bob"} {
			r := f.ask(t, "q", 0, desc("backend", "premium"), desc("user", user))
			if got := r.Statuses[0].LimitRemaining; got != c.want[i] {
				t.Fatalf("all-or-nothing %t, request %d (%s, %s): quota remaining %d, want %d", c.aon, i+1, user, codesOf(r), got, c.want[i])
			}
		}
	}
}
