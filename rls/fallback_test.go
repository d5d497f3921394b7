package rls

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/ratekeeper/ratekeeper/failsafe"
	"github.com/ratekeeper/ratekeeper/internal/server/metrics"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// fallbackYAML has a limit of 2 per minute on k, and none at all on z
// (requests_per_unit 0: every request over, which needs no store).
const fallbackYAML = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2, name: two}\n  - key: z\n    rate_limit: {unit: minute, requests_per_unit: 0}\n"

// fallbackService answers from a failsafe store whose primary is down.
func fallbackService(t *testing.T, policy failsafe.Policy, opts ...Option) (*Service, *Metrics) {
	t.Helper()
	p := t.TempDir() + "/c.yaml"
	if err := writeFile(p, fallbackYAML); err != nil {
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
	fs := failsafe.New(failing{}, failsafe.WithPolicy(policy), failsafe.WithLocalStore(memstore.New()))
	t.Cleanup(func() { fs.Close() })
	sm, err := NewMetrics(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return NewService(fs, rules, append([]Option{WithMetrics(sm), WithResponseHeaders(true)}, opts...)...), sm
}

// TestFallbackAnswers: a descriptor the failure policy decided without
// counting gets its code and no current_limit, limit_remaining or
// duration_until_reset (Envoy would make X-RateLimit-* headers of them);
// under deny the answer is OVER_LIMIT with a raw_body saying the store is
// unavailable and the policy's Retry-After; metrics count as before. The
// local policy's decisions keep their figures.
func TestFallbackAnswers(t *testing.T) {
	for _, aon := range []bool{false, true} {
		t.Run(fmt.Sprintf("all_or_nothing=%v", aon), func(t *testing.T) {
			t.Run("allow", func(t *testing.T) {
				svc, sm := fallbackService(t, failsafe.Allow, WithAllOrNothing(aon))
				r, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds(desc("k", "a"))})
				if err != nil {
					t.Fatal(err)
				}
				st := r.Statuses[0]
				if r.OverallCode != ok || st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != 0 || st.DurationUntilReset != nil ||
					len(r.RawBody) != 0 || len(r.ResponseHeadersToAdd) != 0 {
					t.Fatalf("%v", r)
				}
				if got := testutil.ToFloat64(sm.decisions.PromCounter("d.k", metrics.Allowed)); got != 1 {
					t.Errorf("allowed count %v", got)
				}
			})
			t.Run("deny", func(t *testing.T) {
				svc, sm := fallbackService(t, failsafe.Deny, WithAllOrNothing(aon))
				r, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds(desc("k", "a"))})
				if err != nil {
					t.Fatal(err)
				}
				st := r.Statuses[0]
				if r.OverallCode != over || st.Code != over || st.CurrentLimit != nil || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
					t.Fatalf("%v", r)
				}
				if !strings.Contains(string(r.RawBody), "store is unavailable: retry in 1 s") {
					t.Errorf("raw_body %q", r.RawBody)
				}
				if len(r.ResponseHeadersToAdd) != 1 || r.ResponseHeadersToAdd[0].Key != "Retry-After" || r.ResponseHeadersToAdd[0].Value != "1" {
					t.Errorf("headers %v, want Retry-After: 1 alone", r.ResponseHeadersToAdd)
				}
				if got := testutil.ToFloat64(sm.decisions.PromCounter("d.k", metrics.Limited)); got != 1 {
					t.Errorf("limited count %v", got)
				}
				if got := testutil.ToFloat64(sm.overLimit.WithLabelValues("d.k")); got != 1 {
					t.Errorf("over-limit count %v", got)
				}
				// The gRPC codec writes raw_body (through proto's own
				// marshalling) and Envoy reads it back.
				b, err := newCodec().Marshal(r)
				if err != nil {
					t.Fatal(err)
				}
				var back rlsv3.RateLimitResponse
				if err := proto.Unmarshal(b.Materialize(), &back); err != nil || !proto.Equal(&back, r) {
					t.Fatalf("codec: %v %v", err, &back)
				}

				// A limit that refuses by itself (requests_per_unit 0)
				// beside the policy's refusal: over a real limit, so no
				// outage body and its own figures.
				r, _ = svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds(desc("k", "a"), desc("z", "a"))})
				if r.OverallCode != over || len(r.RawBody) != 0 || r.Statuses[1].CurrentLimit == nil || r.Statuses[0].CurrentLimit != nil {
					t.Fatalf("with a limit of zero: %v", r)
				}
			})
			t.Run("local", func(t *testing.T) {
				svc, _ := fallbackService(t, failsafe.Local, WithAllOrNothing(aon))
				r, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: ds(desc("k", "a"))})
				if err != nil {
					t.Fatal(err)
				}
				st := r.Statuses[0]
				if r.OverallCode != ok || st.CurrentLimit == nil || st.LimitRemaining != 1 || st.DurationUntilReset == nil || len(r.RawBody) != 0 {
					t.Fatalf("%v", r)
				}
			})
		})
	}
}

// TestFallbackHTTP: the JSON API marks a descriptor the failure policy
// decided ("fallback": true, no current_limit), and answers a request only
// the policy refused with 503 and its Retry-After.
func TestFallbackHTTP(t *testing.T) {
	body := `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"a"}]}]}`
	for _, c := range []struct {
		policy  failsafe.Policy
		code    int
		overall string
	}{
		{failsafe.Allow, 200, "OK"},
		{failsafe.Deny, 503, "OVER_LIMIT"},
	} {
		svc, _ := fallbackService(t, c.policy)
		srv := httptest.NewServer(svc.HTTPHandler())
		resp, b := post(t, srv.URL+"/v1/check", body)
		var cr CheckResponse
		if err := json.Unmarshal([]byte(b), &cr); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != c.code || cr.OverallCode != c.overall || !cr.Statuses[0].Fallback || cr.Statuses[0].CurrentLimit != nil {
			t.Errorf("%s: /v1/check %d %s", c.policy, resp.StatusCode, b)
		}
		if c.code == 503 && resp.Header.Get("Retry-After") != "1" {
			t.Errorf("%s: /v1/check Retry-After %q", c.policy, resp.Header.Get("Retry-After"))
		}
		resp, b = post(t, srv.URL+"/json", body)
		if resp.StatusCode != c.code || strings.Contains(b, "currentLimit") || strings.Contains(b, "limitRemaining") {
			t.Errorf("%s: /json %d %s", c.policy, resp.StatusCode, b)
		}
		srv.Close()
	}
}

// ds is a request's descriptors.
func ds(d ...*ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor { return d }
