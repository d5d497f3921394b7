package tracing_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratekeeper/ratekeeper/internal/server/tracing"
	"github.com/ratekeeper/ratekeeper/internal/server/tracing/tracetest"
)

// Off unless OTEL_TRACES_EXPORTER asks, and then nil: every method a no-op.
func TestOffByDefault(t *testing.T) {
	for _, v := range []string{"", "none"} {
		t.Setenv("OTEL_TRACES_EXPORTER", v)
		tr, err := tracing.FromEnv(context.Background(), "ratekeeper", "test")
		if err != nil || tr != nil {
			t.Fatalf("OTEL_TRACES_EXPORTER=%q: %v, %v; want nil, nil", v, tr, err)
		}
		ctx, s := tr.Server(context.Background(), "request", http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}})
		s.Str("k", "v")
		s.End()
		h := http.Header{}
		tr.Inject(ctx, h)
		if len(h) != 0 || s.TraceID() != "" {
			t.Fatalf("off, a span injected %v, trace id %q", h, s.TraceID())
		}
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if tr, err := tracing.FromEnv(context.Background(), "ratekeeper", "test"); err != nil || tr != nil {
		t.Fatalf("OTEL_SDK_DISABLED=true: %v, %v; want nil, nil", tr, err)
	}
}

// A value the exporter does not know is an error naming the variable.
func TestTyposAreErrors(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"OTEL_TRACES_EXPORTER", "oltp", "OTEL_TRACES_EXPORTER"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grcp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
	} {
		t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
		t.Setenv(c.name, c.value)
		_, err := tracing.FromEnv(context.Background(), "ratekeeper", "test")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.value) {
			t.Fatalf("%s=%s: %v; want an error naming both", c.name, c.value, err)
		}
		t.Setenv(c.name, "")
	}
}

// Spans reach a real OTLP receiver over both protocols: a request's span
// continues the incoming traceparent, its children hang under it, and the
// trace context goes on to the next hop.
func TestExportsToOTLP(t *testing.T) {
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, proto := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(proto, "/", "_"), func(t *testing.T) {
			r := tracetest.Start(t)
			t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
			endpoint := r.HTTP
			if proto == "grpc" {
				endpoint = "http://" + r.GRPC
			}
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			t.Setenv("OTEL_SERVICE_NAME", "")
			ctx := context.Background()
			tr, err := tracing.FromEnv(ctx, "ratekeeper-test", "v1")
			if err != nil || tr == nil {
				t.Fatalf("FromEnv: %v, %v", tr, err)
			}
			rctx, req := tr.Server(ctx, "request", http.Header{"Traceparent": {parent}})
			_, dec := tr.Internal(rctx, "decide")
			dec.Str("ratekeeper.result", "refused")
			dec.Int("ratekeeper.rules", 2)
			_, call := tr.Client(rctx, "redis")
			call.Fail(context.DeadlineExceeded)
			call.End()
			dec.End()
			next := http.Header{}
			tr.Inject(rctx, next)
			req.End()
			if err := tr.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if got := next.Get("Traceparent"); !strings.HasPrefix(got, "00-0af7651916cd43dd8448eb211c80319c-") || strings.Contains(got, "b7ad6b7169203331") {
				t.Fatalf("next hop's traceparent %q: want the trace, with the request's span as parent", got)
			}
			spans := r.Await(t, 5*time.Second, func(s []tracetest.Span) bool { return len(s) == 3 })
			by := map[string]tracetest.Span{}
			for _, s := range spans {
				by[s.Name] = s
				if s.TraceID != "0af7651916cd43dd8448eb211c80319c" || s.Service != "ratekeeper-test" {
					t.Fatalf("span %+v: want trace 0af7…, service ratekeeper-test", s)
				}
			}
			if by["request"].ParentID != "b7ad6b7169203331" || by["request"].Kind != "server" {
				t.Fatalf("request span %+v: want a server span under the incoming parent", by["request"])
			}
			if by["decide"].ParentID != by["request"].SpanID || by["decide"].Attrs["ratekeeper.result"] != "refused" || by["decide"].Attrs["ratekeeper.rules"] != "2" {
				t.Fatalf("decide span %+v", by["decide"])
			}
			if by["redis"].ParentID != by["request"].SpanID || by["redis"].Kind != "client" || !by["redis"].Error {
				t.Fatalf("redis span %+v", by["redis"])
			}
		})
	}
}

// FuzzServer gives the request span any trace context a client may send:
// it never fails, and a span comes either under the parent the header
// names, when the header is valid, or in a new trace.
func FuzzServer(f *testing.F) {
	f.Add("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v")
	f.Add("00-00000000000000000000000000000000-0000000000000000-01", "")
	f.Add("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ",,=")
	f.Add("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra", "k=%zz")
	f.Add(strings.Repeat("0", 4096), strings.Repeat("k=v,", 300))
	rcv := tracetest.Start(f)
	f.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	f.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	f.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+rcv.GRPC)
	tr, err := tracing.FromEnv(context.Background(), "fuzz", "test")
	if err != nil || tr == nil {
		f.Fatal(tr, err)
	}
	f.Cleanup(func() { tr.Shutdown(context.Background()) })
	f.Fuzz(func(t *testing.T, traceparent, baggage string) {
		h := http.Header{"Traceparent": {traceparent}, "Baggage": {baggage}}
		ctx, s := tr.Server(context.Background(), "request", h)
		id := s.TraceID()
		if len(id) != 32 || id == strings.Repeat("0", 32) {
			t.Fatalf("trace id %q from traceparent %q", id, traceparent)
		}
		// The next hop's headers start as the client's, as a proxy's do.
		next := http.Header{"Traceparent": {traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, "Tracestate": {"client=1"}, "Baggage": {baggage}}
		tr.Inject(ctx, next)
		if got := next.Values("Traceparent"); len(got) != 1 || !strings.Contains(got[0], id) {
			t.Fatalf("the next hop's traceparent %q: want one, with the trace %s", got, id)
		}
		if ts := next.Values("Tracestate"); len(ts) > 0 && !strings.Contains(traceparent, id) {
			t.Fatalf("the next hop's tracestate %q beside a new trace (client sent %q)", ts, traceparent)
		}
		if b := next.Values("Baggage"); len(b) > 1 || len(b) == 1 && b[0] == "" {
			t.Fatalf("the next hop's baggage %q", b)
		}
		s.End()
	})
}
