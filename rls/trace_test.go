package rls

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"

	"github.com/ratekeeper/ratekeeper/internal/redistest"
	"github.com/ratekeeper/ratekeeper/internal/server/tracing/tracetest"
	"github.com/ratekeeper/ratekeeper/rules"
	"github.com/ratekeeper/ratekeeper/storeconfig"
)

// With OTEL_TRACES_EXPORTER=otlp, a ShouldRateLimit call's span continues
// the trace of its gRPC metadata, the decision is its child, and each
// Redis call the decision's. POST /v1/check continues its traceparent
// header the same way.
func TestServerTraces(t *testing.T) {
	const grpcTrace, httpTrace = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"
	rcv := tracetest.Start(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+rcv.GRPC)
	t.Setenv("OTEL_SERVICE_NAME", "")
	ctx, stop := context.WithCancel(context.Background())
	s, client := runServerCtx(t, ctx, topConfig, ServerOptions{Store: storeconfig.Config{URL: redistest.Server(t), Timeout: time.Minute}.WithDefaults()})
	if s.tr == nil {
		t.Fatal("tracing is off")
	}
	md := metadata.Pairs("traceparent", "00-"+grpcTrace+"-00f067aa0ba902b7-01")
	req := &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("api_key", "sk_live_secret")}}
	if _, err := client.ShouldRateLimit(metadata.NewOutgoingContext(context.Background(), md), req); err != nil {
		t.Fatal(err)
	}
	hreq, err := http.NewRequest("POST", "http://"+s.HTTPAddr().String()+"/v1/check",
		strings.NewReader(`{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"sk_live_other"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	hreq.Header.Set("Traceparent", "00-"+httpTrace+"-b7ad6b7169203331-01")
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/check: %d", resp.StatusCode)
	}
	stop() // Run's return sends the spans not yet sent
	spans := rcv.Await(t, 30*time.Second, func(s []tracetest.Span) bool { return len(s) >= 6 })
	byTrace := map[string][]tracetest.Span{}
	for _, sp := range spans {
		if sp.Service != "ratekeeper-serve" {
			t.Fatalf("span %+v: want service ratekeeper-serve", sp)
		}
		byTrace[sp.TraceID] = append(byTrace[sp.TraceID], sp)
	}
	for _, c := range []struct{ trace, parent, server, key string }{
		{grpcTrace, "00f067aa0ba902b7", "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "sk_live_secret"},
		{httpTrace, "b7ad6b7169203331", "POST", "sk_live_other"},
	} {
		checkTrace(t, byTrace[c.trace], c.parent, c.server, "api.api_key api_key="+rules.Fingerprint(c.key))
	}
}

// checkTrace demands a server span under parent, a decision under it with
// matched as its descriptors, and a Redis call under the decision.
func checkTrace(t *testing.T, spans []tracetest.Span, parent, server, matched string) {
	t.Helper()
	byName := map[string]tracetest.Span{}
	for _, sp := range spans {
		byName[sp.Name] = sp
	}
	srv, dec, call := byName[server], byName["ratekeeper.decide"], byName["redis take"]
	switch {
	case srv.ParentID != parent || srv.Kind != "server":
		t.Fatalf("spans %+v: want a server span %q under %s", spans, server, parent)
	case dec.ParentID != srv.SpanID || dec.Attrs["ratekeeper.matched"] != matched || dec.Attrs["ratekeeper.result"] != "allowed" ||
		dec.Attrs["ratekeeper.domain"] != "api" || dec.Attrs["ratekeeper.store_mode"] != "exact" || dec.Attrs["ratekeeper.fallback"] != "false":
		t.Fatalf("decision %+v under %+v: want matched %q", dec, srv, matched)
	case call.ParentID != dec.SpanID || call.Kind != "client" || call.Attrs["db.system.name"] != "redis":
		t.Fatalf("redis call %+v: want a client span under the decision %+v", call, dec)
	}
}

// Tracing off and the lists of limited clients cost a decision far from
// its limit no allocation.
func TestDecideOffAllocatesNothingMore(t *testing.T) {
	const yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n"
	plain := newFixtureYAML(t, yaml)
	served := newFixtureYAML(t, yaml, withTop(newBoard()), withTracing(nil, "memory"))
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "v")}}
	allocs := func(svc *Service) float64 {
		return testing.AllocsPerRun(100, func() {
			if _, err := svc.Decide(context.Background(), req); err != nil {
				t.Fatal(err)
			}
		})
	}
	if a, b := allocs(plain.svc), allocs(served.svc); b != a {
		t.Fatalf("%v allocations a decision with the board and tracing off, %v without", b, a)
	}
}
