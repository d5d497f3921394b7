package rls

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
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
// enforced descriptor still refuses; with all-or-nothing, the quota
// descriptor is decided on its own.
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
